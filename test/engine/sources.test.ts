import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertModel } from '../../src/convert/convert.js';
import { type OpenSourceOptions, openModelSource } from '../../src/engine/open.js';
import { type ChoiceLoadEvent, loadChoice } from '../../src/engine/sources.js';
import { InvalidInputError } from '../../src/errors.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { type ModelChoice, parseHubRef, resolveModel } from '../../src/store/source.js';
import { memoryBackend, WeightStore } from '../../src/store/store.js';
import { fixtureFiles, ggufFixture } from '../fixtures/write.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { type HubServer, startHubServer } from '../helpers/hub-server.js';

let root: string;
let hub: HubServer;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'weft-sources-'));
  await writeFixtureDir(join(root, 'org', 'sharded'), 'qwen3', 'sharded');
  await writeFixtureDir(join(root, 'org', 'single'), 'llama', 'f32');
  // A folder converted by `weft convert`: the HF files plus model.weft.safetensors (and the
  // original weights left beside it, which the cache must not download).
  await writeFixtureDir(join(root, 'org', 'converted'), 'llama', 'f32');
  const out = join(root, 'org', 'converted');
  const chunks: Uint8Array[] = [];
  await convertModel(
    await pathModel(out),
    { quant: 'int4' },
    {
      file: async () => {},
      weights: async (c) => {
        chunks.push(c.slice());
      },
    },
  );
  await writeFile(join(out, WEFT_WEIGHTS), Buffer.concat(chunks));
  // A GGUF repository as the hub has them: several quantizations side by side, no config.json.
  // The Q8_0 file carries a chat template in its metadata.
  await mkdir(join(root, 'org', 'gguf'));
  const q8 = ggufFixture('qwen2', 'Q8_0', 5, { chatTemplate: CHAT_TEMPLATE });
  await writeFile(join(root, 'org', 'gguf', 'tiny-q8_0.gguf'), q8.bytes);
  await writeFile(join(root, 'org', 'gguf', 'tiny-f32.gguf'), ggufFixture('llama', 'F32', 6).bytes);
  hub = await startHubServer(root, { lfsThreshold: 10_000 });
});

