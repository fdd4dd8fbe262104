// The `weft` CLI end to end (built by `npm run build`): greedy generation through the engine in
// headless Chromium's WebGPU equals the TS reference, and bad input exits non-zero in one line.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { weft } from '../helpers/cli.js';
import { greedy } from '../helpers/reference.js';

let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-cli-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const PROMPT = [5, 17, 99, 3, 250, 11, 42];

/** Writes an f32 fixture of `family` to `modelDir` and returns the reference's greedy `n` ids. */
async function fixtureWithReference(modelDir: string, family: ModelFamily, seed: number, n: number) {
  await writeFixtureDir(modelDir, family, 'f32', seed);
  const files = await pathModel(modelDir);
  const opened = await openModel(files);
  const ref = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: 64,
  });
  await files.close?.();
  return greedy(ref, PROMPT, n);
}

// One family through the CLI: the CLI's path does not depend on it. Each family's GPU ids against
// the reference are test/model/gpu/forward.gpu.test.ts's, and llama's and qwen3's step counters
// test/model/gpu/counters.gpu.test.ts's; qwen2 (q/k/v bias inside the fused kernel) is the one run here.
describe.each(['qwen2'] as ModelFamily[])('weft generate, %s', (family) => {
  it('greedy 32 tokens with f32 weights equal the TS reference', async () => {
    const modelDir = join(dir, family);
    const want = await fixtureWithReference(modelDir, family, 3, 32);
    const out = await weft([
      'generate',
      '--model',
      modelDir,
      '--prompt-ids',
      PROMPT.join(','),
      '--max-tokens',
      '32',
      '--quant',
      'f32',
      '--temperature',
      '0',
      '--json',
    ]);
    expect(out.stderr).toBe('');
    expect(out.code).toBe(0);
    const json = JSON.parse(out.stdout) as { ids: number[]; stats: Record<string, number | string> };
    // The fixture's EOS ids (2, 302) may end generation early; compare what was generated.
    expect(json.ids).toEqual(want.slice(0, json.ids.length));
    expect(json.ids.length === 32 || [2, 302].includes(want[json.ids.length]!)).toBe(true);
    expect(json.stats.prompt_tokens).toBe(PROMPT.length);
    expect(json.stats.target_passes).toBeGreaterThan(0);
    // Chromium's adapter here is SwiftShader: the serial kernel forms, named in the stats.
    expect(json.stats.adapter).toMatch(/swiftshader/i);
    expect(json.stats.kernels).toBe('serial');
    // What a plain decode step asks of the GPU (test/model/gpu/counters.gpu.test.ts has the formula):
    // per layer 4 fused matmuls, the fused q|k|v → cache kernel and attention (every family: bias
    // and QK-norm are inside the fused kernel); once the embedding, the LM head (the final norm
    // folded in) and the serial forms' sampler.
    const perLayer = 6;
    // The engine decodes in the GPU-resident loop (GpuRunner.decode). Its first step rewrites the
    // uniform blocks that hold T (the prefill ran 7 tokens): its inputs, the 4 matmuls of each
    // layer and the embedding. Every later step writes its inputs only. A stop on EOS comes with
    // one step queued past it, counted too.
    const first = 1 + 4 * 2 + 1;
    const stoppedByEos = json.ids.length < 32;
    const tokens = json.ids.length - 1 + (stoppedByEos ? 1 : 0);
    const steps = tokens + (stoppedByEos ? 1 : 0);
    expect(json.stats.writes_per_token).toBeCloseTo((first + (steps - 1)) / tokens, 9);
    expect(json.stats.dispatches_per_token).toBeCloseTo(((perLayer * 2 + 3) * steps) / tokens, 9);
    expect(json.stats.readbacks_per_pass).toBe(1);
    expect(json.stats.readback_bytes_per_pass).toBe(4);
    expect(json.stats.weight_bytes_per_pass).toBeGreaterThan(0);
  });
});

