// llama.cpp itself on the K-quant mix `weft export-gguf --type q4_k_m` writes: wllama (llama.cpp
// in WebAssembly, CPU) loads the Q4_K_M file of a tiny random Llama (every linear input 256 wide,
// so the K-quant blocks fit; its own head) in headless Chromium and decodes 32 tokens greedily.
// The file holds Q4_K and, by llama-quantize's recipe, Q6_K for the head and for layer 1's attn_v
// and ffn_down; weft's reference runs on its blocks dequantized with llama.cpp's formulas (the GPU
// runner places those blocks as stored and equals the reference: test/gpu/convert.test.ts).
//
// What the two can agree on: llama.cpp's CPU multiplies a quantized matrix by activations it first
// rounds to 8 bits (Q8_K: an int8 per value and one scale per 256), weft by f32 activations. So
// each of llama.cpp's tokens, fed back along its own sequence, must be weft's top token, except
// at a near tie: where weft's top logit leads llama.cpp's pick by no more than twice the largest
// shift those 8-bit activations make in any logit at that step (the reference with its linears'
// and head's inputs rounded as Q8_K rounds them). The weights are the fixtures' scaled by 0.2
// (uniform ±0.1: at ±0.5 the activations grow so large that 8-bit rounding moves the logits by 0.7
// of their spread), and the test prints every step's lead and shift. F32 files, where llama.cpp
// rounds nothing, give the reference's ids exactly (gguf-phi3-wllama.test.ts).
import type { Browser, Page } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { memoryModelFiles } from '../../src/formats/files.js';
import { openGguf } from '../../src/formats/gguf.js';
import { GgmlType } from '../../src/formats/gguf-blocks.js';
import { tokenizerGgufMetadata } from '../../src/formats/gguf-tokenizer.js';
import { exportGguf } from '../../src/formats/gguf-write.js';
import { bytesSource } from '../../src/formats/source.js';
import { argmax } from '../../src/kernels/sample/gumbel.js';
import { specFromConfig } from '../../src/model/config.js';
import { openModel } from '../../src/model/load.js';
import { linear, rmsNorm } from '../../src/model/ops.js';
import { ReferenceRunner } from '../../src/model/reference.js';
import { mapWeights, readAllF32, readWeights } from '../../src/model/weights.js';
import { randomTensors, tinyConfig, tinyTokenizerJson } from '../fixtures/write.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';

let browser: Browser;
let server: ViteDevServer;
let page: Page;
let pageUrl: string;

