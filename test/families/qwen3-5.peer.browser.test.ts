// `npm run bench:browser -- --gguf-family qwen35` end to end, at its smallest: the random-weight
// Qwen3.5 checkpoint of the tiny shape written and exported to GGUF Q8_0 under bench/.cache/ (by
// weft's exporter from src/, no build needed), then weft and wllama on that one file in the same
// headless Chromium page, on the same prompt ids, each generating the same number of tokens. Only
// the figures are checked, not the text: at a near tie of a random model, llama.cpp's 8-bit
// activations may pick another token than weft's.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import type { SpeedReport } from '../../bench/report.mjs';

const run = promisify(execFile);

it('bench:browser --gguf-family qwen35 runs weft and wllama on one Qwen3.5 GGUF', async () => {
  const args = ['--gguf-family', 'qwen35', '--shape', 'tiny', '--gguf-types', 'Q8_0'];
  const { stdout } = await run(
    'node',
    ['bench/browser-cli.mjs', ...args, '--json', '--tokens', '3', '--prompts', '1', '--runs', '1'],
    { timeout: 120_000, maxBuffer: 64 * 1024 * 1024 },
  );
  const r: SpeedReport = JSON.parse(stdout);
  expect(r.model).toMatch(/Qwen3\.5 \(qwen35\), shape tiny.*Qwen3's tokenizer stands in/);
  expect(r.prompts).toHaveLength(1);
  const promptTokens = r.prompts[0]!.ids.length;
  expect(r.weft.map((w) => `${w.source} ${w.quant} ${w.drafter}`)).toEqual(['GGUF Q8_0 int8 none']);
  const w = r.weft[0]!;
  expect(w.promptTokens).toBe(promptTokens);
  expect(w.completionTokens).toBe(3);
  expect(w.decodeTokS).toBeGreaterThan(0);
  expect(w.prefillTokS).toBeGreaterThan(0);
  expect(w.gpu?.dispatchesPerToken).toBeGreaterThan(0);
  expect(r.peers.map((p) => `${p.runtime} ${p.format}`)).toEqual(['wllama GGUF Q8_0']);
  const p = r.peers[0]!;
  expect(p.promptTokens).toBe(promptTokens);
  expect(p.completionTokens).toBe(3);
  expect(p.texts[0]!.length).toBeGreaterThan(0);
  // Only printable ASCII ids can be generated (peer-files.mjs zeroes the others' head rows).
  for (const text of [...w.texts, ...p.texts]) expect(text).toMatch(/^[ -~]+$/);
  expect(r.comparisons.map((c) => `${c.weft} / ${c.peer}`)).toEqual([
    'int8 none (GGUF Q8_0) / wllama GGUF Q8_0 on wasm',
  ]);
  for (const c of r.comparisons) {
    expect(Number.isFinite(c.decodeRatio) && c.decodeRatio > 0).toBe(true);
    expect(Number.isFinite(c.prefillRatio) && c.prefillRatio > 0).toBe(true);
  }
});
