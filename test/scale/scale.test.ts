// Real-size check (`npm run test:scale`): a random-weight checkpoint of Qwen3-0.6B's shape with its
// real config and tokenizer (1.2 GB of BF16 safetensors in a temp dir) loads in Chromium at f16
// and int4 (or the formats WEFT_SCALE_QUANTS names), read in place over HTTP, and its first greedy
// ids equal the CPU reference's on the same rounded weights. Prints load time, decode tok/s, the
// page's peak JS heap and the peak resident memory (anonymous and shared) of the tab and of the
// GPU process per format (beside an empty page's), and the loader's peak transient bytes, which
// must stay under 256 MiB plus one slice.
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/node-file.js';
import { packedBytes } from '../../src/kernels/matmul/quant.js';
import { openModel } from '../../src/model/load.js';
import { PACK_SLICE_ELEMENTS, referenceTensors } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference.js';
import { mapWeights } from '../../src/model/weights.js';
import { writeScaleDir } from '../fixtures/scale-dir.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import { greedy } from '../helpers/reference.js';
import { serveDir } from './serve-dir.js';

const PROMPT = [9707, 11, 1879, 0, 576, 374]; // a few ids of Qwen3's vocabulary
const TOKENS = 4;

let dir: string;
let browser: Browser;
let vite: ViteDevServer;
let pageUrl: string;
let files: { url: string; close(): Promise<void> };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-scale-'));
  const t0 = performance.now();
  const { weightBytes } = await writeScaleDir(dir, 'qwen3-0.6b', 1);
  console.log(
    `[scale] wrote qwen3-0.6b: ${weightBytes} bytes in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
  files = await serveDir(dir);
  ({ url: pageUrl, server: vite } = await startServer());
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await vite?.close();
  await files?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * The CPU reference's greedy ids on the weights as `quant` rounds them. Its matrices come from
 * `placedMatrix`, as the GPU loader's do, so the reader's counters show what that path decodes at
 * once: one slice of rows, never a whole matrix.
 */
async function referenceIds(quant: ScaleQuant): Promise<number[]> {
  const model = await pathModel(dir);
  const opened = await openModel(model);
  const tensors = await referenceTensors(opened, quant, 'none');
  await model.close?.();
  const stats = opened.weights.stats!;
  const { vocabSize: V, hidden: H } = opened.spec;
  const largestPacked = packedBytes(quant, V, H); // the embedding, the largest matrix
  console.log(
    `[scale] loader at ${quant}: largest f32 slice ${(4 * stats.largestF32) / 2 ** 20} MiB, largest packed matrix ${(largestPacked / 2 ** 20).toFixed(1)} MiB, ${(stats.f32Bytes / 2 ** 30).toFixed(2)} GiB of f32 decoded in all`,
  );
  expect(stats.largestF32).toBeLessThanOrEqual(PACK_SLICE_ELEMENTS);
  expect(stats.largestF32).toBeLessThan(V * H);
  if (quant === 'int4') expect(largestPacked + 4 * stats.largestF32).toBeLessThan(256 * 2 ** 20);
  const ref = new ReferenceRunner(opened.spec, mapWeights(tensors), { capacity: 64 });
  return greedy(ref, PROMPT, TOKENS);
}

interface PageResult {
  ids: number[];
  loadMs: number;
  peakTransientBytes: number;
  prefillTokS: number;
  decodeTokS: number;
}

/** Resident bytes of a set of processes: in all, and of it anonymous memory and shared memory. */
interface Rss {
  total: number;
  anon: number;
  shmem: number;
}

const NO_RSS: Rss = { total: 0, anon: 0, shmem: 0 };

/** The larger of a and b, field by field. */
function maxRss(a: Rss, b: Rss): Rss {
  return {
    total: Math.max(a.total, b.total),
    anon: Math.max(a.anon, b.anon),
    shmem: Math.max(a.shmem, b.shmem),
  };
}

/**
 * Resident bytes of this test's Chromium processes of `type` (`renderer`: the tab, its JS heap and
 * array buffers; `gpu-process`: where SwiftShader keeps the device's buffers), summed, from /proc:
 * VmRSS, and its anonymous (RssAnon: heaps, array buffers) and shared (RssShmem: the transfer
 * buffers a tab shares with the GPU process) parts.
 */
async function chromiumRss(type: string): Promise<Rss> {
  const parent = new Map<number, number>();
  const typed = new Map<number, Rss>();
  const kb = (status: string, field: string) =>
    1024 * Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  for (const pid of (await readdir('/proc')).filter((d) => /^\d+$/.test(d)).map(Number)) {
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    const cmd = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
    const ppid = Number(/PPid:\s+(\d+)/.exec(status)?.[1] ?? 0);
    parent.set(pid, ppid);
    if (cmd.includes(`--type=${type}`))
      typed.set(pid, {
        total: kb(status, 'VmRSS'),
        anon: kb(status, 'RssAnon'),
        shmem: kb(status, 'RssShmem'),
      });
  }
  const mine = (pid: number): boolean => {
    for (let p = pid, hops = 0; p > 1 && hops < 10; p = parent.get(p) ?? 0, hops++)
      if (p === process.pid) return true;
    return false;
  };
  const sum = { ...NO_RSS };
  for (const [pid, rss] of typed) {
    if (!mine(pid)) continue;
    sum.total += rss.total;
    sum.anon += rss.anon;
    sum.shmem += rss.shmem;
  }
  return sum;
}

/**
 * Loads the model in a page at `quant`; meanwhile polls the page's JS heap (CDP) and the resident
 * memory of the tab's renderer and of the GPU process for their peaks, logging the tab's every
 * 30 s.
 */
async function runPage(
  quant: ScaleQuant,
): Promise<PageResult & { peakHeapBytes: number; peakRenderer: Rss; peakGpuProcess: Rss }> {
  const page = await browser.newPage();
  logPageErrors(page);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  let peak = 0;
  let peakRenderer = NO_RSS;
  let peakGpu = NO_RSS;
  let polling = true;
  const t0 = performance.now();
  let logged = 0;
  const poll = (async () => {
    while (polling) {
      const { metrics } = await cdp.send('Performance.getMetrics');
      const used = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? 0;
      peak = Math.max(peak, used);
      const renderer = await chromiumRss('renderer');
      peakRenderer = maxRss(peakRenderer, renderer);
      peakGpu = maxRss(peakGpu, await chromiumRss('gpu-process'));
      const s = (performance.now() - t0) / 1000;
      if (s >= logged + 30) {
        logged = s;
        console.log(
          `[scale] ${quant} at ${s.toFixed(0)} s: tab ${rssText(renderer)}, JS heap ${mib(used)} MiB`,
        );
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const q = new URLSearchParams({
    model: files.url,
    quant,
    prompt: PROMPT.join(','),
    tokens: String(TOKENS),
  });
  await page.goto(new URL(`test/scale/pages/scale.html?${q}`, pageUrl).href);
  const status = page.getByTestId('status');
  await expect.poll(() => status.textContent(), { timeout: 3_000_000, interval: 1000 }).not.toBe('running');
  polling = false;
  await poll;
  expect(await status.textContent()).toBe('done');
  const result: PageResult = JSON.parse((await status.getAttribute('data-result'))!);
  await page.close();
  return { ...result, peakHeapBytes: peak, peakRenderer, peakGpuProcess: peakGpu };
}

/**
 * Resident bytes of the tab and of the GPU process with only the scale page open, weft's code
 * loaded and no model: the baseline the loads are measured against (the peak of a few samples).
 */
async function emptyPageRss(): Promise<{ renderer: Rss; gpu: Rss }> {
  const page = await browser.newPage();
  await page.goto(new URL('test/scale/pages/scale.html', pageUrl).href);
  await page.getByTestId('status').getByText('idle', { exact: true }).waitFor({ timeout: 60_000 });
  let renderer = NO_RSS;
  let gpu = NO_RSS;
  for (let i = 0; i < 8; i++) {
    renderer = maxRss(renderer, await chromiumRss('renderer'));
    gpu = maxRss(gpu, await chromiumRss('gpu-process'));
    await new Promise((r) => setTimeout(r, 250));
  }
  await page.close();
  return { renderer, gpu };
}

const mib = (n: number) => (n / 2 ** 20).toFixed(0);
const rssText = (r: Rss) => `${mib(r.total)} MiB (anonymous ${mib(r.anon)}, shared ${mib(r.shmem)})`;

/** The formats the scale test can load. */
const ALL_SCALE_QUANTS = ['f16', 'int8', 'int4', 'int2'] as const;
type ScaleQuant = (typeof ALL_SCALE_QUANTS)[number];

/** The formats to load: `WEFT_SCALE_QUANTS` (comma-separated), default f16 and int4. */
const SCALE_QUANTS: readonly ScaleQuant[] = (process.env.WEFT_SCALE_QUANTS ?? 'f16,int4')
  .split(',')
  .map((q) => {
    const found = ALL_SCALE_QUANTS.find((x) => x === q);
    if (!found) throw new Error(`WEFT_SCALE_QUANTS: ${q} is not one of ${ALL_SCALE_QUANTS.join(', ')}`);
    return found;
  });

describe('Qwen3-0.6B shape in Chromium', () => {
  let empty: { renderer: Rss; gpu: Rss };
  beforeAll(async () => {
    empty = await emptyPageRss();
  });

  for (const quant of SCALE_QUANTS) {
    it(`loads at ${quant} and its greedy ids equal the CPU reference's`, async () => {
      const got = await runPage(quant);
      const want = await referenceIds(quant);
      console.log(
        `[scale] qwen3-0.6b ${quant}: load ${(got.loadMs / 1000).toFixed(1)} s, loader's peak transient ${mib(got.peakTransientBytes)} MiB, peak JS heap ${mib(got.peakHeapBytes)} MiB, peak RSS of the tab ${rssText(got.peakRenderer)} (empty page ${rssText(empty.renderer)}) and of the GPU process ${rssText(got.peakGpuProcess)} (empty page ${rssText(empty.gpu)}), prefill ${got.prefillTokS.toFixed(2)} tok/s, decode ${got.decodeTokS.toFixed(2)} tok/s; ids ${got.ids.join(',')} (reference ${want.join(',')})`,
      );
      expect(got.ids).toEqual(want);
      // One slice of f32 rows (PACK_SLICE_ELEMENTS), its padded copy at most, and its packed words.
      expect(got.peakTransientBytes).toBeGreaterThan(0);
      expect(got.peakTransientBytes).toBeLessThan(256 * 2 ** 20 + 4 * PACK_SLICE_ELEMENTS);
    });
  }
});