describe('weft generate --draft', () => {
  it('self-speculation gives the same greedy ids and reports passes and tokens per pass', async () => {
    const modelDir = join(dir, 'spec-llama');
    await writeFixtureDir(modelDir, 'llama', 'f32', 4);
    const base = ['generate', '--model', modelDir, '--prompt-ids', PROMPT.join(','), '--max-tokens', '16'];
    const rest = ['--quant', 'f32', '--json'];
    // Plain decoding by the reference forward on the CPU (the GPU's plain ids equal it: the tests
    // above); only the speculative run pays for a browser.
    const plain = JSON.parse((await weft([...base, ...rest, '--device', 'cpu'])).stdout) as {
      ids: number[];
      stats: Record<string, number>;
    };
    expect(plain.ids.length).toBeGreaterThan(0);
    const out = await weft([...base, ...rest, '--draft', 'self', '--tree-budget', '6']);
    expect(out.stderr).toBe('');
    const spec = JSON.parse(out.stdout) as { ids: number[]; stats: Record<string, number> };
    expect(spec.ids).toEqual(plain.ids);
    // The int4 self-draft's drafts are accepted: 3.4 tokens per pass measured (drafts all rejected
    // would give exactly 1).
    expect(spec.stats.tokens_per_pass).toBeGreaterThan(2);
    expect(spec.stats.target_passes).toBeGreaterThan(0);
    // The self-draft shares the target's GPU: every step runs whole on the device, timed as one.
    expect(spec.stats.device_step_ms).toBeGreaterThan(0);
    expect(spec.stats.draft_passes).toBeGreaterThan(0);
    expect(spec.stats.draft_ms).toBe(0);
    expect(spec.stats.verify_ms).toBe(0);
    expect(plain.stats.draft_ms).toBe(0);
    expect(plain.stats.device_step_ms).toBe(0);
  });

  it('--draft ngram (reference engine) and --draft <folder> (GPU) give the same greedy ids', async () => {
    const modelDir = join(dir, 'spec-qwen2');
    const draftDir = join(dir, 'spec-qwen2-draft');
    await writeFixtureDir(modelDir, 'qwen2', 'f32', 4);
    // Same family and tokenizer, other random weights: a draft that is often wrong.
    await writeFixtureDir(draftDir, 'qwen2', 'f32', 9);
    const base = ['generate', '--model', modelDir, '--prompt-ids', PROMPT.join(','), '--max-tokens', '12'];
    const rest = ['--quant', 'f32', '--json'];
    const plain = JSON.parse((await weft([...base, ...rest, '--device', 'cpu'])).stdout) as { ids: number[] };
    expect(plain.ids.length).toBeGreaterThan(0);
    // The n-gram flag through the reference engine (no browser: the GPU's n-gram steps are the
    // engine tests'), timed by the host loop; the draft folder on the GPU.
    for (const [draft, device] of [
      ['ngram', ['--device', 'cpu']],
      [draftDir, []],
    ] as const) {
      const out = await weft([...base, ...rest, ...device, '--draft', draft, '--tree-budget', '8']);
      expect(out.stderr).toBe('');
      const spec = JSON.parse(out.stdout) as { ids: number[]; stats: Record<string, number> };
      expect(spec.ids).toEqual(plain.ids);
      expect(spec.stats.target_passes).toBeGreaterThan(0);
      expect(spec.stats.target_passes).toBeLessThanOrEqual(12);
      if (draft === 'ngram') expect(spec.stats.draft_ms! + spec.stats.verify_ms!).toBeGreaterThan(0);
    }
  });
});

