// Node only. Runs the engine inside headless Chromium's WebGPU: the CLI's host where Node's Dawn
// can't run kernels (with only SwiftShader, Dawn's Node binding corrupts memory once a dispatch is
// spread over threads; Chromium runs the same SwiftShader fine). A loopback HTTP server serves the
// prebuilt host page (dist/host) and the model folder; results come back through exposed functions.
import { createReadStream, existsSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GenerationChunk, GenerationStats } from '../engine/types.js';
import type { EngineWorkerLoadEvent } from '../engine/worker-protocol.js';
import { GpuUnavailableError } from '../errors.js';
import type { HostJob } from './host/page.js';

/** Chromium flags for WebGPU on SwiftShader (no GPU) or, with WEFT_GPU=real, on the real GPU. */
function chromiumFlags(): string[] {
  const common = [
    '--no-sandbox',
    '--disable-background-networking',
    '--disable-component-update',
    '--no-first-run',
  ];
  if (process.env.WEFT_GPU === 'real')
    return ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-vulkan', ...common];
  return [
    '--enable-unsafe-webgpu',
    '--enable-features=Vulkan',
    '--use-vulkan=swiftshader',
    '--use-webgpu-adapter=swiftshader',
    '--enable-unsafe-swiftshader',
    ...common,
  ];
}

/** Chromium's path: $CHROMIUM, else Debian's. */
export function chromiumPath(): string | undefined {
  const p = process.env.CHROMIUM ?? '/usr/bin/chromium';
  return existsSync(p) ? p : undefined;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html',
  '.js': 'text/javascript',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
};

/**
 * Serves `/host/*` from the built host page, `/model/*` from the model folder and `/draft/*` from
 * the draft model folder, with ranges.
 */
function serve(
  hostDir: string,
  modelDir: string,
  draftDir?: string,
): Promise<{ server: Server; origin: string }> {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const [, area, ...rest] = url.pathname.split('/');
    const roots: Record<string, string | undefined> = { host: hostDir, model: modelDir, draft: draftDir };
    const root = area ? roots[area] : undefined;
    const file = root ? normalize(join(root, decodeURIComponent(rest.join('/')) || 'index.html')) : '';
    if (!root || !file.startsWith(resolve(root) + sep) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end();
      return;
    }
    const size = statSync(file).size;
    const headers: Record<string, string | number> = {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'accept-ranges': 'bytes',
    };
    const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    if (range) {
      const start = Number(range[1]);
      const end = range[2] ? Math.min(Number(range[2]), size - 1) : size - 1;
      res.writeHead(206, {
        ...headers,
        'content-length': end - start + 1,
        'content-range': `bytes ${start}-${end}/${size}`,
      });
      if (req.method === 'HEAD') res.end();
      else createReadStream(file, { start, end }).pipe(res);
      return;
    }
    res.writeHead(200, { ...headers, 'content-length': size });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file).pipe(res);
  });
  return new Promise((ok) =>
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address();
      ok({ server, origin: `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}` });
    }),
  );
}

/** Where the built host page is (dist/host next to dist/src/cli). */
function hostDir(): string {
  const here = fileURLToPath(new URL('.', import.meta.url));
  for (const dir of [join(here, '..', '..', 'host'), join(here, '..', '..', 'dist', 'host')]) {
    if (existsSync(join(dir, 'index.html'))) return dir;
  }
  throw new GpuUnavailableError('the browser host is not built: run `npm run build` (it writes dist/host)');
}

/** Result of a run in Chromium. */
export interface ChromiumRun {
  stats: GenerationStats | undefined;
  adapter: string;
}

/**
 * Loads the model in `modelDir` inside headless Chromium and runs one generation, calling
 * `onChunk` for each streamed chunk.
 */
export async function runInChromium(
  modelDir: string,
  draftDir: string | undefined,
  job: Omit<HostJob, 'load'> & { load: Omit<HostJob['load'], 'model'> },
  onChunk: (c: GenerationChunk) => void,
  onProgress?: (e: EngineWorkerLoadEvent) => void,
): Promise<ChromiumRun> {
  const executablePath = chromiumPath();
  if (!executablePath)
    throw new GpuUnavailableError(
      'Chromium not found: install it (apt-get install chromium) or set CHROMIUM',
    );
  const { chromium } = await import('playwright-core').catch((cause: unknown) => {
    throw new GpuUnavailableError(
      'the Chromium host needs the npm package "playwright-core" (and the node host "webgpu"), optional peer dependencies of weft: npm install playwright-core',
      { cause },
    );
  });
  const { server, origin } = await serve(hostDir(), resolve(modelDir), draftDir && resolve(draftDir));
  const browser = await chromium.launch({ executablePath, headless: true, args: chromiumFlags() });
  try {
    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (e) => pageErrors.push(e.message));
    await page.exposeFunction('weftChunk', (c: GenerationChunk) => onChunk(c));
    await page.exposeFunction('weftProgress', (e: EngineWorkerLoadEvent) => onProgress?.(e));
    await page.goto(`${origin}/host/index.html`);
    await page.waitForFunction(() => typeof window.weftRun === 'function');
    const draft = draftDir
      ? {
          draft: {
            model: `${origin}/draft/`,
            quant: job.load.quant,
          },
        }
      : {};
    const full: HostJob = { ...job, load: { ...job.load, ...draft, model: `${origin}/model/` } };
    try {
      return await page.evaluate((j) => window.weftRun(j), full);
    } catch (err) {
      // Errors cross as text "Error: Name: message"; keep the engine's message, drop the wrapping.
      const msg = err instanceof Error ? err.message : String(err);
      throw new Error(
        msg.replace(/^page\.evaluate: /, '').split('\n')[0] +
          (pageErrors.length ? ` (${pageErrors[0]})` : ''),
      );
    }
  } finally {
    await browser.close();
    server.close();
  }
}
