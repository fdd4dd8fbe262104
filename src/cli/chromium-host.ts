// Node only. Runs the engine inside headless Chromium's WebGPU: the CLI's host where Node's Dawn
// can't run kernels (with only SwiftShader, Dawn's Node binding corrupts memory once a dispatch is
// spread over threads; Chromium runs the same SwiftShader fine). A loopback HTTP server serves a
// page it writes itself, weft's compiled modules (dist/) as they are, the few packages they import
// by name, and the model folder; results come back through exposed functions. No bundle ships for
// this: the page imports dist/src/cli/host/page.js, whose worker is dist/workers/engine.worker.js.
import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { dirname, extname, join, normalize, resolve, sep } from 'node:path';
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
  '.mjs': 'text/javascript',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
};

/** The page Chromium opens: it only loads the host module. */
const HOST_PAGE = `<!doctype html>
<html lang="en">
  <head><meta charset="utf-8" /><title>weft host</title><link rel="icon" href="data:," /></head>
  <body>
    <p id="status">weft CLI host page</p>
    <script type="module" src="/weft/src/cli/host/page.js"></script>
  </body>
</html>
`;

/** weft's compiled output (the folder that holds src/ and workers/), next to this file. */
function distDir(): string {
  const dir = resolve(fileURLToPath(new URL('.', import.meta.url)), '..', '..');
  if (!existsSync(join(dir, 'workers', 'engine.worker.js')))
    throw new GpuUnavailableError(
      `the browser host needs weft's compiled modules (${join(dir, 'workers', 'engine.worker.js')} is missing): run \`npm run build\``,
    );
  return dir;
}

/** A package's folder, found as Node finds it: node_modules in `from` or a folder above it. */
function packageDir(name: string, from: string): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dirname(dir) === dir) return undefined;
  }
}

/** The ES module a browser should load for a package's main entry: `exports` (browser, import, default), else `module`, else `main`. */
function browserEntry(dir: string): string {
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    exports?: unknown;
    module?: string;
    main?: string;
  };
  const pick = (e: unknown): string | undefined => {
    if (typeof e === 'string') return e;
    if (!e || typeof e !== 'object') return undefined;
    const o = e as Record<string, unknown>;
    for (const key of ['.', 'browser', 'import', 'module', 'default']) {
      const hit = key in o ? pick(o[key]) : undefined;
      if (hit) return hit;
    }
    return undefined;
  };
  return normalize(pick(pkg.exports) ?? pkg.module ?? pkg.main ?? 'index.js').replace(/^\.\//, '');
}

/**
 * Points a module's imports of packages by name (`from 'comlink'`) at `/pkg/<name>/<entry>`, which
 * the server maps to the package's folder. Module workers ignore import maps, so the rewrite is done
 * on the text as it is served; relative imports are left as they are.
 */
function rewriteBareImports(code: string, entryOf: (name: string) => string | undefined): string {
  return code.replace(
    /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(['"])([^'"./][^'"]*)\2/g,
    (all, lead: string, quote: string, spec: string) => {
      if (spec.startsWith('node:') || /^[a-z]+:/.test(spec)) return all;
      const name = spec
        .split('/')
        .slice(0, spec.startsWith('@') ? 2 : 1)
        .join('/');
      const entry = entryOf(name);
      if (!entry) return all;
      const sub = spec.slice(name.length).replace(/^\//, '');
      return `${lead}${quote}/pkg/${name}/${sub || entry}${quote}`;
    },
  );
}

/** Sends `file` with ranges (model files are read in slices); JS goes through `transform`. */
function sendFile(
  res: ServerResponse,
  file: string,
  method: string | undefined,
  range: string | undefined,
  transform?: (code: string) => string,
): void {
  const type = TYPES[extname(file)] ?? 'application/octet-stream';
  if (transform && type === 'text/javascript') {
    const body = Buffer.from(transform(readFileSync(file, 'utf8')));
    res.writeHead(200, { 'content-type': type, 'content-length': body.byteLength });
    res.end(method === 'HEAD' ? undefined : body);
    return;
  }
  const size = statSync(file).size;
  const headers: Record<string, string | number> = { 'content-type': type, 'accept-ranges': 'bytes' };
  const m = /^bytes=(\d+)-(\d*)$/.exec(range ?? '');
  if (m) {
    const start = Number(m[1]);
    const end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
    res.writeHead(206, {
      ...headers,
      'content-length': end - start + 1,
      'content-range': `bytes ${start}-${end}/${size}`,
    });
    if (method === 'HEAD') res.end();
    else createReadStream(file, { start, end }).pipe(res);
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': size });
  if (method === 'HEAD') res.end();
  else createReadStream(file).pipe(res);
}

/** `rel` inside `root`, if it names a file there (never a path that climbs out of it). */
function fileIn(root: string, rel: string): string | undefined {
  const file = normalize(join(root, rel));
  return file.startsWith(resolve(root) + sep) && existsSync(file) && statSync(file).isFile()
    ? file
    : undefined;
}

/**
 * Serves `/host/` (the page), `/weft/*` from weft's compiled modules, `/pkg/<name>/*` from the
 * packages they import, `/model/*` from the model folder and `/draft/*` from the draft model
 * folder, with ranges.
 */
function serve(modelDir: string, draftDir?: string): Promise<{ server: Server; origin: string }> {
  const dist = distDir();
  const packages = new Map<string, { dir: string; entry: string } | undefined>();
  const pkg = (name: string) => {
    if (!packages.has(name)) {
      const dir = packageDir(name, dist);
      packages.set(name, dir ? { dir, entry: browserEntry(dir) } : undefined);
    }
    return packages.get(name);
  };
  const rewrite = (code: string) => rewriteBareImports(code, (name) => pkg(name)?.entry);
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const parts = decodeURIComponent(url.pathname).split('/').slice(1);
    const [area, ...rest] = parts;
    let file: string | undefined;
    if (area === 'host' && rest.join('/') in { '': 1, 'index.html': 1 }) {
      res.writeHead(200, { 'content-type': 'text/html' }).end(HOST_PAGE);
      return;
    }
    if (area === 'weft') file = fileIn(dist, rest.join('/'));
    else if (area === 'pkg') {
      const scoped = rest[0]?.startsWith('@') ? 2 : 1;
      const found = pkg(rest.slice(0, scoped).join('/'));
      file = found && fileIn(found.dir, rest.slice(scoped).join('/'));
    } else if (area === 'model') file = fileIn(modelDir, rest.join('/'));
    else if (area === 'draft' && draftDir) file = fileIn(draftDir, rest.join('/'));
    if (!file) {
      res.writeHead(404).end();
      return;
    }
    const code = area === 'weft' || area === 'pkg' ? rewrite : undefined;
    sendFile(res, file, req.method, req.headers.range, code);
  });
  return new Promise((ok) =>
    server.listen(0, '127.0.0.1', () => {
      const addr = server.address();
      ok({ server, origin: `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}` });
    }),
  );
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
  const { server, origin } = await serve(resolve(modelDir), draftDir && resolve(draftDir));
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