describe('weft generate, gemma3 at a context of 4096', () => {
  it('prints kv_bytes: the sliding layers hold their window (a ring), the global layer the context', async () => {
    const modelDir = join(dir, 'gemma3');
    const want = await fixtureWithReference(modelDir, 'gemma3', 3, 8);
    const out = await weft([
      'generate',
      ...['--model', modelDir, '--prompt-ids', PROMPT.join(','), '--max-tokens', '8'],
      ...['--quant', 'f32', '--kv-cache', 'f32', '--context', '4096', '--temperature', '0', '--json'],
    ]);
    expect(out.stderr).toBe('');
    const json = JSON.parse(out.stdout) as { ids: number[]; stats: Record<string, number> };
    expect(json.ids).toEqual(want);
    // The tiny Gemma 3: two sliding layers (window 64, ring 64 + 64 + 64 rows) and one global, one
    // KV head of 32; K and V in f32.
    const row = 2 * 32 * 4;
    expect(json.stats.kv_bytes).toBe(2 * 192 * row + 4096 * row);
    console.log(
      `[cli] gemma3 at 4096: kv_bytes ${json.stats.kv_bytes} (all layers whole: ${3 * 4096 * row})`,
    );
  });
});

describe('weft generate --vulkan lavapipe', () => {
  it('runs in Node on lavapipe in the GPU forms, names them in the stats, and gives the reference ids', async () => {
    const modelDir = join(dir, 'lavapipe-qwen3');
    const want = await fixtureWithReference(modelDir, 'qwen3', 5, 16);
    // lavapipe compiles each pipeline with LLVM: seconds each, cold, without its optimization passes.
    const out = await weft(
      [
        'generate',
        ...['--model', modelDir, '--prompt-ids', PROMPT.join(','), '--max-tokens', '16'],
        ...['--quant', 'f32', '--json', '--vulkan', 'lavapipe', '--kernels', 'gpu'],
      ],
      { timeout: 540_000, env: { GALLIVM_PERF: 'nopt' } },
    );
    expect(out.code, out.stderr).toBe(0);
    const json = JSON.parse(out.stdout) as { ids: number[]; stats: Record<string, number | string> };
    expect(json.stats.adapter).toMatch(/llvmpipe/);
    expect(json.stats.kernels).toBe('gpu');
    expect(json.ids.length).toBeGreaterThan(0);
    expect(json.ids).toEqual(want.slice(0, json.ids.length));
  }, 600_000);
});

describe('weft generate --kv-cache f16', () => {
  it('on kjv-target: the GPU gives the greedy ids of the reference with the same f16 cache', async () => {
    const base = ['generate', '--model', 'models/kjv-target', '--prompt', 'And the LORD said unto Moses'];
    const rest = ['--max-tokens', '20', '--quant', 'f32', '--kv-cache', 'f16', '--json'];
    const run = async (extra: string[]) => {
      const out = await weft([...base, ...rest, ...extra]);
      expect(out.stderr).toBe('');
      expect(out.code).toBe(0);
      return JSON.parse(out.stdout) as { ids: number[]; stats: Record<string, number> };
    };
    const cpu = await run(['--device', 'cpu']);
    const want = cpu.ids;
    expect(want.length).toBeGreaterThan(8);
    // The reference forward counts no GPU work: the figures are absent, not zeros.
    expect(cpu.stats.dispatches_per_token).toBeUndefined();
    expect(cpu.stats.readbacks_per_pass).toBeUndefined();
    // (Tree verification and path commits over an f16 cache: test/model/gpu/kv-f16.gpu.test.ts.)
    expect((await run([])).ids).toEqual(want);
  });
});