beforeAll(async () => {
  let url: string;
  ({ url, server } = await startServer());
  pageUrl = new URL('test/browser/pages/wllama-greedy.html', url).href;
  browser = await launchChromium();
  page = await browser.newPage();
  logPageErrors(page);
  await page.goto(pageUrl);
  await page.getByTestId('wllama-ready').getByText('ready', { exact: true }).waitFor({ timeout: 60_000 });
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

/** Each row's blocks of 256 rounded as llama.cpp's quantize_row_q8_K: q = round(−127·x / max), x = q / (−127 / max). */
function q8k(x: Float32Array): Float32Array {
  const y = new Float32Array(x.length);
  for (let b = 0; b < x.length; b += 256) {
    let max = 0;
    for (let j = b; j < b + 256; j++) if (Math.abs(x[j]!) > Math.abs(max)) max = x[j]!;
    if (max === 0) continue;
    const iscale = Math.fround(-127 / max);
    const d = Math.fround(1 / iscale);
    for (let j = b; j < b + 256; j++) y[j] = Math.min(127, Math.round(Math.fround(iscale * x[j]!))) * d;
  }
  return y;
}

it('llama.cpp (wllama) decodes the exported Q4_K_M llama GGUF: every token weft’s greedy pick but at near ties', async () => {
  const spec = specFromConfig(tinyConfig('llama', true));
  const tensors = randomTensors(spec, 11).map((t) =>
    t.name.endsWith('norm.weight') ? t : { ...t, data: t.data.map((v) => v * 0.2) },
  );
  const metadata = tokenizerGgufMetadata(
    tinyTokenizerJson(),
    { bos_token: '<|endoftext|>', eos_token: '<|im_end|>' },
    spec.vocabSize,
  );
  const bytes = exportGguf(spec, tensors, 'Q4_K_M', metadata);
  const file = await openGguf(bytesSource(bytes, 'llama.gguf'));
  const types = [
    'output',
    'blk.1.attn_v',
    'blk.1.ffn_down',
    'blk.0.attn_v',
    'blk.0.ffn_down',
    'token_embd',
  ].map((n) => file.tensors.get(`${n}.weight`)?.type);
  const [Q4, Q6] = [GgmlType.Q4_K, GgmlType.Q6_K];
  expect(types).toEqual([Q6, Q6, Q6, Q4, Q4, Q4]);
  const model = await openModel(memoryModelFiles('llama.gguf', new Map([['llama.gguf', bytes]])));
  const V = model.spec.vocabSize;
  const H = model.spec.hidden;
  const weights = mapWeights(await readAllF32(model.weights));
  const { norm, lmHead } = readWeights(model.spec, weights);
  const exact = new ReferenceRunner(model.spec, weights, { capacity: 128 });
  const rounded = new ReferenceRunner(model.spec, weights, { capacity: 128 });
  rounded.linearInput = q8k;
  // Only printable ASCII bytes and merges (ids 32-127, and 256-263) may be generated: a random
  // model's other byte tokens would end llama.cpp's text mid-character (its server refuses that
  // JSON), and control bytes break wllama's reading of the reply.
  const banned = Array.from({ length: V }, (_, id) => id).filter(
    (id) => id < 32 || (id >= 128 && id < 256) || id >= 264,
  );
  const allowed = (logits: Float32Array) => {
    const a = new Float32Array(logits);
    for (const id of banned) a[id] = -Infinity;
    return a;
  };
  // The rounded runner's head: its input rounded too (the head is Q6_K in llama.cpp).
  const roundedLogits = async (slot: number) => {
    const h = new Float32Array(H);
    rmsNorm(await rounded.features(slot, slot + 1), H, norm, model.spec.rmsEps, h);
    const out = new Float32Array(V);
    linear(q8k(h), H, lmHead, V, undefined, out);
    return out;
  };

  const ggufUrl = new URL('/llama-q4_k_m.gguf', pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const text = 'a quick brown fox jumps over my lazy dog';
  const ids = model.tokenizer.encode(text);
  const tokens = 32;
  const got = await page.evaluate(([u, p, k, b]) => window.wllamaGreedy(u, p, k, b), [
    ggufUrl,
    text,
    tokens,
    banned,
  ] as const);
  expect(got.promptTokens).toBe(ids.length);
  expect(got.ids).toHaveLength(tokens);
  const theirs = got.ids!;
  expect(got.text).toBe(model.tokenizer.decode(theirs));

  // Along llama.cpp's own sequence: weft's top token, its lead over llama.cpp's pick, and the
  // largest shift 8-bit activations make in a logit.
  let logits = allowed(exact.logitsFor(ids).subarray(-V));
  rounded.logitsFor(ids);
  const rows: { top: number; lead: number; shift: number }[] = [];
  for (let i = 0; i < tokens; i++) {
    const shifted = allowed(await roundedLogits(ids.length + i - 1));
    let shift = 0;
    for (let v = 0; v < V; v++)
      if (Number.isFinite(logits[v]!)) shift = Math.max(shift, Math.abs(logits[v]! - shifted[v]!));
    const top = argmax(logits);
    rows.push({ top, lead: logits[top]! - logits[theirs[i]!]!, shift });
    if (i + 1 < tokens) {
      logits = allowed(exact.prefill([theirs[i]!]));
      rounded.prefill([theirs[i]!]);
    }
  }
  const mine = rows.map((r) => r.top);
  const ties = rows.flatMap((r, i) => (r.top === theirs[i] ? [] : [i]));
  console.log(
    `[wllama Q4_K_M] llama.cpp ${theirs}; weft's pick at each step ${mine}; ${tokens - ties.length}/${tokens} equal; steps apart (weft's lead, 8-bit shift): ${ties.map((i) => `${i} (${rows[i]!.lead.toFixed(4)}, ${rows[i]!.shift.toFixed(4)})`).join(', ') || 'none'}; largest shift ${Math.max(...rows.map((r) => r.shift)).toFixed(4)}`,
  );
  for (const i of ties) expect(rows[i]!.lead, `step ${i}`).toBeLessThanOrEqual(2 * rows[i]!.shift);
});
