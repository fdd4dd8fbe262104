// Test page for test/store/store.browser.test.ts: puts a small API over src/store on `window.weftStore`
// so the Node side can drive downloads, reads and corruption through page.evaluate. Every call
// returns plain data; errors come back as { error: { name, message } } so their type survives.
import { loadChoice } from '../../../src/engine/sources.js';
import { type DownloadProgress, downloadModel } from '../../../src/store/download.js';
import { openStoredFile } from '../../../src/store/reader.js';
import { Sha256 } from '../../../src/store/sha256.js';
import { hubModel, keyString, modelKey } from '../../../src/store/source.js';
import { idbBackend, WeightStore } from '../../../src/store/store.js';

/** What a call returns: its value, or the error that crossed back as name + message. */
export type PageResult<T> = { value: T } | { error: { name: string; message: string } };

/** Options of a download started from the page. */
export interface PageDownload {
  hubUrl: string;
  id: string;
  files: string[];
  chunkSize: number;
  concurrency?: number;
  /** Simulated `navigator.storage.estimate()` result (a disk that is nearly full). */
  quota?: { quota: number; usage: number };
  retries?: number;
}

/** The API the page exposes. */
export interface StorePageApi {
  /** Loads a real model through the cache (hub id at `hubUrl`) and returns 12 greedy ids. */
  generate(hubUrl: string, id: string): Promise<PageResult<number[]>>;
  download(o: PageDownload): Promise<PageResult<{ bytes: number; events: DownloadProgress[] }>>;
  /** Starts a download without waiting; `progress()` reports how far it got. */
  start(o: PageDownload): void;
  progress(): DownloadProgress | null;
  /** Reads each file back from the store chunk by chunk and hashes it. */
  hashFiles(
    hubUrl: string,
    id: string,
    files: string[],
  ): Promise<PageResult<{ sha256: Record<string, string>; repaired: number }>>;
  /** Overwrites a stored chunk with random bytes (and their own, matching, hash). */
  corruptChunk(id: string, file: string, index: number): Promise<void>;
  list(): Promise<{ key: string; bytes: number }[]>;
  /** Every key in the database, as strings. */
  keys(): Promise<string[]>;
  clear(): Promise<void>;
}

declare global {
  interface Window {
    weftStore: StorePageApi;
  }
}

const backend = idbBackend();

function storeFor(o: { quota?: { quota: number; usage: number } }): WeightStore {
  const quota = o.quota;
  return new WeightStore({ backend, ...(quota ? { estimate: () => Promise.resolve(quota) } : {}) });
}

async function wrap<T>(run: () => Promise<T>): Promise<PageResult<T>> {
  try {
    return { value: await run() };
  } catch (e) {
    return { error: { name: e instanceof Error ? e.name : 'unknown', message: String(e) } };
  }
}

let latest: DownloadProgress | null = null;

function run(o: PageDownload, events: DownloadProgress[]) {
  const source = hubModel(o.id, { baseUrl: o.hubUrl });
  return downloadModel(storeFor(o), source, o.files, {
    chunkSize: o.chunkSize,
    concurrency: o.concurrency ?? 2,
    retry: { retries: o.retries ?? 5, baseMs: 20, maxMs: 200 },
    onProgress: (p) => {
      latest = p;
      events.push(p);
    },
  });
}

window.weftStore = {
  generate: (hubUrl, id) =>
    wrap(async () => {
      // Through the weights cache: downloads on first use, then reads IndexedDB only.
      const engine = await loadChoice(
        { choice: { kind: 'hub', id, baseUrl: hubUrl }, quant: 'f32', contextLength: 64 },
        () => {},
      );
      const ids: number[] = [];
      for await (const c of engine.generate([5, 17, 99, 3, 250], { maxTokens: 12 })) ids.push(...c.ids);
      await engine.unload();
      return ids;
    }),
  download: (o) =>
    wrap(async () => {
      const events: DownloadProgress[] = [];
      const m = await run(o, events);
      return { bytes: m.bytes, events };
    }),
  start: (o) => {
    run(o, []).catch(() => undefined);
  },
  progress: () => latest,
  hashFiles: (hubUrl, id, files) =>
    wrap(async () => {
      const store = storeFor({});
      const key = modelKey(hubModel(id, { baseUrl: hubUrl }));
      const sha256: Record<string, string> = {};
      let repaired = 0;
      for (const name of files) {
        const f = await openStoredFile(store, key, name, { retry: { retries: 1, baseMs: 10, maxMs: 10 } });
        const h = new Sha256();
        for await (const chunk of f.chunks()) h.update(chunk);
        sha256[name] = h.hex();
        repaired += f.repaired;
      }
      return { sha256, repaired };
    }),
  corruptChunk: async (id, file, index) => {
    const garbage = crypto.getRandomValues(new Uint8Array(1024));
    const digest = new Sha256().update(garbage).hex();
    await storeFor({}).putChunk({ source: id, revision: 'main' }, file, index, {
      bytes: garbage,
      sha256: digest,
    });
  },
  list: async () => (await storeFor({}).list()).map((m) => ({ key: keyString(m.key), bytes: m.bytes })),
  keys: async () => (await backend.keys([])).map((k) => k.join(' ')),
  clear: () => backend.clear(),
};

const ready = document.querySelector('[data-testid="store-ready"]');
if (ready) ready.textContent = 'ready';