afterAll(async () => {
  await hub?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

const CHAT_TEMPLATE = '{% for m in messages %}{{ m.content }}{% endfor %}';

const store = () => new WeightStore({ backend: memoryBackend(), estimate: async () => ({}) });
const offline: typeof fetch = () => Promise.reject(new TypeError('offline'));
/** A choice opened through the weights cache, as the engine worker opens it. */
const openChoice = async (choice: ModelChoice, options: OpenSourceOptions) =>
  openModelSource(resolveModel(choice), { ...options, cache: true });

describe('model choices', () => {
  it('downloads a sharded hub model into the cache, then opens it from the cache with no network', async () => {
    const s = store();
    const choice: ModelChoice = { kind: 'hub', id: 'org/sharded', baseUrl: hub.url };
    const seen: number[] = [];
    const files = await openChoice(choice, { store: s, onProgress: (p) => seen.push(p.bytesDone) });
    const [stored] = await s.list();
    const expected = [...fixtureFiles('qwen3', 'sharded').files.keys()].sort();
    expect([...(stored?.files ?? [])].sort()).toEqual(expected);
    expect(stored?.key).toEqual({ source: 'org/sharded', revision: 'main' });
    expect(seen.length).toBeGreaterThan(0);
    expect((await openModel(files)).spec.family).toBe('qwen3');

    const again = await openChoice(choice, { store: s, fetch: offline });
    expect(again.name).toBe('org/sharded@main');
    expect((await openModel(again)).spec.family).toBe('qwen3');
  });

  it('caches a converted model by its weft-q weights only', async () => {
    const s = store();
    const files = await openChoice({ kind: 'hub', id: 'org/converted', baseUrl: hub.url }, { store: s });
    const [stored] = await s.list();
    expect(stored?.files).toContain(WEFT_WEIGHTS);
    expect(stored?.files).not.toContain('model.safetensors');
    const opened = await openModel(files);
    expect(opened.format).toBe('weft-q');
    expect(opened.packed?.format).toBe('int4');
  });

  it('lists only the optional files the server has and reports a missing model', async () => {
    const s = store();
    await expect(
      openChoice({ kind: 'hub', id: 'org/absent', baseUrl: hub.url }, { store: s }),
    ).rejects.toThrow(/404|config\.json/);
    expect(await s.list()).toEqual([]);
  });

  it('reads picked files and an uncached URL in place, without touching the cache', async () => {
    const s = store();
    const picked = [...fixtureFiles('llama', 'f32').files].map(
      ([name, bytes]) => new File([new Uint8Array(bytes)], name),
    );
    const local = await openChoice({ kind: 'files', name: 'picked', files: picked }, { store: s });
    expect((await openModel(local)).spec.family).toBe('llama');
    await expect(local.text('nope.json')).rejects.toThrow(/nope\.json/);
    const url = await openModelSource(resolveModel(`${hub.url}/org/single/resolve/main/`), { store: s });
    expect((await openModel(url)).spec.family).toBe('llama');
    expect(await s.list()).toEqual([]);
  });

  it('loads a choice into an engine with download, load and model events', async () => {
    const events: ChoiceLoadEvent['kind'][] = [];
    let chat: boolean | undefined;
    const engine = await loadChoice(
      { choice: `${hub.url}/org/single/resolve/main`, device: 'cpu' },
      (e) => {
        if (events.at(-1) !== e.kind) events.push(e.kind);
        if (e.kind === 'model') chat = e.chat;
      },
      { store: store() },
    );
    expect(events).toEqual(['download', 'load', 'model']);
    expect(chat).toBe(true);
    let n = 0;
    for await (const c of engine.generate('hello', { maxTokens: 3 })) n += c.ids.length;
    expect(n).toBeGreaterThan(0);
    await engine.unload();
  });

  it('downloads only the chosen GGUF file of a hub repository, and opens it offline afterwards', async () => {
    const s = store();
    const choice: ModelChoice = { kind: 'hub', id: 'org/gguf', file: 'tiny-q8_0.gguf', baseUrl: hub.url };
    const seen: number[] = [];
    const files = await openChoice(choice, { store: s, onProgress: (p) => seen.push(p.bytesDone) });
    expect(files.name).toBe('org/gguf/tiny-q8_0.gguf@main');
    expect((await s.list()).map((m) => m.files)).toEqual([['tiny-q8_0.gguf']]);
    expect(seen.length).toBeGreaterThan(0);
    const opened = await openModel(files);
    expect([opened.format, opened.spec.family, opened.chat]).toEqual(['gguf', 'qwen2', true]);
    const offlineFiles = await openChoice(choice, { store: s, fetch: offline });
    expect((await openModel(offlineFiles)).spec.family).toBe('qwen2');
    // The repository's other file joins the same cache entry; both then open offline.
    await openChoice({ ...choice, file: 'tiny-f32.gguf' }, { store: s });
    const [entry] = await s.list();
    expect([...(entry?.files ?? [])].sort()).toEqual(['tiny-f32.gguf', 'tiny-q8_0.gguf']);
    const f32 = await openChoice({ ...choice, file: 'tiny-f32.gguf' }, { store: s, fetch: offline });
    expect((await openModel(f32)).spec.family).toBe('llama');
    expect((await openModel(await openChoice(choice, { store: s, fetch: offline }))).spec.family).toBe(
      'qwen2',
    );
  });

  it('caches a .gguf URL as its one file, and says the chat template in its metadata is there', async () => {
    let chat: boolean | undefined;
    const s = store();
    const engine = await loadChoice(
      {
        choice: `${hub.url}/org/gguf/resolve/main/tiny-q8_0.gguf`,
        device: 'cpu',
      },
      (e) => {
        if (e.kind === 'model') chat = e.chat;
      },
      { store: s },
    );
    expect(chat).toBe(true);
    expect((await s.list()).map((m) => [m.key, m.files])).toEqual([
      [{ source: `${hub.url}/org/gguf/resolve/main`, revision: '' }, ['tiny-q8_0.gguf']],
    ]);
    let n = 0;
    for await (const c of engine.generate('hello', { maxTokens: 2 })) n += c.ids.length;
    expect(n).toBeGreaterThan(0);
    await engine.unload();
  });

  it('refuses a hub file that is not a .gguf file, naming it, and caches nothing', async () => {
    const s = store();
    const err = await openChoice(
      { kind: 'hub', id: 'org/gguf', file: 'config.json', baseUrl: hub.url },
      { store: s },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidInputError);
    expect(String(err)).toMatch(/"config\.json"/);
    expect(await s.list()).toEqual([]);
  });

  it('reads "org/name/file.gguf[@revision]" the same way in the engine, the CLI and the demo', async () => {
    expect(parseHubRef('org/name')).toEqual({ id: 'org/name' });
    expect(parseHubRef('org/name@v1.0')).toEqual({ id: 'org/name', revision: 'v1.0' });
    expect(parseHubRef('Org/Name-GGUF/name-Q4_K_M.gguf@main')).toEqual({
      id: 'Org/Name-GGUF',
      file: 'name-Q4_K_M.gguf',
      revision: 'main',
    });
    for (const bad of ['org', 'org/name/config.json', 'org/../x', 'a/b/c/d.gguf', 'org/name@'])
      expect(parseHubRef(bad), bad).toBeUndefined();
    const inPlace = await openModelSource(resolveModel('org/gguf/tiny-f32.gguf', { hubBase: hub.url }));
    expect(inPlace.gguf).toBe('tiny-f32.gguf');
    expect((await openModel(inPlace)).spec.family).toBe('llama');
    expect(() => resolveModel('org/gguf/notes.txt', { hubBase: hub.url })).toThrow(/file\.gguf/);
  });
});
