import { webcrypto } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AbortError, DownloadError } from '../../src/errors.js';
import {
  backoffDelay,
  DEFAULT_RETRY,
  type DownloadProgress,
  downloadModel,
  isRetryable,
  planChunks,
  runPool,
  withRetry,
} from '../../src/store/download.js';
import { IntegrityError, QuotaError } from '../../src/store/errors.js';
import { openStoredFile } from '../../src/store/reader.js';
import { toHex } from '../../src/store/sha256.js';
import { hubModel, modelKey } from '../../src/store/source.js';
import { memoryBackend, type StoreBackend, WeightStore } from '../../src/store/store.js';
import { randomBytes } from '../helpers/random.js';

async function sha(bytes: Uint8Array): Promise<string> {
  return toHex(new Uint8Array(await webcrypto.subtle.digest('SHA-256', bytes)));
}

/**
 * An in-process fake of the hub: HEAD and Range GET over files in memory, counting requests, with
 * faults: `drops[file]` connections cut after `dropAfter` body bytes, `status[file]` a forced status.
 */
function fakeHub(files: Record<string, Uint8Array>, hashes: Record<string, string>) {
  const log: { method: string; file: string; range: string | null }[] = [];
  const drops: Record<string, number> = {};
  const status: Record<string, number> = {};
  const dropAfter = 1000;
  const fetchFn: typeof fetch = async (input, init) => {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const file = url.split('/resolve/main/')[1] ?? '';
    const method = init?.method ?? 'GET';
    const range = new Headers(init?.headers).get('range');
    log.push({ method, file, range });
    if (init?.signal?.aborted) throw new DOMException('aborted', 'AbortError');
    const bytes = files[file];
    if (!bytes) return new Response('not found', { status: 404 });
    if (status[file]) return new Response('busy', { status: status[file] });
    const headers = { 'content-length': String(bytes.byteLength), etag: `"${hashes[file]}"` };
    if (method === 'HEAD') return new Response(null, { status: 200, headers });
    const m = /^bytes=(\d+)-(\d+)$/.exec(range ?? '');
    if (!m) return new Response(bytes.slice(), { status: 200, headers });
    const part = bytes.slice(Number(m[1]), Number(m[2]) + 1);
    const drop = (drops[file] ?? 0) > 0 && part.byteLength > dropAfter;
    if (drop) drops[file] = (drops[file] ?? 0) - 1;
    // A cut connection: some body bytes, then a stream error, as fetch's reader reports it.
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        if (drop) {
          c.enqueue(part.slice(0, dropAfter));
          c.error(new TypeError('network error'));
        } else {
          c.enqueue(part);
          c.close();
        }
      },
    });
    return new Response(body, {
      status: 206,
      headers: { 'content-range': `bytes ${m[1]}-${m[2]}/${bytes.byteLength}` },
    });
  };
  return { fetchFn, log, drops, status };
}

const noSleep = () => Promise.resolve();
const fastRetry = { retries: 6, baseMs: 1, maxMs: 4 };

async function fixture() {
  const files = { 'config.json': randomBytes(300, 1), 'model.bin': randomBytes(40_000 + 123, 2) };
  const hashes = {
    'config.json': await sha(files['config.json']),
    'model.bin': await sha(files['model.bin']),
  };
  return { files, hashes, source: hubModel('org/tiny', { baseUrl: 'http://hub.test' }) };
}

