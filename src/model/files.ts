import { ModelFormatError } from '../formats/errors.js';
import type { ByteSource } from '../formats/source.js';
import { bytesSource, urlSource } from '../formats/source.js';

/**
 * The files of a Hugging Face-layout model folder (config.json, tokenizer.json, weights, ...),
 * wherever they are: a URL prefix, a picked folder, the weights cache, or a Node directory.
 */
export interface ModelFiles {
  /** Where the files are, for messages and the model id. */
  readonly name: string;
  exists(file: string): Promise<boolean>;
  /** A file's text; throws {@link ModelFormatError} naming the file when it is missing. */
  text(file: string): Promise<string>;
  /** Random access to a (large) file. */
  open(file: string): Promise<ByteSource>;
  /** Releases what `open` holds (file handles in Node); called once the weights are placed. */
  close?(): Promise<void>;
}

/** Parses a JSON file of the model, with an error naming the file when it isn't JSON. */
export async function readJson(files: ModelFiles, file: string): Promise<unknown> {
  const text = await files.text(file);
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ModelFormatError(
      `${files.name}/${file}`,
      '(json)',
      text.slice(0, 40),
      `is not valid JSON: ${cause}`,
      {
        cause,
      },
    );
  }
}

/** Model files under a URL prefix (`https://host/org/model/resolve/main/`, or a relative path). */
export function urlModelFiles(base: string, fetchFn: typeof fetch = (...a) => fetch(...a)): ModelFiles {
  const prefix = base.endsWith('/') ? base : `${base}/`;
  const url = (file: string) => new URL(file, new URL(prefix, globalThis.location?.href ?? undefined)).href;
  return {
    name: base,
    async exists(file) {
      const res = await fetchFn(url(file), { method: 'HEAD' });
      // Single-page-app servers (Vite's dev server among them) answer any path with index.html.
      const html = (res.headers.get('content-type') ?? '').includes('text/html') && !file.endsWith('.html');
      return res.ok && !html;
    },
    async text(file) {
      const res = await fetchFn(url(file));
      if (!res.ok)
        throw new ModelFormatError(`${base}/${file}`, '(http)', res.status, 'could not be fetched');
      return res.text();
    },
    open: (file) => urlSource(url(file), fetchFn),
  };
}

/** Model files held in memory (tests, files received from a page, small fixtures). */
export function memoryModelFiles(name: string, files: ReadonlyMap<string, Uint8Array>): ModelFiles {
  const get = (file: string) => {
    const bytes = files.get(file);
    if (!bytes) throw new ModelFormatError(`${name}/${file}`, '(file)', file, 'is missing');
    return bytes;
  };
  return {
    name,
    exists: async (file) => files.has(file),
    text: async (file) => new TextDecoder().decode(get(file)),
    open: async (file) => bytesSource(get(file), file),
  };
}
