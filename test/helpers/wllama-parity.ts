// The wllama parity tests' shared part (test/browser/gguf-*-wllama.test.ts): a page where
// llama.cpp (wllama, in WebAssembly, CPU) decodes greedily (test/helpers/pages/wllama-greedy.html,
// `window.wllamaGreedy`), and for quantized files the comparison of its tokens with weft's.
//
// What weft and llama.cpp can agree on for a quantized file (the K-quant mixes,
// gguf-kquant-wllama.test.ts; the i-quants, gguf-iquant-wllama.test.ts): llama.cpp's CPU multiplies
// a quantized matrix by activations it first rounds to 8 bits (Q8_K: an int8 per value and one
// scale per 256), weft by f32 activations. So each of llama.cpp's tokens, fed back along its own
// sequence, must be weft's top token, except at a near tie: where weft's top logit leads
// llama.cpp's pick by no more than twice the largest shift those 8-bit activations make in any
// logit at that step (the reference with its linears' and head's inputs rounded as Q8_K rounds
// them). {@link expectLlamaCppGreedy} prints every step's lead, margin (weft's top logit over its
// runner-up) and shift. F32 files, where llama.cpp rounds nothing, give the reference's ids
// exactly (gguf-phi3-wllama.test.ts).
import type { Page } from 'playwright-core';
import { expect } from 'vitest';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { argmax } from '../../src/kernels/sample/gumbel.js';
import { linear, rmsNorm } from '../../src/model/blocks/ops.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32, readWeights } from '../../src/model/weights.js';
import { launchChromium, logPageErrors, startServer } from './browser.js';

/** A Chromium page on wllama-greedy.html, wllama ready, and how to close it with its server. */
export interface WllamaPage {
  page: Page;
  /** The page's URL: a GGUF's URL is resolved against it (and routed to its bytes). */
  pageUrl: string;
  /** Closes the browser and the Vite server. */
  close: () => Promise<void>;
}

/**
 * Serves the repository, opens test/helpers/pages/wllama-greedy.html in headless Chromium (its
 * errors logged) and waits for wllama to be ready (up to a minute). For a test file's `beforeAll`.
 */
