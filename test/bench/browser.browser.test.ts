// `npm run bench:browser` end to end, at its smallest: weft at int8 and the wllama peer on the GGUF
// files `weft export-gguf` writes (needs `npm run build`), in headless Chromium. The peer really runs
// (its generated text is in the report and equals weft's greedy text on the same weights), the
// weft/peer ratios are there, and weft loads the same GGUF file. The ONNX peer needs torch for its
// export and is not run here.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import type { SpeedReport } from '../../bench/report.mjs';

const run = promisify(execFile);

it('bench:browser runs weft and wllama on the same prompt ids and prints the ratios', async () => {
  const args = ['--json', '--quants', 'int8', '--drafters', 'none', '--tokens', '3', '--prompts', '1'];
  const { stdout } = await run(
    'node',
    ['bench/browser-cli.mjs', ...args, '--runs', '1', '--peers', 'wllama'],
    {
      timeout: 280_000,
      maxBuffer: 64 * 1024 * 1024,
    },
  );
  const r: SpeedReport = JSON.parse(stdout);
  expect(r.prompts).toHaveLength(1);
  expect(r.weft.map((w) => `${w.source} ${w.quant} ${w.drafter}`)).toEqual([
    'safetensors int8 none',
    'GGUF Q8_0 int8 none',
  ]);
  for (const w of r.weft) {
    expect(w.completionTokens).toBe(3);
    expect(w.ids[0]).toHaveLength(3);
    expect(w.decodeTokS).toBeGreaterThan(0);
  }
  expect(r.peers.map((p) => p.format)).toEqual(['GGUF Q8_0', 'GGUF Q4_0']);
  for (const p of r.peers) {
    expect(p.runtime).toBe('wllama');
    expect(p.completionTokens).toBe(3);
    expect(p.promptTokens).toBe(r.prompts[0]!.ids.length);
    expect(p.texts[0]!.length).toBeGreaterThan(0);
  }
  // Greedy on the same Q8_0 weights: llama.cpp and weft pick the same tokens on this prompt.
  expect(r.peers[0]!.texts).toEqual(r.weft[0]!.texts);
  expect(r.comparisons.map((c) => c.peer)).toEqual(['wllama GGUF Q8_0 on wasm', 'wllama GGUF Q8_0 on wasm']);
  for (const c of r.comparisons) {
    expect(Number.isFinite(c.decodeRatio) && c.decodeRatio > 0).toBe(true);
    expect(Number.isFinite(c.prefillRatio) && c.prefillRatio > 0).toBe(true);
  }
});
