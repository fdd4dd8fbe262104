import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChoiceLoadEvent, loadChoice, type ModelChoice, openChoice } from '../../src/engine/sources.js';
import { convertModel } from '../../src/model/convert.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { dirModelFiles } from '../../src/model/node-files.js';
import { memoryBackend, WeightStore } from '../../src/store/store.js';
import { fixtureFiles } from '../fixtures/write.js';
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
    dirModelFiles(out),
    { quant: 'int4' },
    {
      file: async () => {},
      weights: async (c) => {
        chunks.push(c.slice());
      },
    },
  );
  await writeFile(join(out, WEFT_WEIGHTS), Buffer.concat(chunks));
  hub = await startHubServer(root, { lfsThreshold: 10_000 });
});

afterAll(async () => {
  await hub?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

const store = () => new WeightStore({ backend: memoryBackend(), estimate: async () => ({}) });
const offline: typeof fetch = () => Promise.reject(new TypeError('offline'));

describe('model choices', () => {
  it('downloads a sharded hub model into the cache, then opens it from the cache with no network', async () => {
    const s = store();
    const choice: ModelChoice = { kind: 'hub', id: 'org/sharded', hubBase: hub.url };
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
    const files = await openChoice({ kind: 'hub', id: 'org/converted', hubBase: hub.url }, { store: s });
    const [stored] = await s.list();
    expect(stored?.files).toContain(WEFT_WEIGHTS);
    expect(stored?.files).not.toContain('model.safetensors');
    const opened = await openModel(files);
    expect(opened.source).toBe('weft-q');
    expect(opened.packed?.format).toBe('int4');
  });

  it('lists only the optional files the server has and reports a missing model', async () => {
    const s = store();
    await expect(
      openChoice({ kind: 'hub', id: 'org/absent', hubBase: hub.url }, { store: s }),
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
    const url = await openChoice(
      { kind: 'url', url: `${hub.url}/org/single/resolve/main/`, cache: false },
      { store: s },
    );
    expect((await openModel(url)).spec.family).toBe('llama');
    expect(await s.list()).toEqual([]);
  });

  it('loads a choice into an engine with download, load and model events', async () => {
    const events: ChoiceLoadEvent['kind'][] = [];
    let chat: boolean | undefined;
    const engine = await loadChoice(
      { choice: { kind: 'url', url: `${hub.url}/org/single/resolve/main`, cache: true }, device: 'cpu' },
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
});
