import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineWorkerLoadOptions } from '../../src/engine/worker-protocol.js';
import type { WeftErrorName } from '../../src/errors.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';
import { launchChromium, logPageErrors, startServer } from '../helpers/browser.js';
import { type HubServer, startHubServer } from '../helpers/hub-server.js';
import type { LoadFailure } from '../helpers/pages/worker-load-errors.js';

let browser: Browser;
let server: ViteDevServer;
let url: string;
let root: string;
let hub: HubServer;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'weft-load-errors-'));
  await writeFixtureDir(join(root, 'org', 'tiny'), 'llama', 'f32');
  hub = await startHubServer(root);
  ({ url, server } = await startServer());
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
  await hub?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((ok) => probe.listen(0, '127.0.0.1', ok));
  const address = probe.address();
  await new Promise((ok) => probe.close(ok));
  if (typeof address !== 'object' || address === null) throw new Error('no TCP address');
  return address.port;
}

describe('errors thrown in a Web Worker', () => {
  it('reach the page as the same weft class, with name, message, fields and cause', async () => {
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(new URL('test/helpers/pages/worker-errors.html', url).href);
    const status = page.getByTestId('status');
    await expect.poll(() => status.textContent(), { timeout: 120_000 }).not.toBe('running');
    expect(await status.textContent()).toBe('done');
    expect(JSON.parse((await page.getByTestId('problems').textContent())!)).toEqual([]);

    const names: Record<WeftErrorName, true> = {
      WeftError: true,
      GpuUnavailableError: true,
      GpuStepError: true,
      DeviceLostError: true,
      InvalidInputError: true,
      AbortError: true,
      EngineClosedError: true,
      ModelFormatError: true,
      QuotaError: true,
      IntegrityError: true,
      DownloadError: true,
      SteerMismatchError: true,
      ContextLengthError: true,
      DeviceLimitError: true,
      GrammarError: true,
    };
    const want = Object.keys(names).flatMap((n) => [
      `${n} from load`,
      `${n} from render`,
      `${n} from generate`,
    ]);
    expect((await status.getAttribute('data-checked'))?.split(',').sort()).toEqual(want.sort());
    await page.close();
  });
});

describe("model requests that fail, through weft's engine worker", () => {
  it('a closed port, a 404, an HTML page and a hub id while offline each reach the page as a DownloadError naming the URL requested', async () => {
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(new URL('test/helpers/pages/worker-load-errors.html', url).href);
    await expect.poll(() => page.getByTestId('status').textContent()).toBe('ready');
    const load = (options: EngineWorkerLoadOptions) =>
      page.evaluate((o) => window.loadError(o), options) as Promise<LoadFailure | 'loaded'>;
    /** Loads `options`; expects a DownloadError for `requested` with `status`, named in its message. */
    const expectFailure = async (options: EngineWorkerLoadOptions, requested: string, status: number) => {
      const got = await load(options);
      expect(got, JSON.stringify(options)).toMatchObject({
        name: 'DownloadError',
        weft: true,
        download: true,
      });
      const failure = got as LoadFailure;
      expect(failure.url).toBe(requested);
      expect(failure.status).toBe(status);
      expect(failure.message).toContain(requested);
      return failure.message;
    };

    const closed = `http://127.0.0.1:${await closedPort()}/models/tiny/`;
    expect(await expectFailure({ model: closed }, `${closed}config.json`, 0)).toMatch(
      /network error \(TypeError: Failed to fetch\): check the URL/,
    );

    // A path of the page's own server that is not there (relative, resolved against the worker).
    const missing = new URL('test-results/does-not-exist/', url).href;
    expect(
      await expectFailure({ model: '/test-results/does-not-exist/' }, `${missing}config.json`, 404),
    ).toMatch(/HTTP 404/);

    // A server that answers a missing path with its index.html, as Vite's and SPA hosts do.
    hub.faults.spa = true;
    const wrong = `${hub.url}/org/wrong/resolve/main/`;
    expect(await expectFailure({ model: wrong }, `${wrong}config.json`, 200)).toMatch(
      /got an HTML page .*the path is probably wrong/,
    );
    hub.faults.spa = false;

    // A hub id through the weights cache with the browser offline.
    await page.context().setOffline(true);
    const first = `${hub.url}/org/tiny/resolve/main/generation_config.json`;
    expect(await expectFailure({ choice: 'org/tiny', hubBase: hub.url }, first, 0)).toMatch(/network error/);
    await page.context().setOffline(false);
    await page.close();
  });
});
