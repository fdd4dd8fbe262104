// A local stand-in for the Hugging Face hub: serves `/<org>/<name>/resolve/<rev>/<file>` from a fixture
// folder (`<root>/<org>/<name>/<file>`, any revision) over HTTP on 127.0.0.1, with what weft's
// download manager relies on (HEAD, Range → 206 + Content-Range, Content-Length, ETag, the hub's LFS
// headers X-Linked-Etag / X-Linked-Size for large files, CORS with those headers exposed) and faults
// a test can switch on: cut the connection mid-body N times, delay responses, answer 404, or answer
// a missing file with an HTML page as a single-page app's server does.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';

/**
 * One request the server saw, logged when it arrives (before any delay); `status` is 0 until the
 * answer starts, `dropped` when a fault cut its body short.
 */
export interface HubRequest {
  readonly method: string;
  readonly file: string;
  readonly range: string | null;
  status: number;
  dropped: boolean;
}

/** Faults the next requests meet; tests set and reset them between steps. */
export interface HubFaults {
  /** Per file: how many more GETs get their connection destroyed after `dropAfterBytes` body bytes. */
  drops: Map<string, number>;
  dropAfterBytes: number;
  /** Milliseconds to wait before answering any request. */
  delayMs: number;
  /** Files answered with 404. */
  notFound: Set<string>;
  /** Answer a missing file with 200 and an HTML page, as Vite's servers and SPA hosts do. */
  spa: boolean;
}

/** A running hub server. */
export interface HubServer {
  /** Base URL without a trailing slash, e.g. `http://127.0.0.1:40123`. */
  readonly url: string;
  readonly log: HubRequest[];
  readonly faults: HubFaults;
  close(): Promise<void>;
}

const CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'GET, HEAD, OPTIONS',
  'access-control-allow-headers': 'Range',
  'access-control-expose-headers':
    'ETag, Content-Range, Content-Length, Accept-Ranges, X-Linked-Etag, X-Linked-Size',
  // Nothing may come from the browser's HTTP cache: offline tests must really be offline.
  'cache-control': 'no-store',
};

/**
 * Starts the server on a free port. Files of at least `lfsThreshold` bytes are treated as LFS files:
 * their ETag and X-Linked-Etag are the SHA-256 of the content, as on the hub; smaller ones get a
 * 40-hex (git-blob-like, SHA-1) ETag and no whole-file hash.
 */
export async function startHubServer(
  root: string,
  options: { lfsThreshold?: number } = {},
): Promise<HubServer> {
  const lfsThreshold = options.lfsThreshold ?? 100_000;
  const log: HubRequest[] = [];
  const faults: HubFaults = {
    drops: new Map(),
    dropAfterBytes: 10_000,
    delayMs: 0,
    notFound: new Set(),
    spa: false,
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const method = req.method ?? 'GET';
    if (method === 'OPTIONS') {
      res.writeHead(204, CORS).end();
      return;
    }
    const m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(
      new URL(req.url ?? '/', 'http://x').pathname,
    );
    const file = m ? decodeURIComponent(m[4]!) : '';
    const range = req.headers.range ?? null;
    const entry: HubRequest = { method, file, range, status: 0, dropped: false };
    log.push(entry);
    if (faults.delayMs > 0) await new Promise((r) => setTimeout(r, faults.delayMs));
    let bytes: Buffer | undefined;
    if (m && !faults.notFound.has(file) && !file.split('/').includes('..')) {
      bytes = await readFile(join(root, decodeURIComponent(m[1]!), decodeURIComponent(m[2]!), file)).catch(
        () => undefined,
      );
    }
    if (!bytes && faults.spa) {
      entry.status = 200;
      const page = '<!doctype html><html><head><title>app</title></head><body></body></html>';
      res.writeHead(200, { ...CORS, 'content-type': 'text/html', 'content-length': String(page.length) });
      res.end(method === 'HEAD' ? undefined : page);
      return;
    }
    if (!bytes) {
      entry.status = 404;
      res.writeHead(404, { ...CORS, 'content-type': 'text/plain' }).end('Entry not found');
      return;
    }
    const lfs = bytes.byteLength >= lfsThreshold;
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    const etag = lfs ? sha256 : createHash('sha1').update(bytes).digest('hex');
    const headers: Record<string, string> = { ...CORS, etag: `"${etag}"`, 'accept-ranges': 'bytes' };
    if (lfs) {
      headers['x-linked-etag'] = `"${sha256}"`;
      headers['x-linked-size'] = String(bytes.byteLength);
    }
    let status = 200;
    let body = bytes;
    const r = range ? /^bytes=(\d+)-(\d*)$/.exec(range) : null;
    if (range) {
      const start = r ? Number(r[1]) : Number.NaN;
      const end = r && r[2] !== '' ? Math.min(Number(r[2]), bytes.byteLength - 1) : bytes.byteLength - 1;
      if (!r || start > end) {
        entry.status = 416;
        res.writeHead(416, { ...headers, 'content-range': `bytes */${bytes.byteLength}` }).end();
        return;
      }
      status = 206;
      body = bytes.subarray(start, end + 1);
      headers['content-range'] = `bytes ${start}-${end}/${bytes.byteLength}`;
    }
    headers['content-length'] = String(body.byteLength);
    const left = faults.drops.get(file) ?? 0;
    const drop = method === 'GET' && left > 0 && body.byteLength > faults.dropAfterBytes;
    entry.status = status;
    entry.dropped = drop;
    res.writeHead(status, headers);
    if (method === 'HEAD') {
      res.end();
    } else if (drop) {
      // Send part of the body, then kill the socket: the client sees a truncated response.
      faults.drops.set(file, left - 1);
      res.write(body.subarray(0, faults.dropAfterBytes), () => res.socket?.destroy());
    } else {
      res.end(body);
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      res.destroy(e instanceof Error ? e : new Error(String(e)));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('hub server has no TCP address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    log,
    faults,
    close: () =>
      new Promise((resolve, reject) => {
        server.closeAllConnections();
        server.close((e) => (e ? reject(e) : resolve()));
      }),
  };
}