export async function setUpWllamaPage(): Promise<WllamaPage> {
  const { url, server } = await startServer();
  const browser = await launchChromium().catch(async (e: unknown) => {
    await server.close();
    throw e;
  });
  const close = async () => {
    await browser.close();
    await server.close();
  };
  try {
    const pageUrl = new URL('test/helpers/pages/wllama-greedy.html', url).href;
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(pageUrl);
    await page.getByTestId('wllama-ready').getByText('ready', { exact: true }).waitFor({ timeout: 60_000 });
    return { page, pageUrl, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/**
 * The ids a random model must not generate on the wllama page: only printable ASCII bytes and the
 * tiny tokenizer's merges (ids 32-127, and 256-263) may be, since a random model's other byte
 * tokens would end llama.cpp's text mid-character (its server refuses that JSON) and control bytes
 * break wllama's reading of the reply.
 */
export function unprintableIds(vocabSize: number): number[] {
  return Array.from({ length: vocabSize }, (_, id) => id).filter(
    (id) => id < 32 || (id >= 128 && id < 256) || id >= 264,
  );
}

/** `ref`'s greedy ids for `n` tokens after `ids`, never picking one of `banned` (as the page bans them). */
export function greedyAllowed(
  ref: ReferenceRunner,
  ids: readonly number[],
  n: number,
  banned: readonly number[],
): number[] {
  const V = ref.spec.vocabSize;
  const out: number[] = [];
  let logits = ref.logitsFor([...ids]).subarray(-V);
  for (let i = 0; i < n; i++) {
    const allowed = new Float32Array(logits);
    for (const id of banned) allowed[id] = -Infinity;
    out.push(argmax(allowed));
    if (i + 1 < n) logits = ref.prefill([out[i]!]);
  }
  return out;
}

/** Each row's blocks of 256 rounded as llama.cpp's quantize_row_q8_K: q = round(−127·x / max), x = q / (−127 / max). */
export function q8k(x: Float32Array): Float32Array {
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

/** One step along llama.cpp's sequence, as weft's reference sees it. */
export interface ParityRow {
  /** weft's top token. */
  top: number;
  /** weft's top logit over its logit for llama.cpp's pick (0 where they agree). */
  lead: number;
  /** weft's top logit over its runner-up. */
  margin: number;
  /** The largest shift 8-bit (Q8_K) activations make in an allowed logit. */
  shift: number;
}

/**
 * Has wllama on `page` decode `tokens` (32) greedily after `text` from the GGUF `bytes` (routed to
 * `/llama-<label>.gguf` beside `pageUrl`), and expects each of its tokens to be weft's greedy pick
 * along llama.cpp's own sequence but at near ties (lead ≤ 2 × shift; see the note above). Prints a
 * line `[wllama <label>]` with every step; returns the rows and llama.cpp's ids.
 */
export async function expectLlamaCppGreedy(
  page: Page,
  pageUrl: string,
  bytes: Uint8Array,
  label: string,
  opts: { tokens?: number; text?: string } = {},
): Promise<{ rows: ParityRow[]; theirs: number[] }> {
  const { tokens = 32, text = 'a quick brown fox jumps over my lazy dog' } = opts;
  const model = await openModel(memoryModelFiles('llama.gguf', new Map([['llama.gguf', bytes]])));
  const V = model.spec.vocabSize;
  const H = model.spec.hidden;
  const weights = mapWeights(await readAllF32(model.weights));
  const { norm, lmHead } = readWeights(model.spec, weights);
  const exact = new ReferenceRunner(model.spec, weights, { capacity: 128 });
  const rounded = new ReferenceRunner(model.spec, weights, { capacity: 128 });
  rounded.linearInput = q8k;
  const banned = unprintableIds(V);
  const allowed = (logits: Float32Array) => {
    const a = new Float32Array(logits);
    for (const id of banned) a[id] = -Infinity;
    return a;
  };
  // The rounded runner's head: its input rounded too (the head's vec_dot_type is Q8_K as well: it
  // is Q6_K in the K-quant mixes, IQ2_XS or IQ4_XS in the i-quant files).
  const roundedLogits = async (slot: number) => {
    const h = new Float32Array(H);
    rmsNorm(await rounded.features(slot, slot + 1), H, norm, model.spec.rmsEps, h);
    const out = new Float32Array(V);
    linear(q8k(h), H, lmHead, V, undefined, out);
    return out;
  };

  const ggufUrl = new URL(`/llama-${label.toLowerCase()}.gguf`, pageUrl).href;
  await page.route(ggufUrl, (route) =>
    route.fulfill({ body: Buffer.from(bytes), contentType: 'application/octet-stream' }),
  );
  const ids = model.tokenizer.encode(text);
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

  // Along llama.cpp's own sequence: weft's top token, its lead over llama.cpp's pick and over its
  // own runner-up, and the largest shift 8-bit activations make in a logit.
  let logits = allowed(exact.logitsFor(ids).subarray(-V));
  rounded.logitsFor(ids);
  const rows: ParityRow[] = [];
  for (let i = 0; i < tokens; i++) {
    const shifted = allowed(await roundedLogits(ids.length + i - 1));
    let shift = 0;
    for (let v = 0; v < V; v++)
      if (Number.isFinite(logits[v]!)) shift = Math.max(shift, Math.abs(logits[v]! - shifted[v]!));
    const top = argmax(logits);
    const runnerUp = Math.max(...logits.filter((_, v) => v !== top));
    rows.push({ top, lead: logits[top]! - logits[theirs[i]!]!, margin: logits[top]! - runnerUp, shift });
    if (i + 1 < tokens) {
      logits = allowed(exact.prefill([theirs[i]!]));
      rounded.prefill([theirs[i]!]);
    }
  }
  const mine = rows.map((r) => r.top);
  const ties = rows.flatMap((r, i) => (r.top === theirs[i] ? [] : [i]));
  console.log(
    `[wllama ${label}] llama.cpp ${theirs}; weft's pick at each step ${mine}; ${tokens - ties.length}/${tokens} equal; steps apart (weft's lead, 8-bit shift): ${ties.map((i) => `${i} (${rows[i]!.lead.toFixed(4)}, ${rows[i]!.shift.toFixed(4)})`).join(', ') || 'none'}; largest shift ${Math.max(...rows.map((r) => r.shift)).toFixed(4)}; every step's margin/shift: ${rows.map((r) => `${r.margin.toFixed(3)}/${r.shift.toFixed(3)}`).join(' ')}`,
  );
  for (const i of ties) expect(rows[i]!.lead, `step ${i}`).toBeLessThanOrEqual(2 * rows[i]!.shift);
  return { rows, theirs };
}