describe.each(['kjv-target', 'kjv-draft'])('weft generate on the bundled %s', (name) => {
  it('writes readable KJV-style text', async () => {
    const out = await weft([
      'generate',
      '--model',
      `models/${name}`,
      '--prompt',
      'And the LORD said unto Moses',
      '--max-tokens',
      '24',
      '--temperature',
      '0.8',
      '--seed',
      '1',
      '--device',
      'cpu',
    ]);
    expect(out.code).toBe(0);
    console.log(`[cli] ${name}: ${JSON.stringify(out.stdout)}`);
    // Mostly words of the corpus: letters with KJV punctuation.
    expect(
      out.stdout.split(/\s+/).filter((w) => /^[A-Za-z]+[,.;:?!']*$/.test(w)).length,
    ).toBeGreaterThanOrEqual(8);
  });
});

describe('weft CLI errors', () => {
  it.each([
    [['generate'], /--model is required/],
    [['generate', '--model', '/nonexistent-weft', '--prompt', 'x'], /nonexistent-weft/],
    [
      ['generate', '--model', 'x', '--prompt', 'a', '--temperature', 'hot'],
      /--temperature: invalid value "hot"/,
    ],
    [['generate', '--model', 'x', '--prompt', 'a', '--quant', 'int3'], /--quant: "int3" is not one of/],
    [['frobnicate'], /unknown command/],
    [['generate', '--model', 'x', '--prompt', 'a', '--draft', 'sideways'], /--draft: "sideways"/],
    [['generate', '--model', 'x', '--prompt', 'a', '--kv-cache', 'f8'], /--kv-cache: "f8" is not one of/],
    [['generate', '--model', 'x', '--prompt', 'a', '--vulkan', 'mesa'], /--vulkan: "mesa" is not one of/],
    [['generate', '--model', 'x', '--prompt', 'a', '--kernels', 'fast'], /--kernels: "fast" is not one of/],
    [
      ['generate', '--model', 'x', '--prompt', 'a', '--host', 'chromium', '--vulkan', 'lavapipe'],
      /--vulkan lavapipe is the node host's driver/,
    ],
  ])('%j exits non-zero with one line', async (args, message) => {
    const out = await weft(args);
    expect(out.code).not.toBe(0);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toMatch(message);
  });
});

describe('weft generate with a constraint, on kjv-target', () => {
  it('--json-schema, --grammar and --regex: the output matches, the GPU gives the reference ids, bad input exits in one line', {
    timeout: 300_000,
  }, async () => {
    const schemaFile = join(dir, 'schema.json');
    const grammarFile = join(dir, 'amen.gbnf');
    await writeFile(
      schemaFile,
      JSON.stringify({
        type: 'object',
        properties: { king: { enum: ['david', 'saul'] }, age: { type: 'integer', minimum: 1, maximum: 99 } },
        required: ['king', 'age'],
      }),
    );
    await writeFile(grammarFile, 'root ::= "Amen" (", " [a-z]{1,6}){0,2} "."\n');
    const base = [
      'generate',
      '--model',
      'models/kjv-target',
      '--prompt',
      'And the king',
      '--max-tokens',
      '40',
    ];
    const cpu = JSON.parse(
      (await weft([...base, '--device', 'cpu', '--json-schema', schemaFile, '--json'])).stdout,
    ) as {
      ids: number[];
      text: string;
    };
    expect(JSON.parse(cpu.text)).toEqual({
      king: expect.stringMatching(/^(david|saul)$/),
      age: expect.any(Number),
    });
    const gpuOut = await weft([
      ...base,
      '--json-schema',
      schemaFile,
      '--json',
      '--quant',
      'f16',
      '--kv-cache',
      'f32',
    ]);
    expect(gpuOut.code, gpuOut.stderr).toBe(0);
    expect((JSON.parse(gpuOut.stdout) as { ids: number[] }).ids).toEqual(cpu.ids);
    const amen = await weft([...base, '--device', 'cpu', '--grammar', grammarFile]);
    expect(amen.stdout.trimEnd()).toMatch(/^Amen(, [a-z]{1,6}){0,2}\.$/);
    const regex = await weft([...base, '--device', 'cpu', '--regex', '[A-Z][a-z]{1,5} [0-9]{1,2}']);
    expect(regex.stdout.trimEnd()).toMatch(/^[A-Z][a-z]{1,5} [0-9]{1,2}$/);
    const bad = await weft([...base, '--device', 'cpu', '--grammar', schemaFile]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    expect(bad.stderr).toMatch(/GrammarError: invalid grammar: EBNF/);
  });
});
