import { describe, expect, it } from 'vitest';
import { openModelSource } from '../../src/engine/open.js';
import { type DirectoryEntry, type DirectoryLike, directoryModel } from '../../src/formats/io/files.js';
import { downloadModel } from '../../src/store/download.js';
import { QuotaError } from '../../src/store/errors.js';
import { openStoredFile } from '../../src/store/reader.js';
import { hubModel, modelKey, resolveModel } from '../../src/store/source.js';
import { memoryBackend, type StoreBackend, WeightStore } from '../../src/store/store.js';

const key = (source: string) => ({ source, revision: 'main' });

async function commitModel(store: WeightStore, source: string, sizes: number[]): Promise<void> {
  const k = key(source);
  const files = sizes.map((size, i) => ({
    name: `f${i}`,
    url: `http://x/${i}`,
    size,
    etag: null,
    sha256: null,
    chunkSize: size,
    chunks: ['h'],
    storedSha256: 'h',
  }));
  for (const f of files) await store.putChunk(k, f.name, 0, { bytes: new Uint8Array(f.size), sha256: 'h' });
  await store.commit({ version: 1, key: k, files, bytes: sizes.reduce((a, b) => a + b, 0), createdAt: 1 });
}

describe('WeightStore', () => {
  it('lists complete models with sizes; delete removes one, clear removes all', async () => {
    const store = new WeightStore({ backend: memoryBackend() });
    await commitModel(store, 'org/a', [10, 20]);
    await commitModel(store, 'org/b', [5]);
    // A partial download is not listed.
    await store.setPartial({ version: 1, key: key('org/c'), files: [], startedAt: 0 });
    await store.putChunk(key('org/c'), 'x', 0, { bytes: new Uint8Array(3), sha256: 'h' });
    expect((await store.list()).map((m) => [m.key.source, m.bytes, m.files])).toEqual([
      ['org/a', 30, ['f0', 'f1']],
      ['org/b', 5, ['f0']],
    ]);
    await store.delete(key('org/a'));
    expect((await store.list()).map((m) => m.key.source)).toEqual(['org/b']);
    expect((await store.chunkIndices(key('org/a'), 'f0')).size).toBe(0);
    expect((await store.chunkIndices(key('org/b'), 'f0')).size).toBe(1);
    expect(await store.evictIncomplete()).toEqual(['org/c@main']);
    expect(await store.partial(key('org/c'))).toBeUndefined();
    expect((await store.backend.keys([])).length).toBe(2);
    await store.clear();
    expect(await store.list()).toEqual([]);
    expect(await store.backend.keys([])).toEqual([]);
  });

  it('reserve asks for persistence and compares the estimate with what is needed', async () => {
    let asked = 0;
    const store = new WeightStore({
      backend: memoryBackend(),
      estimate: async () => ({ quota: 1000, usage: 300 }),
      persist: async () => {
        asked++;
        return true;
      },
    });
    expect(await store.reserve(700)).toEqual({ persisted: true });
    const err = await store.reserve(701).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QuotaError);
    expect(err).toMatchObject({ needed: 701, available: 700 });
    expect(asked).toBe(2);
  });

  it('a write refused with QuotaExceededError becomes QuotaError', async () => {
    const inner = memoryBackend();
    const full: StoreBackend = {
      ...inner,
      set: () => Promise.reject(new DOMException('full', 'QuotaExceededError')),
    };
    const store = new WeightStore({ backend: full });
    await expect(
      store.putChunk(key('a/b'), 'f', 0, { bytes: new Uint8Array(1), sha256: 'h' }),
    ).rejects.toThrow(QuotaError);
  });
});

describe('local folders and remote files in the store', () => {
  it('reads a picked directory in place, recursively', async () => {
    const file = (name: string, text: string): DirectoryEntry => ({
      kind: 'file',
      name,
      getFile: () => Promise.resolve(new File([text], name)),
    });
    const dir = (name: string, entries: DirectoryEntry[]): DirectoryLike => ({
      name,
      async *values() {
        yield* entries;
      },
    });
    const root = dir('tiny', [
      file('config.json', '{"x":1}'),
      { kind: 'directory', ...dir('w', [file('a.bin', 'abcdef')]) },
    ]);
    const src = await directoryModel(root);
    expect(src.files).toEqual(['config.json', 'w/a.bin']);
    const opened = await openModelSource(resolveModel(src), { cache: true });
    const bs = await opened.open('w/a.bin');
    expect(new TextDecoder().decode(await bs.read(2, 3))).toBe('cde');
  });

  it('a remote model is fetched once into the store and then read from it', async () => {
    const bytes = new Uint8Array(5000).map((_, i) => (i * 7) & 0xff);
    let gets = 0;
    const fetchFn: typeof fetch = async (_input, init) => {
      if (init?.method === 'HEAD') return new Response(null, { headers: { 'content-length': '5000' } });
      gets++;
      const [a, b] = (new Headers(init?.headers).get('range') ?? '')
        .replace('bytes=', '')
        .split('-')
        .map(Number);
      return new Response(bytes.slice(a, b! + 1), { status: 206 });
    };
    const store = new WeightStore({ backend: memoryBackend() });
    const source = hubModel('org/m', { baseUrl: 'http://hub.test' });
    // Downloaded, then read from the store (as the weights cache opens a remote model).
    const open = async (chunkSize?: number) => {
      await downloadModel(store, source, ['w.bin'], { fetch: fetchFn, ...(chunkSize ? { chunkSize } : {}) });
      return openStoredFile(store, modelKey(source), 'w.bin', { fetch: fetchFn });
    };
    const first = await open(1024);
    expect(gets).toBe(5);
    expect(await first.read(1000, 100)).toEqual(bytes.subarray(1000, 1100));
    const second = await open();
    expect(await second.read(0, 5000)).toEqual(bytes);
    expect(gets).toBe(5);
  });
});
