import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/errors.js';
import { pathModel } from '../../src/store/node-source.js';
import {
  blobsModel,
  DEFAULT_HUB_URL,
  fileUrl,
  hubModel,
  keyString,
  localFilesModel,
  modelKey,
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
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
