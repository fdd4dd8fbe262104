// A static file server for the scale tests: serves one folder over HTTP on 127.0.0.1 with HEAD,
// Range (206 + Content-Range) and CORS, streaming from disk, so a page on another origin (Vite's)
// reads a checkpoint of gigabytes in place as `urlModelFiles` does, without the server holding it.
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';

const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-headers': 'range',
  'access-control-expose-headers': 'content-length, content-range, accept-ranges',
};

/** Serves `root` at the returned URL (with a trailing slash) until `close`. */
export async function serveDir(root: string): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    const file = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname.slice(1));
    if (req.method === 'OPTIONS') {
      res.writeHead(204, CORS).end();
      return;
    }
    if (file === '' || file.includes('/') || file.startsWith('.')) {
      res.writeHead(404, CORS).end();
      return;
    }
    const path = join(root, file);
    stat(path).then(
      (s) => {
        const r = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
        const start = r ? Number(r[1]) : 0;
        const end = r && r[2] !== '' ? Math.min(Number(r[2]), s.size - 1) : s.size - 1;
        const headers = { ...CORS, 'accept-ranges': 'bytes', 'content-length': String(end - start + 1) };
        if (r) {
          res.writeHead(206, { ...headers, 'content-range': `bytes ${start}-${end}/${s.size}` });
        } else res.writeHead(200, headers);
        if (req.method === 'HEAD') res.end();
        else createReadStream(path, { start, end }).pipe(res);
      },
      () => res.writeHead(404, CORS).end(),
    );
  });
  // Idle connections stay open a minute (Node's default is 5 s): a client in the same process
  // reuses one after a pause of its own, and on a loaded CPU the server's 5-second timer fired
  // first, so the next request met a closed socket (ECONNRESET). close() ends idle ones at once.
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return {
    url: `http://127.0.0.1:${address.port}/`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
