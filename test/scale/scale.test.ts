// Real-size check (`npm run test:scale`): a random-weight checkpoint of Qwen3-0.6B's shape with its
// real config and tokenizer (1.2 GB of BF16 safetensors in a temp dir) loads in Chromium at f16
// and int4 (or the formats WEFT_SCALE_QUANTS names), read in place over HTTP, and its first greedy
// ids equal the CPU reference's on the same rounded weights. Prints load time, decode tok/s, the
// page's peak JS heap and the peak resident memory (anonymous and shared) of the tab and of the
// GPU process per format (beside an empty page's) with the tab's parts that memory-infra names,
// and the loader's peak transient bytes; those and the JS heap must stay under 256 MiB plus one
// slice. Chromium is driven over a raw DevTools pipe (raw-chromium.ts), not Playwright, whose
// Network domain would keep copies of the responses in the tab.
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { PACK_SLICE_ELEMENTS, referenceTensors } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights } from '../../src/model/weights.js';
import { packedBytes } from '../../src/quant/formats.js';
import { writeScaleDir } from '../fixtures/scale-dir.js';
import { startServer } from '../helpers/browser.js';
import { greedy } from '../helpers/reference.js';
import {
  launchRawChromium,
  type Message,
  memoryDump,
  type ProcessMemory,
  type RawChromium,
} from './raw-chromium.js';
import { serveDir } from './serve-dir.js';

const PROMPT = [9707, 11, 1879, 0, 576, 374]; // a few ids of Qwen3's vocabulary
const TOKENS = 4;

let dir: string;
let browser: RawChromium;
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
  browser = await launchRawChromium();
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

/** The parts of the tab's memory that memory-infra names (all renderer processes, summed), bytes. */
interface TabMemory {
  v8: number;
  arrayBuffers: number;
  /** Blink's buffer partition (vectors, strings; DevTools' copies of responses when it records them). */
  blinkBuffers: number;
  malloc: number;
  sharedMemory: number;
}

const TAB_ALLOCATORS: Record<keyof TabMemory, string> = {
  v8: 'v8',
  arrayBuffers: 'partition_alloc/partitions/array_buffer',
  blinkBuffers: 'partition_alloc/partitions/buffer',
  malloc: 'malloc',
  sharedMemory: 'shared_memory',
};

/** The tab's named parts in one dump. */
function tabMemory(dump: readonly ProcessMemory[]): TabMemory {
  const out: TabMemory = { v8: 0, arrayBuffers: 0, blinkBuffers: 0, malloc: 0, sharedMemory: 0 };
  for (const p of dump)
    if (p.name === 'Renderer')
      for (const [k, path] of Object.entries(TAB_ALLOCATORS))
        out[k as keyof TabMemory] += p.allocators.get(path) ?? 0;
  return out;
}

/** The larger of a and b, part by part. */
function maxTab(a: TabMemory, b: TabMemory): TabMemory {
  const out = { ...a };
  for (const k of Object.keys(out) as (keyof TabMemory)[]) out[k] = Math.max(a[k], b[k]);
  return out;
}

const tabText = (t: TabMemory) =>
  `V8 ${mib(t.v8)}, array buffers ${mib(t.arrayBuffers)}, Blink buffers ${mib(t.blinkBuffers)}, malloc ${mib(t.malloc)}, shared memory ${mib(t.sharedMemory)} MiB`;

/** Evaluates `expression` in the page and returns its value. */
async function evaluate(sessionId: string, expression: string): Promise<unknown> {
  const r = await browser.send<{ result?: { value?: unknown } }>(
    'Runtime.evaluate',
    { expression, returnByValue: true },
    sessionId,
  );
  return r.result?.value;
}

const STATUS = `(() => { const s = document.querySelector('[data-testid="status"]'); return s ? [s.textContent, s.dataset.result ?? null, s.dataset.phase ?? ''] : ['loading', null, '']; })()`;

/** Opens `url` in a tab that logs its console errors and uncaught exceptions; `close` closes both. */
async function openTab(url: string): Promise<{ sessionId: string; close(): Promise<void> }> {
  const { sessionId, targetId } = await browser.openPage(url);
  const off = browser.on((m: Message) => {
    if (m.sessionId !== sessionId) return;
    const p = m.params as {
      exceptionDetails?: { text?: string; exception?: { description?: string } };
      type?: string;
      args?: { value?: unknown; description?: string }[];
    };
    if (m.method === 'Runtime.exceptionThrown')
      console.log(
        `[page] uncaught: ${p.exceptionDetails?.exception?.description ?? p.exceptionDetails?.text}`,
      );
    if (m.method === 'Runtime.consoleAPICalled' && p.type === 'error')
      console.log(`[page] ${(p.args ?? []).map((a) => a.value ?? a.description).join(' ')}`);
  });
  return {
    sessionId,
    close: async () => {
      off();
      await browser.send('Target.closeTarget', { targetId });
    },
  };
}

/**
 * Loads the model in a tab at `quant`; meanwhile polls the page's JS heap and the resident memory
 * of the tab's renderer (also per phase of the load, the page's `data-phase`) and of the GPU
 * process for their peaks, and every 45 s logs the tab's and takes a memory-infra dump of its
 * named parts (their peaks over those dumps are returned).
 */
async function runPage(quant: ScaleQuant): Promise<
  PageResult & {
    peakHeapBytes: number;
    peakRenderer: Rss;
    peakGpuProcess: Rss;
    peakTab: TabMemory;
    peakByPhase: ReadonlyMap<string, number>;
  }
