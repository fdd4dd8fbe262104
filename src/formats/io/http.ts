// Requests for a model's files over HTTP. Every failure becomes a DownloadError that names the URL
// requested, the HTTP status or the network's own words, and what to check: fetch alone says only
// `TypeError: Failed to fetch`, and a server that answers a wrong path with its index.html (Vite's
// dev and preview servers, most single-page-app hosts) says nothing at all. Used by every fetch of
// a model file: the URL sources here, the weights cache's download manager, and the discovery of a
// remote model's files.
import { DownloadError } from '../../errors.js';

/**
 * Sends a request for `url` through `fetchFn`. A request the network could not complete becomes
 * {@link DownloadError} with status 0 (see {@link networkError}); an abort passes through as it is.
 * The response is returned whatever its status: check it with {@link checkResponse}.
 */
export async function request(url: string, fetchFn: typeof fetch, init: RequestInit = {}): Promise<Response> {
  try {
    return await fetchFn(url, init);
  } catch (e) {
    throw networkError(url, e, init.signal ?? undefined);
  }
}

/**
 * Runs `read`, a read of the body of a response from `url` (`res.text()`, a stream reader's
 * `read()`), turning a connection cut short into {@link DownloadError} as {@link request} does.
 */
export async function readBody<T>(url: string, read: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  try {
    return await read();
  } catch (e) {
    throw networkError(url, e, signal);
  }
}

/**
 * What a failure of the network itself (fetch's `TypeError`, a body stream cut short) while
 * requesting `url` becomes: {@link DownloadError} with status 0, its message naming the cause and
 * what to check, `e` as its cause. An abort (of `signal`, or an `AbortError` from fetch) and a
 * DownloadError already are returned as they are.
 */
function networkError(url: string, e: unknown, signal?: AbortSignal): unknown {
  if (signal?.aborted || e instanceof DownloadError || (e instanceof Error && e.name === 'AbortError'))
    return e;
  // Node's fetch says `fetch failed` and keeps the reason (ECONNREFUSED, ENOTFOUND) in its cause.
  const inner = e instanceof Error && e.cause instanceof Error ? ` (${e.cause.message})` : '';
  const cause = e instanceof Error ? `${e.name}: ${e.message}${inner}` : String(e);
  return new DownloadError(
    url,
    0,
    `network error (${cause}): check the URL, that the server is running and reachable from here (a wrong host or port, or offline?), and that it allows this page's origin (CORS)`,
    { cause: e },
  );
}

/**
 * Throws {@link DownloadError} unless `res`, the answer to a request for `url`, can be a model
 * file: an error status (with what to check for the common ones), or an HTML page where the URL
 * does not name one (a server's index.html for a path it does not have).
 */
export function checkResponse(url: string, res: Response): void {
  if (!res.ok) throw statusError(url, res);
  if (isHtmlAnswer(url, res))
    throw new DownloadError(
      url,
      res.status,
      `got an HTML page (content-type ${res.headers.get('content-type')}) where a model file was expected: the path is probably wrong (a dev server answers a missing file with its index.html)`,
    );
}

/** Whether `res` is an HTML page although `url` does not name an `.html` file. */
export function isHtmlAnswer(url: string, res: Response): boolean {
  const type = res.headers.get('content-type') ?? '';
  return /\btext\/html\b/i.test(type) && !/\.html?$/i.test(new URL(url, 'http://x').pathname);
}

/** The {@link DownloadError} of an error status, with what to check for the common ones. */
function statusError(url: string, res: Response): DownloadError {
  const { status } = res;
  const http = `HTTP ${status}${res.statusText ? ` ${res.statusText}` : ''}`;
  const hint =
    status === 404
      ? ': no such file; check the path (or the model id, file and revision)'
      : status === 401 || status === 403
        ? ': access refused; a gated or private model needs an account allowed to read it'
        : status === 429 || status >= 500
          ? ': the server is busy or failing; try again later'
          : '';
  return new DownloadError(url, status, `${http}${hint}`);
}
