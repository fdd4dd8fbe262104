// Failed requests for a model's files become DownloadError naming the URL requested, the status or
// the network's cause, and what to check: a closed port, an error status, an HTML page where a
// model file was expected (a single-page app's server), and a hub id while offline; in place and
// through the weights cache. The same failures across a real worker: test/browser/worker-errors.
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openModelSource } from '../../../src/engine/open.js';
import { DownloadError } from '../../../src/errors.js';
import { ModelFormatError } from '../../../src/formats/errors.js';
import { urlBytes } from '../../../src/formats/io/bytes.js';
import { memoryModelFiles, parseJson, urlModelFiles } from '../../../src/formats/io/files.js';
import { checkResponse, request } from '../../../src/formats/io/http.js';
import { openModel } from '../../../src/model/load.js';
import { resolveModel } from '../../../src/store/source.js';
import { memoryBackend, WeightStore } from '../../../src/store/store.js';
import { writeFixtureDir } from '../../fixtures/write-dir.js';
import { type HubServer, startHubServer } from '../../helpers/hub-server.js';

let root: string;
let hub: HubServer;
/** A loopback port nothing listens on. */
let closedPort: number;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'weft-http-'));
  await writeFixtureDir(join(root, 'org', 'single'), 'llama', 'f32');
  hub = await startHubServer(root);
  const probe = createServer();
  await new Promise<void>((ok) => probe.listen(0, '127.0.0.1', ok));
  const address = probe.address();
  closedPort = typeof address === 'object' && address ? address.port : 0;
  await new Promise((ok) => probe.close(ok));
});

afterAll(async () => {
  await hub?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

const store = () => new WeightStore({ backend: memoryBackend(), estimate: async () => ({}) });

/** What `run` rejects with; fails the test when it resolves. */
async function rejection(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (e) {
    return e;
  }
  throw new Error('expected a rejection');
}

/** Checks `e` is a DownloadError for `url` with `status`, its message naming the URL once. */
function expectDownloadError(e: unknown, url: string, status: number): DownloadError {
  expect(e).toBeInstanceOf(DownloadError);
  const err = e as DownloadError;
  expect(err.url).toBe(url);
  expect(err.status).toBe(status);
  expect(err.message.startsWith(`${url}: `)).toBe(true);
  // No doubled slash in the path of the URL named.
  expect(new URL(err.url).pathname).not.toMatch(/\/\//);
  return err;
}

describe('a failed request', () => {
  it('a network failure: DownloadError with status 0, the cause, and what to check', async () => {
    const offline: typeof fetch = () => Promise.reject(new TypeError('Failed to fetch'));
    const e = await rejection(() => request('https://example.test/m/config.json', offline));
    const err = expectDownloadError(e, 'https://example.test/m/config.json', 0);
    expect(err.message).toMatch(/network error \(TypeError: Failed to fetch\): check the URL/);
    expect(err.message).toMatch(/CORS/);
    expect(err.cause).toBeInstanceOf(TypeError);
  });

  it('an abort passes through as it is', async () => {
    const ac = new AbortController();
    ac.abort();
    const e = await rejection(() =>
      request(`${hub.url}/org/single/resolve/main/config.json`, fetch, { signal: ac.signal }),
    );
    expect(e).not.toBeInstanceOf(DownloadError);
    expect((e as Error).name).toBe('AbortError');
  });

  it('an error status: DownloadError with the status and a hint for the common ones', () => {
    const url = 'https://example.test/m/config.json';
    const cases: [number, string, RegExp][] = [
      [404, 'Not Found', /HTTP 404 Not Found: no such file; check the path/],
      [403, 'Forbidden', /HTTP 403 Forbidden: access refused; a gated or private model/],
      [503, 'Service Unavailable', /HTTP 503 Service Unavailable: the server is busy or failing/],
      [418, '', /HTTP 418$/],
    ];
    for (const [status, statusText, message] of cases) {
      let thrown: unknown;
      try {
        checkResponse(url, new Response('x', { status, statusText }));
      } catch (e) {
        thrown = e;
      }
      expect(expectDownloadError(thrown, url, status).message).toMatch(message);
    }
  });

  it('an HTML page where a model file was expected is named as such; an .html file is not', () => {
    const html = () =>
      new Response('<!doctype html>', { headers: { 'content-type': 'text/html; charset=utf-8' } });
    expect(() => checkResponse('https://example.test/m/config.json', html())).toThrow(
      /got an HTML page \(content-type text\/html; charset=utf-8\) where a model file was expected: the path is probably wrong/,
    );
    expect(() => checkResponse('https://example.test/m/index.html', html())).not.toThrow();
  });
});

describe('loading a model over HTTP', () => {
  it('from a closed port: DownloadError naming the URL requested and the refusal', async () => {
    const base = `http://127.0.0.1:${closedPort}/models/tiny/`;
    const files = await openModelSource(resolveModel(base));
    const err = expectDownloadError(await rejection(() => openModel(files)), `${base}config.json`, 0);
    expect(err.message).toMatch(/ECONNREFUSED/);
  });

  it('a 404: DownloadError naming the file requested (one slash before it)', async () => {
    const base = `${hub.url}/org/does-not-exist/resolve/main/`;
    const files = await openModelSource(resolveModel(base));
    const err = expectDownloadError(await rejection(() => openModel(files)), `${base}config.json`, 404);
    expect(err.message).toMatch(/HTTP 404/);
  });

  it('an HTML page instead of JSON, in place and through the cache: "got an HTML page"', async () => {
    hub.faults.spa = true;
    try {
      const base = `${hub.url}/org/does-not-exist/resolve/main/`;
      const inPlace = await openModelSource(resolveModel(base));
      const err = expectDownloadError(await rejection(() => openModel(inPlace)), `${base}config.json`, 200);
      expect(err.message).toMatch(/got an HTML page .*the path is probably wrong/);
      const cached = await rejection(() =>
        openModelSource(resolveModel('org/does-not-exist', { hubBase: hub.url }), {
          cache: true,
          store: store(),
        }),
      );
      expect(expectDownloadError(cached, `${base}config.json`, 200).message).toMatch(/got an HTML page/);
      // A byte source over an HTML answer is refused the same way.
      expect(await rejection(() => urlBytes(`${base}model.safetensors`))).toBeInstanceOf(DownloadError);
    } finally {
      hub.faults.spa = false;
    }
  });

  it('a hub id while offline: DownloadError naming the first URL requested', async () => {
    const hubBase = `http://127.0.0.1:${closedPort}`;
    const e = await rejection(() =>
      openModelSource(resolveModel('org/single', { hubBase }), { cache: true, store: store() }),
    );
    const err = expectDownloadError(e, `${hubBase}/org/single/resolve/main/generation_config.json`, 0);
    expect(err.message).toMatch(/network error/);
  });

  it('a file of a folder URL is named with one slash in format errors too', () => {
    const files = memoryModelFiles('https://example.test/m/', new Map());
    expect(() => parseJson(files, 'config.json', '<!doctype html>')).toThrow(ModelFormatError);
    expect(() => parseJson(files, 'config.json', '<!doctype html>')).toThrow(
      /^https:\/\/example.test\/m\/config.json: /,
    );
    expect(urlModelFiles('https://example.test/m/').name).toBe('https://example.test/m/');
  });
});
