import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/errors.js';
import { blobsModel, localFilesModel, memoryModelFiles } from '../../src/formats/io/files.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { resolveNodeModel } from '../../src/store/node-source.js';
import {
  DEFAULT_HUB_URL,
  fileUrl,
  hubModel,
  keyString,
  modelKey,
  resolveModel,
  sourceName,
  urlModel,
} from '../../src/store/source.js';

describe('model sources', () => {
  it('resolves hub ids to <base>/<id>/resolve/<rev>/<file>', () => {
    const m = hubModel('Qwen/Qwen3-0.6B');
    expect(m.baseUrl).toBe(DEFAULT_HUB_URL);
    expect(fileUrl(m, 'config.json')).toBe('https://huggingface.co/Qwen/Qwen3-0.6B/resolve/main/config.json');
    const pinned = hubModel('org/name', { revision: 'v1.0', baseUrl: 'http://127.0.0.1:9/' });
    expect(fileUrl(pinned, 'onnx/model q.bin')).toBe(
      'http://127.0.0.1:9/org/name/resolve/v1.0/onnx/model%20q.bin',
    );
    expect(fileUrl(hubModel('a/b', { revision: 'refs/pr/1' }), 'x')).toBe(
      'https://huggingface.co/a/b/resolve/refs%2Fpr%2F1/x',
    );
  });

  it('rejects malformed ids, revisions and file names with InvalidInputError', () => {
    for (const bad of ['', 'noslash', 'a/b/c', '../x', 'a/..', 'a b/c']) {
      expect(() => hubModel(bad), bad).toThrow(InvalidInputError);
    }
    expect(() => hubModel('a/b', { revision: '' })).toThrow(InvalidInputError);
    for (const bad of ['', '/abs', 'a//b', '../up', 'a/./b']) {
      expect(() => fileUrl(hubModel('a/b'), bad), bad).toThrow(InvalidInputError);
    }
    expect(() => urlModel('relative/path')).toThrow(InvalidInputError);
    expect(() => urlModel('file:///etc')).toThrow(InvalidInputError);
  });

  it('plain URLs append the file; keys ignore the mirror', () => {
    const u = urlModel('https://example.com/models/tiny/');
    expect(fileUrl(u, 'model.safetensors')).toBe('https://example.com/models/tiny/model.safetensors');
    expect(keyString(modelKey(u))).toBe('https://example.com/models/tiny@');
    const a = hubModel('org/m', { baseUrl: 'https://mirror.example' });
    const b = hubModel('org/m');
    expect(modelKey(a)).toEqual(modelKey(b));
    expect(keyString(modelKey(hubModel('org/m', { revision: 'abc' })))).toBe('org/m@abc');
  });

  it('resolves every way of naming a model to one source', () => {
    const hub = resolveModel('org/name/name-q8_0.gguf@v1', { hubBase: 'http://127.0.0.1:9/' });
    expect(hub).toEqual({
      kind: 'hub',
      id: 'org/name',
      revision: 'v1',
      baseUrl: 'http://127.0.0.1:9',
      file: 'name-q8_0.gguf',
    });
    expect(sourceName(hub)).toBe('org/name/name-q8_0.gguf@v1');
    expect(hub.kind === 'hub' && fileUrl(hub, 'x')).toBe('http://127.0.0.1:9/org/name/resolve/v1/x');
    expect(resolveModel({ kind: 'hub', id: 'org/name' })).toEqual(hubModel('org/name'));
    expect(
      resolveModel({ kind: 'hub', id: 'org/name', baseUrl: 'http://m' }, { hubBase: 'http://n' }),
    ).toEqual(hubModel('org/name', { baseUrl: 'http://m' }));
    const folder = resolveModel('https://example.com/m/tiny/');
    expect(folder).toEqual(urlModel('https://example.com/m/tiny'));
    expect(sourceName(folder)).toBe('https://example.com/m/tiny/');
    const gguf = resolveModel('https://example.com/m/tiny.gguf?download=1');
    expect(gguf).toEqual({ ...urlModel('https://example.com/m/'), file: 'tiny.gguf' });
    expect(sourceName(gguf)).toBe('https://example.com/m/tiny.gguf');
    const mem = memoryModelFiles('mem', new Map());
    expect(resolveModel(mem)).toEqual({ kind: 'local', files: mem });
    const picked = resolveModel({ kind: 'files', files: [new File(['{}'], 'config.json')] });
    expect(picked.kind === 'local' && picked.files.name).toBe('local files');
    expect(resolveModel(hub)).toEqual(hub);
    for (const bad of ['org', 'org/name/config.json', 'a/b/c/d.gguf'])
      expect(() => resolveModel(bad), bad).toThrow(InvalidInputError);
    // No page in Node: a relative URL has nothing to resolve against.
    expect(() => resolveModel('/models/kjv-target/')).toThrow(InvalidInputError);
    expect(() => resolveModel({ kind: 'hub', id: 'org/name', file: 'config.json' })).toThrow(
      /"config\.json"/,
    );
  });

  it('local files are read in place by their path inside the picked folder', async () => {
    const picked = new File([new Uint8Array([1, 2, 3, 4])], 'model.bin');
    Object.defineProperty(picked, 'webkitRelativePath', { value: 'tiny/sub/model.bin' });
    const loose = new File(['{"a":1}'], 'config.json');
    const src = localFilesModel([picked, loose], 'tiny');
    expect(src.files).toEqual(['config.json', 'sub/model.bin']);
    const bs = await src.open('sub/model.bin');
    expect(bs.size).toBe(4);
    expect([...(await bs.read(1, 2))]).toEqual([2, 3]);
    await expect(src.open('missing')).rejects.toThrow(InvalidInputError);
    const blobs = blobsModel(new Map([['a', new Blob(['xyz'])]]), 'mem');
    expect(new TextDecoder().decode(await (await blobs.open('a')).read(0, 3))).toBe('xyz');
  });

  it('a Node path lists files recursively and reads ranges', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'weft-src-'));
    try {
      await mkdir(join(dir, 'sub'));
      await writeFile(join(dir, 'config.json'), '{}');
      await writeFile(join(dir, 'sub', 'w.bin'), new Uint8Array([9, 8, 7, 6, 5]));
      const src = await pathModel(dir);
      expect(src.files).toEqual(['config.json', 'sub/w.bin']);
      const bs = await src.open('sub/w.bin');
      expect(bs.size).toBe(5);
      expect([...(await bs.read(2, 3))]).toEqual([7, 6, 5]);
      await expect(src.open('nope')).rejects.toThrow(InvalidInputError);
      await src.close?.();
      // A .gguf path is that one file; in Node, paths resolve to local sources.
      await writeFile(join(dir, 'sub', 'm.gguf'), new Uint8Array([1, 2]));
      const gguf = await pathModel(join(dir, 'sub', 'm.gguf'));
      expect([gguf.gguf, gguf.files, await gguf.exists('w.bin')]).toEqual(['m.gguf', ['m.gguf'], false]);
      expect((await gguf.open('m.gguf')).size).toBe(2);
      await gguf.close?.();
      const local = await resolveNodeModel(dir);
      expect(local.kind === 'local' && (await local.files.text('config.json'))).toBe('{}');
      await expect(resolveNodeModel(join(dir, 'config.json'))).rejects.toThrow(InvalidInputError);
      expect(await resolveNodeModel('org/name')).toEqual(hubModel('org/name'));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