async function readAll(
  store: WeightStore,
  key: ReturnType<typeof modelKey>,
  file: string,
  fetchFn: typeof fetch,
) {
  const f = await openStoredFile(store, key, file, { fetch: fetchFn, retry: fastRetry });
  const parts: Uint8Array[] = [];
  for await (const c of f.chunks()) parts.push(c);
  const out = new Uint8Array(f.size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return { bytes: out, file: f };
}

describe('chunk planning and retry policy', () => {
  it('planChunks covers the file exactly, last chunk short', () => {
    expect(planChunks(0, 10)).toEqual([]);
    expect(planChunks(10, 10)).toEqual([{ index: 0, offset: 0, length: 10 }]);
    const plan = planChunks(25, 10);
    expect(plan.map((c) => [c.offset, c.length])).toEqual([
      [0, 10],
      [10, 10],
      [20, 5],
    ]);
    for (const [size, cs] of [
      [1, 7],
      [65_537, 4096],
      [1_000_000, 65_536],
    ] as const) {
      const p = planChunks(size, cs);
      expect(p.reduce((s, c) => s + c.length, 0)).toBe(size);
      p.forEach((c, i) => {
        expect(c.index).toBe(i);
        expect(c.offset).toBe(i * cs);
      });
    }
    expect(() => planChunks(-1, 10)).toThrow(RangeError);
    expect(() => planChunks(10, 0)).toThrow(RangeError);
  });

  it('backoff doubles from baseMs up to maxMs, jitter in [0.5, 1]', () => {
    const p = { retries: 5, baseMs: 100, maxMs: 1000 };
    expect([0, 1, 2, 3, 4, 5].map((a) => backoffDelay(a, p, 1))).toEqual([100, 200, 400, 800, 1000, 1000]);
    for (let a = 0; a < 6; a++) {
      const d = backoffDelay(a, p);
      expect(d).toBeGreaterThanOrEqual(backoffDelay(a, p, 0.5));
      expect(d).toBeLessThanOrEqual(backoffDelay(a, p, 1));
    }
  });

  it('withRetry retries transient failures with growing waits, then gives up', async () => {
    const waits: number[] = [];
    const sleep = (ms: number) => {
      waits.push(ms);
      return Promise.resolve();
    };
    let calls = 0;
    const result = await withRetry(
      async () => {
        calls++;
        if (calls < 3) throw new TypeError('network error');
        return 'ok';
      },
      { retries: 5, baseMs: 10, maxMs: 1000 },
      { sleep },
    );
    expect(result).toBe('ok');
    expect(calls).toBe(3);
    expect(waits).toHaveLength(2);
    expect(waits[0]).toBeLessThanOrEqual(10);
    expect(waits[1]).toBeGreaterThanOrEqual(10);

    calls = 0;
    await expect(
      withRetry(
        async () => {
          calls++;
          throw new DownloadError('u', 503, 'busy');
        },
        { retries: 2, baseMs: 1, maxMs: 1 },
        { sleep },
      ),
    ).rejects.toThrow(DownloadError);
    expect(calls).toBe(3);

    // 404 is final: one try only.
    calls = 0;
    await expect(
      withRetry(
        async () => {
          calls++;
          throw new DownloadError('u', 404, 'missing');
        },
        DEFAULT_RETRY,
        { sleep },
      ),
    ).rejects.toThrow(DownloadError);
    expect(calls).toBe(1);
    expect(isRetryable(new DownloadError('u', 429, 'x'))).toBe(true);
    expect(isRetryable(new DownloadError('u', 403, 'x'))).toBe(false);
  });

  it('runPool never exceeds its limit and stops on the first failure', async () => {
    let active = 0;
    let peak = 0;
    const seen: number[] = [];
    await runPool([1, 2, 3, 4, 5, 6, 7], 3, async (n) => {
      active++;
      peak = Math.max(peak, active);
      await new Promise((r) => setTimeout(r, 2));
      seen.push(n);
      active--;
    });
    expect(peak).toBe(3);
    expect(seen.sort()).toEqual([1, 2, 3, 4, 5, 6, 7]);
    const started: number[] = [];
    await expect(
      runPool([1, 2, 3, 4, 5], 1, async (n) => {
        started.push(n);
        if (n === 2) throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(started).toEqual([1, 2]);
  });
});

describe('downloadModel with a fake hub', () => {
  it('downloads in chunks with progress, then serves from the store with no network', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, hashes);
    const store = new WeightStore({
      backend: memoryBackend(),
      estimate: async () => ({ quota: 1e9, usage: 0 }),
    });
    const events: DownloadProgress[] = [];
    const m = await downloadModel(store, source, ['config.json', 'model.bin'], {
      chunkSize: 4096,
      concurrency: 3,
      fetch: hub.fetchFn,
      onProgress: (p) => events.push(p),
    });
    const total = 300 + 40_123;
    expect(m.bytes).toBe(total);
    expect(m.files.map((f) => f.storedSha256)).toEqual([hashes['config.json'], hashes['model.bin']]);
    expect(events.at(-1)).toMatchObject({ bytesDone: total, bytesTotal: total, filesDone: 2, filesTotal: 2 });
    expect(events.every((e, i) => i === 0 || e.bytesDone >= events[i - 1]!.bytesDone)).toBe(true);
    expect(events.some((e) => e.rate > 0 && Number.isFinite(e.etaSeconds))).toBe(true);
    // One GET per chunk: 1 for config, ceil(40123 / 4096) = 10 for the model.
    expect(hub.log.filter((r) => r.method === 'GET')).toHaveLength(11);
    expect(await store.list()).toEqual([
      expect.objectContaining({ bytes: total, files: ['config.json', 'model.bin'] }),
    ]);

    const before = hub.log.length;
    const again = await downloadModel(store, source, ['model.bin'], { fetch: hub.fetchFn });
    expect(again).toEqual(m);
    const { bytes } = await readAll(store, modelKey(source), 'model.bin', hub.fetchFn);
    expect(await sha(bytes)).toBe(hashes['model.bin']);
    expect(hub.log.length).toBe(before);
  });

  it('survives 5 dropped connections mid-file and resumes after an abort without refetching', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, hashes);
    hub.drops['model.bin'] = 5;
    // Abort once 4 chunks are stored: a reload in the middle of the download.
    const ctrl = new AbortController();
    let stored = 0;
    const inner = memoryBackend();
    const backend: StoreBackend = {
      ...inner,
      set: async (key, value) => {
        await inner.set(key, value);
        if (key[0] === 'chunk' && ++stored === 4) ctrl.abort();
      },
    };
    const store = new WeightStore({ backend });
    await expect(
      downloadModel(store, source, ['config.json', 'model.bin'], {
        chunkSize: 4096,
        concurrency: 1,
        fetch: hub.fetchFn,
        retry: fastRetry,
        sleep: noSleep,
        signal: ctrl.signal,
      }),
    ).rejects.toThrow(AbortError);
    expect(await store.list()).toEqual([]);
    expect(await store.partial(modelKey(source))).toBeDefined();
    expect((await store.chunkIndices(modelKey(source), 'model.bin')).size).toBe(3);

    hub.log.length = 0;
    const m = await downloadModel(store, source, ['config.json', 'model.bin'], {
      chunkSize: 4096,
      fetch: hub.fetchFn,
      retry: fastRetry,
      sleep: noSleep,
    });
    expect(hub.drops['model.bin']).toBe(0);
    // The 4 chunks stored before the abort were not requested again.
    const ranges = hub.log.filter((r) => r.method === 'GET' && r.file === 'model.bin').map((r) => r.range);
    for (const skipped of ['bytes=0-4095', 'bytes=4096-8191', 'bytes=8192-12287'])
      expect(ranges).not.toContain(skipped);
    expect(m.files[1]!.storedSha256).toBe(hashes['model.bin']);
    const { bytes } = await readAll(store, modelKey(source), 'model.bin', hub.fetchFn);
    expect(bytes).toEqual(files['model.bin']);
    expect(await store.partial(modelKey(source))).toBeUndefined();
  });

  it('asking for another file of a complete model keeps the stored files and their chunk size', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, hashes);
    const store = new WeightStore({ backend: memoryBackend() });
    await downloadModel(store, source, ['model.bin'], { chunkSize: 4096, fetch: hub.fetchFn });
    hub.log.length = 0;
    const m = await downloadModel(store, source, ['config.json'], { chunkSize: 1000, fetch: hub.fetchFn });
    expect(m.files.map((f) => [f.name, f.chunkSize])).toEqual([
      ['model.bin', 4096],
      ['config.json', 1000],
    ]);
    // model.bin was only probed, not fetched again.
    expect(hub.log.filter((r) => r.file === 'model.bin').map((r) => r.method)).toEqual(['HEAD']);
    const { bytes } = await readAll(store, modelKey(source), 'model.bin', hub.fetchFn);
    expect(bytes).toEqual(files['model.bin']);
  });

  it('a quota shortfall throws QuotaError before writing anything', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, hashes);
    const backend = memoryBackend();
    const store = new WeightStore({ backend, estimate: async () => ({ quota: 50_000, usage: 20_000 }) });
    const err = await downloadModel(store, source, ['config.json', 'model.bin'], {
      fetch: hub.fetchFn,
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuotaError);
    expect(err).toMatchObject({ needed: 40_423, available: 30_000 });
    expect(await store.list()).toEqual([]);
    expect(await backend.keys([])).toEqual([]);
  });

  it('a file whose bytes do not match the announced sha256 is rejected and not kept', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, { ...hashes, 'model.bin': 'ab'.repeat(32) });
    const store = new WeightStore({ backend: memoryBackend() });
    await expect(
      downloadModel(store, source, ['model.bin'], { chunkSize: 8192, fetch: hub.fetchFn, sleep: noSleep }),
    ).rejects.toThrow(IntegrityError);
    expect(await store.list()).toEqual([]);
    expect((await store.chunkIndices(modelKey(source), 'model.bin')).size).toBe(0);
  });

  it('HTTP 404 fails at once with DownloadError; evictIncomplete removes partial data', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, hashes);
    const store = new WeightStore({ backend: memoryBackend() });
    await expect(downloadModel(store, source, ['missing.bin'], { fetch: hub.fetchFn })).rejects.toMatchObject(
      {
        name: 'DownloadError',
        status: 404,
      },
    );
    hub.status['model.bin'] = 0;
    hub.drops['model.bin'] = 100;
    await expect(
      downloadModel(store, source, ['config.json', 'model.bin'], {
        chunkSize: 4096,
        fetch: hub.fetchFn,
        retry: { retries: 2, baseMs: 1, maxMs: 1 },
        sleep: noSleep,
      }),
    ).rejects.toThrow(DownloadError);
    expect((await store.chunkIndices(modelKey(source), 'config.json')).size).toBe(1);
    expect(await store.evictIncomplete()).toEqual(['org/tiny@main']);
    expect(await store.backend.keys([])).toEqual([]);
  });

  it('a corrupt stored chunk is re-fetched on read, never returned; offline it throws', async () => {
    const { files, hashes, source } = await fixture();
    const hub = fakeHub(files, hashes);
    const store = new WeightStore({ backend: memoryBackend() });
    const key = modelKey(source);
    await downloadModel(store, source, ['model.bin'], { chunkSize: 4096, fetch: hub.fetchFn });
    const good = await store.getChunk(key, 'model.bin', 2);
    // Garbage bytes with a hash that matches them: only the manifest's hash can catch this.
    const garbage = randomBytes(4096, 77);
    await store.putChunk(key, 'model.bin', 2, { bytes: garbage, sha256: await sha(garbage) });
    hub.log.length = 0;
    const { bytes, file } = await readAll(store, key, 'model.bin', hub.fetchFn);
    expect(bytes).toEqual(files['model.bin']);
    expect(file.repaired).toBe(1);
    expect(hub.log.map((r) => r.range)).toEqual(['bytes=8192-12287']);
    expect(await store.getChunk(key, 'model.bin', 2)).toEqual(good);

    // Corrupt again, this time with the network gone: an error, not the garbage.
    await store.putChunk(key, 'model.bin', 2, { bytes: garbage, sha256: await sha(garbage) });
    const offline: typeof fetch = () => Promise.reject(new TypeError('offline'));
    const f = await openStoredFile(store, key, 'model.bin', {
      fetch: offline,
      retry: { retries: 1, baseMs: 1, maxMs: 1 },
    });
    expect(await f.read(0, 100)).toEqual(files['model.bin']!.subarray(0, 100));
    await expect(f.read(8000, 500)).rejects.toThrow(IntegrityError);
    // A read spanning chunks stitches them together.
    expect(await f.read(4000, 200)).toEqual(files['model.bin']!.subarray(4000, 4200));
  });
});
