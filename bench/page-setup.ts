// What the Chromium benchmark pages (bench/browser-page.ts, bench/gguf-peer-page.ts) set up the
// same way: the held-out prompts as text and ids, and the GPU context their `kernels` parameter asks for.
import { createGpuContext, describeAdapter, type GpuContext } from '../src/gpu/device.js';
import { benchPrompts } from './browser.js';

/**
 * The page's prompts (see {@link benchPrompts}) from models/kjv-heldout.txt, as text and as
 * `tokenizer`'s ids (BOS added), and the warm-up request's.
 */
export async function heldOutPrompts(
  tokenizer: { encode(text: string, o: { addSpecialTokens: boolean }): number[] },
  n: number,
): Promise<{ texts: string[]; prompts: number[][]; warmupText: string; warmup: number[] }> {
  const heldout = await (await fetch('/models/kjv-heldout.txt')).text();
  const { texts, warmup: warmupText } = benchPrompts(heldout, n);
  const encode = (t: string) => tokenizer.encode(t, { addSpecialTokens: true });
  return { texts, prompts: texts.map(encode), warmupText, warmup: encode(warmupText) };
}

/** The GPU context a page's `kernels` parameter (gpu, serial or absent) asks for, and its adapter logged. */
export async function pageGpuContext(
  q: URLSearchParams,
  log: (line: string) => void,
): Promise<{ ctx: GpuContext; adapter: string }> {
  const kernels = q.get('kernels');
  if (kernels !== null && kernels !== 'gpu' && kernels !== 'serial')
    throw new Error(`kernels: "${kernels}" is not one of gpu, serial`);
  const ctx = await createGpuContext(kernels ? { kernels } : {});
  const adapter = describeAdapter(ctx.adapter);
  log(`adapter: ${adapter}`);
  return { ctx, adapter };
}
