// The demo's service worker (production build only): keeps the app shell (HTML, scripts, Web
// Workers, CSS, manifest, icons) so the page opens with no network. Model weights are not its
// business: they go through weft's IndexedDB weights cache, and every request outside the shell
// (models, the hub, Range requests) passes straight to the network.
//
// Versions: the build writes BUILD (a hash of every shell file) and SHELL (their paths relative to
// this script) into the built sw.js, so a new build is a new script and the browser installs it
// beside the old one. Install fetches the whole new shell into its own cache `weft-shell-<BUILD>`
// (all or nothing: one failed file fails the install and the old version stays); until the new
// worker activates, the old one keeps serving its own cache, so a page never mixes files of two
// builds. Activate deletes every other shell cache. The page decides when to activate a waiting
// worker (see demo/ui/offline.ts): at start-up, or when the visitor presses "Reload".

/** The build's hash; `__WEFT_BUILD__` is replaced when the demo is built. */
const BUILD = '__WEFT_BUILD__';
/** The shell's files, comma-separated, relative to this script; replaced when the demo is built. */
const SHELL = '__WEFT_SHELL__'.split(',');

const PREFIX = 'weft-shell-';
const CACHE = `${PREFIX}${BUILD}`;

if (!(self instanceof ServiceWorkerGlobalScope)) throw new Error('sw.ts runs only as a service worker');
const sw: ServiceWorkerGlobalScope = self;
const scope = new URL(sw.registration.scope);
const shell = new Set(SHELL.map((path) => new URL(path, scope).href));
const index = new URL('index.html', scope).href;

/** The shell URL a GET request stands for (the scope's root is index.html), or undefined. */
function shellUrl(request: Request): string | undefined {
  if (request.method !== 'GET') return undefined;
  const url = new URL(request.url);
  url.search = '';
  url.hash = '';
  const href = url.href === scope.href ? index : url.href;
  return shell.has(href) ? href : undefined;
}

sw.addEventListener('install', (event) => {
  event.waitUntil(
    (async () => {
      const cache = await caches.open(CACHE);
      try {
        // `reload`: past the HTTP cache, so every file comes from this build on the server.
        await cache.addAll([...shell].map((url) => new Request(url, { cache: 'reload' })));
      } catch (err) {
        await caches.delete(CACHE);
        throw err;
      }
    })(),
  );
});

sw.addEventListener('activate', (event) => {
  event.waitUntil(
    (async () => {
      for (const name of await caches.keys())
        if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
      await sw.clients.claim();
    })(),
  );
});

sw.addEventListener('message', (event) => {
  if (event.data === 'activate') void sw.skipWaiting();
});

sw.addEventListener('fetch', (event) => {
  const url = shellUrl(event.request);
  if (url === undefined) return;
  event.respondWith((async () => (await (await caches.open(CACHE)).match(url)) ?? fetch(event.request))());
});

export {};
