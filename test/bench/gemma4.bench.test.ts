// `node bench/gpu-cli.mjs --vulkan lavapipe --kernels gpu --parts gemma4 --smoke`: Gemma 4 E2B's
// shape beside Gemma 3 1B's, shrunk (hidden 256, vocab 4096; test/fixtures/scale-packed.ts writes
// them at int4 into bench/.cache once), in Node on the GPU forms. Only the rows' presence and
// sanity are asserted, never values: both models at int4 with the run's own figures, and the
// printed table's ratio line.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const run = promisify(execFile);
const LIMIT_MS = 900_000;
const positive = (x: unknown) => typeof x === 'number' && Number.isFinite(x) && x > 0;

it('gpu-cli.mjs --parts gemma4 prints E2B beside Gemma 3 1B at int4 (lavapipe, smoke)', {
  timeout: LIMIT_MS,
}, async () => {
  const out = await mkdtemp(join(tmpdir(), 'weft-gemma4-bench-'));
  try {
    const json = join(out, 'gemma4.json');
    const { stdout } = await run(
      'node',
      [
        'bench/gpu-cli.mjs',
        '--vulkan',
        'lavapipe',
        '--kernels',
        'gpu',
        '--parts',
        'gemma4',
        '--smoke',
        '--prompt',
        '8',
        '--tokens',
        '2',
        '--json',
        json,
      ],
      {
        timeout: LIMIT_MS - 20_000,
        maxBuffer: 64 * 1024 * 1024,
        // 128-bit llvmpipe vectors: lavapipe compiles the shaders several times faster.
        env: { ...process.env, LP_NATIVE_VECTOR_WIDTH: '128' },
      },
    );
    const report = JSON.parse(await readFile(json, 'utf8'));
    expect(report.model.adapter).toMatch(/llvmpipe/);
    const rows: {
      model: string;
      quant: string;
      attentionLayers: number;
      prefillTokens: number;
      tokens: number;
      prefillTokS: number;
      tokS: number;
      dispatchesPerToken: number;
      weightBytesPerPass: number;
    }[] = report.model.gemma4;
    expect(rows.map((r) => `${r.model} ${r.quant}`)).toEqual(['gemma-4-e2b int4', 'gemma-3-1b int4']);
    for (const r of rows) {
      expect([r.prefillTokS, r.tokS, r.dispatchesPerToken, r.weightBytesPerPass].every(positive)).toBe(true);
      expect([r.prefillTokens, r.tokens]).toEqual([8, 2]);
      expect(r.attentionLayers).toBe(r.model === 'gemma-4-e2b' ? 5 : 4);
    }
    expect(stdout).toMatch(/^## Gemma 4 E2B beside Gemma 3 1B, random weights at int4/m);
    expect(stdout).toMatch(
      /^gemma-4-e2b \/ gemma-3-1b at int4: prefill [\d.]+x, decode [\d.]+x, weight bytes per token [\d.]+x, dispatches per token [\d.]+x$/m,
    );
  } finally {
    await rm(out, { recursive: true, force: true });
  }
});
