import { createHash } from 'node:crypto';
import { cp, readdir, readFile, writeFile } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { defineConfig, type Plugin } from 'vite';

// The demo page (index.html) and its Web Workers: `npm run demo` serves them from source (Vite's
// dev server, no service worker); `npm run build:demo` writes a static site to dist/demo (the
// page, its workers, demo/public/'s manifest and icons, the bundled models, and sw.js, the
// service worker that keeps the app shell for offline use). Relative URLs throughout (`base:
// './'`), so the built site can be hosted under any path.
export default defineConfig({
  root: '.',
  base: './',
  publicDir: 'demo/public',
  // No SPA fallback: a missing file must be a 404 (model loaders probe optional files), not index.html.
  appType: 'mpa',
  worker: { format: 'es' },
  server: { host: '127.0.0.1', port: 5173 },
  preview: { host: '127.0.0.1', port: 4173 },
  build: {
    outDir: 'dist/demo',
    target: 'es2022',
    rolldownOptions: {
      input: { index: 'index.html', sw: 'demo/sw.ts' },
      // The service worker keeps a fixed name: a new build is a new sw.js at the same URL.
      output: { entryFileNames: (chunk) => (chunk.name === 'sw' ? 'sw.js' : 'assets/[name]-[hash].js') },
    },
  },
  plugins: [offlineShell(['models/kjv-target', 'models/kjv-draft'])],
});

/**
 * Finishes the built site: copies the bundled `models` (folders that exist) beside the page, then
 * lists every other file of the build (the shell), hashes their contents into one build id, and
 * writes both into sw.js (its `__WEFT_BUILD__` and `__WEFT_SHELL__` placeholders). The models are
 * not in the list: the page downloads them into its IndexedDB weights cache instead (timestamps
 * kept, so a server's size-and-mtime ETag changes only when a model does: see `forgetChanged`).
 */
function offlineShell(models: readonly string[]): Plugin {
  let outDir = '';
  return {
    name: 'weft-offline-shell',
    apply: 'build',
    configResolved(config) {
      outDir = join(config.root, config.build.outDir);
    },
    async closeBundle() {
      const swPath = join(outDir, 'sw.js');
      const sw = await readFile(swPath, 'utf8').catch(() => undefined);
      if (sw === undefined) return; // a worker's sub-build
      const shell = (await filesUnder(outDir)).filter((f) => f !== 'sw.js').sort();
      const hash = createHash('sha256');
      for (const file of shell) hash.update(`${file}\0`).update(await readFile(join(outDir, file)));
      const build = hash.digest('hex').slice(0, 16);
      if (!sw.includes('__WEFT_BUILD__') || !sw.includes('__WEFT_SHELL__'))
        throw new Error('sw.js lost its __WEFT_BUILD__ / __WEFT_SHELL__ placeholders');
      if (shell.some((f) => f.includes(','))) throw new Error(`a shell file name has a comma: ${shell}`);
      await writeFile(swPath, sw.replace('__WEFT_BUILD__', build).replace('__WEFT_SHELL__', shell.join(',')));
      for (const dir of models)
        await cp(dir, join(outDir, dir), { recursive: true, preserveTimestamps: true }).catch(
          (err: NodeJS.ErrnoException) => {
            if (err.code !== 'ENOENT') throw err;
          },
        );
      this.info(`offline shell: build ${build}, ${shell.length} files`);
    },
  };
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)).split(sep).join('/'))
    .filter((f) => !f.startsWith('models/'));
}
