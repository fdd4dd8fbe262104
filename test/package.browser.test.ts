// The published package as a web developer gets it: `npm pack`, install the tarball into a copy of
// examples/vite-app, copy the bundled model in with the script its README names, type-check it
// (skipLibCheck off: weft's .d.ts must stand on their own), build it with its own config, serve
// the build and chat in Chromium: tokens stream, Stop cancels, the next request runs. Prints what
// weft adds to node_modules and the built sizes of the main chunk and the worker.
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import type { Browser } from 'playwright-core';
import { type PreviewServer, preview } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium, logPageErrors } from './helpers/browser.js';

const run = promisify(execFile);
const EXAMPLE = resolve('examples/vite-app');
/** What the example's own install and build leave behind: not part of a copy. */
const LOCAL = ['node_modules', 'dist', 'public', 'package-lock.json'];

let dir: string;
let server: PreviewServer | undefined;
let browser: Browser | undefined;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-example-'));
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

/** Bytes of the files under `path`, not following nested node_modules (their own lock entries). */
async function bytesUnder(path: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(path, { withFileTypes: true })) {
    const p = join(path, e.name);
    if (e.isDirectory()) total += e.name === 'node_modules' ? 0 : await bytesUnder(p);
    else if (e.isFile()) total += (await stat(p)).size;
  }
  return total;
}

/** Files under `path` (relative), recursively. */
async function filesUnder(path: string): Promise<string[]> {
  const entries = await readdir(path, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name).slice(path.length + 1));
}

const kB = (n: number) => `${(n / 1000).toFixed(1)} kB`;