> {
  const q = new URLSearchParams({
    model: files.url,
    quant,
    prompt: PROMPT.join(','),
    tokens: String(TOKENS),
  });
  const tab = await openTab(new URL(`test/scale/pages/scale.html?${q}`, pageUrl).href);
  let peak = 0;
  let peakRenderer = NO_RSS;
  let peakGpu = NO_RSS;
  let peakTab = tabMemory([]);
  const t0 = performance.now();
  let logged = 0;
  let status: [string, string | null, string] = ['loading', null, ''];
  const peakByPhase = new Map<string, number>();
  while (status[0] === 'running' || status[0] === 'loading') {
    const { metrics } = await browser.send<{ metrics: { name: string; value: number }[] }>(
      'Performance.getMetrics',
      {},
      tab.sessionId,
    );
    const used = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? 0;
    peak = Math.max(peak, used);
    const renderer = await chromiumRss('renderer');
    // The tab's anonymous memory at its peak in each phase (open: the files, config and
    // tokenizer; weights: placing them; ready, generating).
    const phase = (status[2] || status[0]).split(' ')[0]!;
    peakByPhase.set(phase, Math.max(peakByPhase.get(phase) ?? 0, renderer.anon));
    peakRenderer = maxRss(peakRenderer, renderer);
    peakGpu = maxRss(peakGpu, await chromiumRss('gpu-process'));
    const s = (performance.now() - t0) / 1000;
    if (s >= logged + 45) {
      logged = s;
      const now = tabMemory(await memoryDump(browser));
      peakTab = maxTab(peakTab, now);
      console.log(
        `[scale] ${quant} at ${s.toFixed(0)} s: tab ${rssText(renderer)}, JS heap ${mib(used)} MiB; ${tabText(now)}`,
      );
    }
    if (s > 3000) throw new Error(`${quant}: still ${status[0]} after ${s.toFixed(0)} s`);
    await new Promise((r) => setTimeout(r, 250));
    status = (await evaluate(tab.sessionId, STATUS)) as [string, string | null, string];
  }
  expect(status[0]).toBe('done');
  const result: PageResult = JSON.parse(status[1]!);
  await tab.close();
  return { ...result, peakHeapBytes: peak, peakRenderer, peakGpuProcess: peakGpu, peakTab, peakByPhase };
}

/**
 * Resident bytes of the tab and of the GPU process with only the scale page open, weft's code
 * loaded and no model: the baseline the loads are measured against (the peak of a few samples),
 * and the tab's named parts.
 */
async function emptyPageRss(): Promise<{ renderer: Rss; gpu: Rss; tab: TabMemory }> {
  const tab = await openTab(new URL('test/scale/pages/scale.html', pageUrl).href);
  const t0 = performance.now();
  while (((await evaluate(tab.sessionId, STATUS)) as [string])[0] !== 'idle') {
    if (performance.now() - t0 > 60_000) throw new Error('the empty scale page did not say idle in 60 s');
    await new Promise((r) => setTimeout(r, 250));
  }
  let renderer = NO_RSS;
  let gpu = NO_RSS;
  for (let i = 0; i < 8; i++) {
    renderer = maxRss(renderer, await chromiumRss('renderer'));
    gpu = maxRss(gpu, await chromiumRss('gpu-process'));
    await new Promise((r) => setTimeout(r, 250));
  }
  const tabNow = tabMemory(await memoryDump(browser));
  await tab.close();
  return { renderer, gpu, tab: tabNow };
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
  let empty: { renderer: Rss; gpu: Rss; tab: TabMemory };
  beforeAll(async () => {
    empty = await emptyPageRss();
  });

  for (const quant of SCALE_QUANTS) {
    it(`loads at ${quant} and its greedy ids equal the CPU reference's`, async () => {
      const got = await runPage(quant);
      const want = await referenceIds(quant);
      console.log(
        `[scale] qwen3-0.6b ${quant}: load ${(got.loadMs / 1000).toFixed(1)} s, loader's peak transient ${mib(got.peakTransientBytes)} MiB, peak JS heap ${mib(got.peakHeapBytes)} MiB, peak RSS of the tab ${rssText(got.peakRenderer)} (empty page ${rssText(empty.renderer)}) and of the GPU process ${rssText(got.peakGpuProcess)} (empty page ${rssText(empty.gpu)}); the tab's parts at their peaks over the dumps: ${tabText(got.peakTab)} (empty page ${tabText(empty.tab)}), the tab's anonymous memory at its peak by phase ${[...got.peakByPhase].map(([k, v]) => `${k} ${mib(v)}`).join(', ')} MiB, prefill ${got.prefillTokS.toFixed(2)} tok/s, decode ${got.decodeTokS.toFixed(2)} tok/s; ids ${got.ids.join(',')} (reference ${want.join(',')})`,
      );
      expect(got.ids).toEqual(want);
      // One slice of f32 rows (PACK_SLICE_ELEMENTS), its padded copy at most, and its packed words.
      expect(got.peakTransientBytes).toBeGreaterThan(0);
      expect(got.peakTransientBytes).toBeLessThan(256 * 2 ** 20 + 4 * PACK_SLICE_ELEMENTS);
      expect(got.peakHeapBytes).toBeLessThan(256 * 2 ** 20 + 4 * PACK_SLICE_ELEMENTS);
    });
  }
});
