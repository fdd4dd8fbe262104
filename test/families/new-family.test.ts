// A family that reuses existing block kinds is one new file and one table row. The test copies
// src/ aside, adds one family file (a Llama whose blocks' outputs are normed before their residual
// adds, Gemma's sandwich, under Gemma's names, with SiLU: no family has that placement today) and
// one row of the family table, and shows that the copy type-checks (and does not, with a part of
// the family left out), reads the family's config.json, runs its reference forward as an
// independent plain forward computes it, and writes and reads its GGUF.
import { spawnSync } from 'node:child_process';
import { cp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve('.');
// Inside the repository, so the copy's imports of npm packages resolve to its node_modules.
const COPY = path.join(ROOT, 'test', '.family-copy');

/** The one new file: everything true of the family. */
const FAMILY_FILE = `// A Llama with sandwich norms (each block's output normed before its residual add, under Gemma's
// names) and SiLU: a family of the existing kinds, for the test that adds a family.
import { baseConfig, decoderBlocks, decoderSpec } from './decoder.js';
import type { Family } from './family.js';
import { DECODER_LAYER_NAMES, decoderMetadata, GLOBAL_NAMES, ggufBaseSpec } from './gguf-base.js';

const arch = 'llama-sandwich';

export const llamaSandwich: Family = {
  configTypes: {
    llama_sandwich: (f) => ({ ...decoderSpec(f, { family: 'llama_sandwich' }), sandwichNorms: true }),
  },
  config: (spec) => baseConfig(spec, 'LlamaSandwichForCausalLM', 'llama_sandwich'),
  blocks: (spec) => decoderBlocks(spec, { mlp: { norm: 'pre_feedforward_layernorm.weight' } }),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch,
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, { family: 'llama_sandwich', arch, ropeFreqs: false });
      return { ...base, sandwichNorms: true };
    },
    metadata: (spec) => decoderMetadata(spec, arch),
    names: {
      global: GLOBAL_NAMES,
      layer: [
        ...DECODER_LAYER_NAMES.filter(([, hf]) => hf !== 'post_attention_layernorm.weight'),
        ['post_attention_norm.weight', 'post_attention_layernorm.weight'],
        ['ffn_norm.weight', 'pre_feedforward_layernorm.weight'],
        ['post_ffw_norm.weight', 'post_feedforward_layernorm.weight'],
      ],
    },
    squeezed: [],
    storedForm: () => ({}),
  },
};
`;

/** The copy's family table with the new family's import and row. */
function withRow(table: string): string {
  return table
    .replace(
      "import { llama } from './llama.js';",
      "import { llama } from './llama.js';\nimport { llamaSandwich } from './llama-sandwich.js';",
    )
    .replace(/(export const FAMILIES[^{]*\{\n)/, '$1  llama_sandwich: llamaSandwich,\n');
}

/** Type-checks the copy's src/ (every family in the table has every part). */
function typecheck(): { status: number | null; out: string } {
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(COPY, 'tsconfig.json')], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

const config = {
  model_type: 'llama_sandwich',
  vocab_size: 41,
  hidden_size: 32,
  intermediate_size: 48,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  rms_norm_eps: 2 ** -10,
  rope_theta: 10000,
  max_position_embeddings: 64,
  tie_word_embeddings: false,
  bos_token_id: 1,
  eos_token_id: 2,
};

beforeAll(async () => {
  await rm(COPY, { recursive: true, force: true });
  await mkdir(COPY, { recursive: true });
  await cp(path.join(ROOT, 'src'), path.join(COPY, 'src'), { recursive: true });
  const tsconfig = JSON.parse(await readFile(path.join(ROOT, 'tsconfig.json'), 'utf8'));
  await writeFile(
    path.join(COPY, 'tsconfig.json'),
    JSON.stringify({ ...tsconfig, include: ['src'], exclude: ['src/**/*.test.ts'] }),
  );
  const families = path.join(COPY, 'src', 'model', 'families');
  await writeFile(path.join(families, 'llama-sandwich.ts'), FAMILY_FILE);
  const table = path.join(families, 'index.ts');
  await writeFile(table, withRow(await readFile(table, 'utf8')));
}, 120_000);
afterAll(() => rm(COPY, { recursive: true, force: true }));

describe('a new family of existing kinds', () => {
  it('is one file and one table row: the copy type-checks, and not with a part left out', async () => {
    const table = await readFile(path.join(COPY, 'src/model/families/index.ts'), 'utf8');
    const original = await readFile(path.join(ROOT, 'src/model/families/index.ts'), 'utf8');
    // The table gained its import and its row, nothing else.
    const added = table.split('\n').filter((l) => !original.split('\n').includes(l));
    expect(added).toEqual([
      "import { llamaSandwich } from './llama-sandwich.js';",
      '  llama_sandwich: llamaSandwich,',
    ]);
    const ok = typecheck();
    expect(ok.out).toBe('');
    expect(ok.status).toBe(0);
    // Without its final norm's name the family is not a Family: the compiler says so.
    const file = path.join(COPY, 'src/model/families/llama-sandwich.ts');
    await writeFile(file, FAMILY_FILE.replace("  finalNorm: 'model.norm.weight',\n", ''));
    const missing = typecheck();
    expect(missing.status).not.toBe(0);
    expect(missing.out).toMatch(/llama-sandwich\.ts.*finalNorm/s);
    await writeFile(file, FAMILY_FILE);
  }, 240_000);

  it('reads its config, runs its blocks as a plain sandwich-norm forward does, and round-trips GGUF', async () => {
    const src = (p: string) => import(path.join(COPY, 'src', p));
    const { specFromConfig, modelBlocks } = await src('model/families/index.ts');
    const { weightShapes } = await src('model/tensors.ts');
    const { mapWeights } = await src('model/weights.ts');
    const { ReferenceRunner } = await src('model/reference/reference.ts');
    const { exportGguf } = await src('convert/gguf-export.ts');
    const { openGgufCheckpoint } = await src('model/gguf.ts');
    const { memoryBytes } = await src('formats/io/bytes.ts');
    const spec = specFromConfig(config);
    expect(spec.family).toBe('llama_sandwich');
    expect(spec.sandwichNorms).toBe(true);
    expect(modelBlocks(spec).map((b: { kind: string }) => b.kind)).toEqual([
      'attention',
      'mlp',
      'attention',
      'mlp',
    ]);
    const shapes: Map<string, number[]> = weightShapes(spec);
    for (const norm of [
      'post_attention_layernorm',
      'pre_feedforward_layernorm',
      'post_feedforward_layernorm',
    ])
      expect(shapes.has(`model.layers.1.${norm}.weight`)).toBe(true);

    // Random weights, norms near 1.
    let seed = 7;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const tensors: Record<string, { shape: number[]; data: Float32Array }> = {};
    for (const [name, shape] of shapes) {
      const n = shape.reduce((a, b) => a * b, 1);
      const norm = name.endsWith('norm.weight');
      const scale = norm ? 0.25 : 1 / Math.sqrt(shape.at(-1)!);
      tensors[name] = {
        shape,
        data: Float32Array.from({ length: n }, () => (norm ? 1 : 0) + (2 * rand() - 1) * scale),
      };
    }
    const tokens = [1, 5, 9, 17, 3, 30];
    const ref = new ReferenceRunner(spec, mapWeights(tensors), { capacity: 16 });
    const got: Float32Array = ref.logitsFor(tokens);
    const want = plainForward(spec, tensors, tokens);
    const V = spec.vocabSize;
    let worst = 0;
    for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
    expect(worst).toBeLessThan(1e-4);
    expect(got.length).toBe(tokens.length * V);

    // Its GGUF: written under its own architecture and names, read back as the same spec and logits.
    const list = [...shapes].map(([name, shape]) => ({ name, shape, data: tensors[name]!.data }));
    const bytes = exportGguf(spec, list, 'F32');
    const ck = await openGgufCheckpoint(memoryBytes(bytes, 'sandwich.gguf'));
    expect(ck.spec).toEqual({ ...spec, bosId: undefined, eosIds: [] });
    const read: Record<string, { shape: readonly number[]; data: Float32Array }> = {};
    for (const [name, t] of ck.tensors) read[name] = { shape: t.shape, data: await ck.readF32(name) };
    const again = new ReferenceRunner(ck.spec, mapWeights(read), { capacity: 16 }).logitsFor(tokens);
    expect(again).toEqual(got);
  }, 120_000);
});

type Json = Record<string, { shape: number[]; data: Float32Array }>;

/**
 * The family's forward written out plainly in f64 (no weft code): per layer
 * x += norm(o(attn(rope(q), rope(k), v)); post_attention), h = norm(x; pre_feedforward),
 * x += norm(down(silu(gate h) · up h); post_feedforward), then the final norm and the head.
 */
function plainForward(
  spec: {
    hidden: number;
    heads: number;
    kvHeads: number;
    headDim: number;
    layers: number;
    vocabSize: number;
    rmsEps: number;
    rope: { theta: number };
  },
  w: Json,
  tokens: readonly number[],
): Float64Array {
  const { hidden: H, heads, kvHeads, headDim: D, rmsEps: eps } = spec;
  const get = (n: string) => w[n]!.data;
  const mat = (x: number[], n: string, rows: number) => {
    const m = get(n);
    const cols = x.length;
    return Array.from({ length: rows }, (_, r) => x.reduce((s, v, c) => s + v * m[r * cols + c]!, 0));
  };
  const norm = (x: number[], n: string) => {
    const g = get(n);
    const inv = 1 / Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + eps);
    return x.map((v, i) => v * inv * g[i]!);
  };
  const rope = (v: number[], pos: number) => {
    const out = v.slice();
    for (let h = 0; h < v.length / D; h++)
      for (let i = 0; i < D / 2; i++) {
        const a = pos * spec.rope.theta ** (-(2 * i) / D);
        const [x0, x1] = [v[h * D + i]!, v[h * D + i + D / 2]!];
        out[h * D + i] = x0 * Math.cos(a) - x1 * Math.sin(a);
        out[h * D + i + D / 2] = x1 * Math.cos(a) + x0 * Math.sin(a);
      }
    return out;
  };
  let x = tokens.map((t) => Array.from(get('model.embed_tokens.weight').subarray(t * H, (t + 1) * H)));
  for (let l = 0; l < spec.layers; l++) {
    const p = `model.layers.${l}`;
    const h = x.map((r) => norm(r, `${p}.input_layernorm.weight`));
    const q = h.map((r, t) => rope(mat(r, `${p}.self_attn.q_proj.weight`, heads * D), t));
    const k = h.map((r, t) => rope(mat(r, `${p}.self_attn.k_proj.weight`, kvHeads * D), t));
    const v = h.map((r) => mat(r, `${p}.self_attn.v_proj.weight`, kvHeads * D));
    const attn = q.map((qr, t) => {
      const out: number[] = [];
      for (let hd = 0; hd < heads; hd++) {
        const g = Math.floor(hd / (heads / kvHeads));
        const s = Array.from({ length: t + 1 }, (_, j) => {
          let d = 0;
          for (let i = 0; i < D; i++) d += qr[hd * D + i]! * k[j]![g * D + i]!;
          return d / Math.sqrt(D);
        });
        const m = Math.max(...s);
        const e = s.map((z) => Math.exp(z - m));
        const z = e.reduce((a, b) => a + b, 0);
        for (let i = 0; i < D; i++) out.push(e.reduce((a, ej, j) => a + (ej / z) * v[j]![g * D + i]!, 0));
      }
      return out;
    });
    x = x.map((r, t) => {
      const o = norm(
        mat(attn[t]!, `${p}.self_attn.o_proj.weight`, H),
        `${p}.post_attention_layernorm.weight`,
      );
      return r.map((val, i) => val + o[i]!);
    });
    x = x.map((r) => {
      const hm = norm(r, `${p}.pre_feedforward_layernorm.weight`);
      const I = w[`${p}.mlp.gate_proj.weight`]!.shape[0]!;
      const gate = mat(hm, `${p}.mlp.gate_proj.weight`, I);
      const up = mat(hm, `${p}.mlp.up_proj.weight`, I);
      const act = gate.map((g, i) => (g / (1 + Math.exp(-g))) * up[i]!);
      const d = norm(mat(act, `${p}.mlp.down_proj.weight`, H), `${p}.post_feedforward_layernorm.weight`);
      return r.map((val, i) => val + d[i]!);
    });
  }
  const logits = x.flatMap((r) => mat(norm(r, 'model.norm.weight'), 'lm_head.weight', spec.vocabSize));
  return Float64Array.from(logits);
}
