// The published package as a web app uses it: `npm pack`, install the tarball into a throwaway
// Vite + TypeScript project that imports weft and its worker entry, type-check it and build it.
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-consumer-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the packed package in a Vite app', () => {
  it('installs from the tarball, type-checks and builds with the worker entry', {
    timeout: 600_000,
  }, async () => {
    const pack = await run('npm', ['pack', '--pack-destination', dir, '--ignore-scripts', '--json'], {
      maxBuffer: 1 << 24,
    });
    const [{ filename }] = JSON.parse(pack.stdout) as [{ filename: string }];
    const app = join(dir, 'app');
    await cp(resolve('test/package/app'), app, { recursive: true });
    const pkg = {
      name: 'weft-consumer',
      private: true,
      type: 'module',
      dependencies: { weft: `file:${join(dir, filename)}` },
      devDependencies: { vite: '8.4.0', typescript: '5.9.3', '@webgpu/types': '0.1.74' },
    };
    await (await import('node:fs/promises')).writeFile(join(app, 'package.json'), JSON.stringify(pkg));
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
      cwd: app,
      maxBuffer: 1 << 24,
    });
    await run('npx', ['tsc', '--noEmit', '-p', '.'], { cwd: app });
    await run('npx', ['vite', 'build', '--logLevel', 'warn'], { cwd: app, maxBuffer: 1 << 24 });
    const assets = await readdir(join(app, 'dist', 'assets'));
    const worker = assets.find((f) => f.startsWith('worker'));
    expect(worker, `assets: ${assets.join(', ')}`).toBeDefined();
    // The worker bundle carries weft's engine (createEngine) and its comlink server.
    const code = await readFile(join(app, 'dist', 'assets', worker!), 'utf8');
    expect(code).toMatch(/no model loaded: call load\(\) first/);
  });
});