describe('examples/vite-app against the packed package', () => {
  it('installs light, type-checks, builds without warnings and streams a chat in Chromium', {
    timeout: 600_000,
  }, async () => {
    const pack = await run('npm', ['pack', '--pack-destination', dir, '--ignore-scripts', '--json'], {
      maxBuffer: 1 << 24,
    });
    const [{ filename, files }] = JSON.parse(pack.stdout) as [
      { filename: string; files: { path: string }[] },
    ];
    const shipped = files.map((f) => f.path);
    expect(shipped).toContain('LICENSE');
    // No demo site, self-test worker or kernel (the demo's), and no bundle for the CLI's Chromium
    // host: it serves the compiled modules every user gets (src/cli/chromium-host.ts).
    expect(
      shipped.filter((f) => /^dist\/(demo\/|host\/|workers\/selftest|src\/kernels\/selftest\/)/.test(f)),
    ).toEqual([]);
    expect(shipped).toContain('dist/src/gen/xgrammar.js');

    // A copy of the example, with weft from the tarball instead of the repository.
    const app = join(dir, 'app');
    await cp(EXAMPLE, app, {
      recursive: true,
      filter: (src) => !LOCAL.includes(src.slice(EXAMPLE.length + 1)),
    });
    const pkg = JSON.parse(await readFile(join(app, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    pkg.dependencies.weft = `file:${join(dir, filename)}`;
    await writeFile(join(app, 'package.json'), JSON.stringify(pkg, null, 2));
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
      cwd: app,
      maxBuffer: 1 << 24,
    });

    // What weft brings: the lock's packages that are not the app's dev tools (vite, typescript).
    const lock = JSON.parse(await readFile(join(app, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean; hasInstallScript?: boolean }>;
    };
    const runtime = Object.entries(lock.packages).filter(([path, p]) => path !== '' && !p.dev);
    let bytes = 0;
    for (const [path] of runtime) bytes += await bytesUnder(join(app, path));
    const names = runtime.map(([path]) => path.replace(/^.*node_modules\//, ''));
    console.log(
      `weft adds ${runtime.length} packages, ${(bytes / 2 ** 20).toFixed(1)} MB: ${names.join(', ')}`,
    );
    expect(names).not.toContain('webgpu');
    expect(names).not.toContain('playwright-core');
    expect(runtime.filter(([, p]) => p.hasInstallScript).map(([path]) => path)).toEqual([]);
    for (const [path] of runtime)
      expect((await filesUnder(join(app, path))).filter((f) => /\.node$|binding\.gyp$/.test(f))).toEqual([]);
    expect(bytes).toBeLessThan(20 * 2 ** 20);

    await run('npm', ['run', 'model', '--', resolve('models/kjv-target')], { cwd: app });
    // The example's tsconfig checks libraries (skipLibCheck off), so weft's .d.ts are checked;
    // TypeScript's own DOM library is not (the slowest part, and not ours). It runs beside the
    // rest; its failure (with tsc's output) is reported at the end.
    const typecheck = run('npx', ['tsc', '--noEmit', '-p', '.', '--skipDefaultLibCheck'], { cwd: app }).then(
      () => 'no errors',
      (e: { stdout?: string }) => e.stdout ?? String(e),
    );
    const build = await run(join(app, 'node_modules', '.bin', 'vite'), ['build', '--logLevel', 'warn'], {
      cwd: app,
      maxBuffer: 1 << 24,
    });
    // Not one warning (weft carries the grammar engine with its Node-only start-up lines out of
    // bundlers' sight: scripts/gen-xgrammar.mjs).
    const warnings = `${build.stdout}${build.stderr}`.split('\n').filter((line) => line.trim() !== '');
    expect(warnings).toEqual([]);

    // The main chunk is the page's entry; the worker's initial chunk is worker-*.js (the grammar
    // engine and the draft head are chunks of their own, loaded when a request needs them).
    const assets = join(app, 'dist', 'assets');
    const html = await readFile(join(app, 'dist', 'index.html'), 'utf8');
    const main = /<script type="module" crossorigin src="\/assets\/([^"]+\.js)"/.exec(html)?.[1];
    const worker = (await readdir(assets)).find((f) => /^worker-.*\.js$/.test(f));
    expect(main, html).toBeDefined();
    expect(worker).toBeDefined();
    const size = async (file: string) => {
      const code = await readFile(join(assets, file));
      return { raw: code.byteLength, gzip: gzipSync(code).byteLength };
    };
    const [m, w] = [await size(main!), await size(worker!)];
    console.log(`main chunk ${kB(m.raw)} (${kB(m.gzip)} gzip), worker ${kB(w.raw)} (${kB(w.gzip)} gzip)`);
    expect(m.raw).toBeLessThanOrEqual(50_000);
    expect(w.raw).toBeLessThanOrEqual(500_000);

    // Serve the build and chat: the reply streams in piece by piece, and Stop ends it.
    server = await preview({
      root: app,
      configFile: join(app, 'vite.config.ts'),
      logLevel: 'warn',
      preview: { host: '127.0.0.1', port: 0 },
    });
    const url = server.resolvedUrls?.local[0];
    expect(url).toBeDefined();
    browser = await launchChromium();
    const page = await browser.newPage();
    logPageErrors(page);
    await page.goto(url!);
    const status = page.locator('#status');
    await expect.poll(() => status.textContent(), { timeout: 120_000 }).not.toMatch(/^loading/);
    expect(await status.textContent()).toBe('ready');
    // Counts the updates of the reply as they land, and presses Stop at the third.
    const STOP_AT = 3;
    await page.evaluate((stopAt) => {
      const out = document.querySelector('#out')!;
      const stop = document.querySelector<HTMLButtonElement>('#stop')!;
      let updates = 0;
      new MutationObserver(() => {
        if (out.textContent === '') return;
        out.setAttribute('data-updates', String(++updates));
        if (updates === stopAt) stop.click();
      }).observe(out, { childList: true, characterData: true });
    }, STOP_AT);
    await page.locator('#send').click();
    await expect.poll(() => status.textContent(), { timeout: 120_000 }).toMatch(/^(stopped|done|.*Error)/);
    expect(await status.textContent()).toBe('stopped');
    expect(await page.locator('#out').getAttribute('data-updates')).toBe(String(STOP_AT));
    expect(await page.locator('#stop').isDisabled()).toBe(true);
    expect(await page.locator('#send').isEnabled()).toBe(true);
    expect(await typecheck).toBe('no errors');
  });

  // The CLI from the same install, once its optional Node part is added as the README says: the
  // Chromium host serves the installed package's compiled modules (no bundle ships for it) and
  // finds the packages they import in the app's node_modules.
  it('runs `weft generate` on the Chromium host from the install, with the reference ids', {
    timeout: 300_000,
  }, async () => {
    const app = join(dir, 'app');
    const { devDependencies } = JSON.parse(await readFile('package.json', 'utf8')) as {
      devDependencies: Record<string, string>;
    };
    await run(
      'npm',
      ['install', '--no-save', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'].concat(
        `playwright-core@${devDependencies['playwright-core']}`,
      ),
      { cwd: app, maxBuffer: 1 << 24 },
    );
    const args = (device: string) => [
      'generate',
      '--model',
      'public/models/kjv-target',
      '--prompt',
      'And God said',
      '--max-tokens',
      '12',
      '--quant',
      'f32',
      '--json',
      '--device',
      device,
    ];
    const cli = join(app, 'node_modules', 'weft', 'bin', 'weft.js');
    const gpu = await run('node', [cli, ...args('gpu'), '--host', 'chromium'], { cwd: app });
    const cpu = await run('node', [cli, ...args('cpu')], { cwd: app });
    expect(gpu.stderr).toBe('');
    type Out = { ids: number[]; stats: { adapter?: string } };
    const [g, c] = [JSON.parse(gpu.stdout) as Out, JSON.parse(cpu.stdout) as Out];
    console.log(`installed CLI on the Chromium host: ${g.ids.length} ids, adapter ${g.stats.adapter}`);
    expect(c.ids.length).toBe(12);
    expect(g.ids).toEqual(c.ids);
  });
});
