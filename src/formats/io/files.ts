import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../errors.js';
import type { FileBytes } from './bytes.js';
import { blobBytes, memoryBytes, urlBytes } from './bytes.js';
import { checkResponse, isHtmlAnswer, readBody, request } from './http.js';

/**
 * The files of a model, wherever they are: a URL prefix, a picked folder, the weights cache, or a
 * Node directory (`pathModel` in `formats/node-file.ts`). A model is either a Hugging Face-layout folder (config.json, tokenizer.json,
 * weights: `model.safetensors`, the sharded index, or weft's `model.weft.safetensors`) or one GGUF
 * file, named by `gguf` (see `openModel`).
 */
export interface ModelFiles {
  /** Where the files are, for messages and the model id. */
  readonly name: string;
  /** The model is this one GGUF file among the files (spec, tokenizer and weights from it). */
  readonly gguf?: string;
  exists(file: string): Promise<boolean>;
  /** A file's text; throws {@link ModelFormatError} naming the file when it is missing. */
  text(file: string): Promise<string>;
  /** Random access to a (large) file. */
  open(file: string): Promise<FileBytes>;
  /** Releases what `open` holds (file handles in Node); called once the weights are placed. */
  close?(): Promise<void>;
}

/**
 * How messages name `file` of the model called `name`: the two joined by one `/` (a folder URL
 * already ends in one), so that a URL in a message is the URL requested.
 */
export function modelFilePath(name: string, file: string): string {
  return name.endsWith('/') ? `${name}${file}` : `${name}/${file}`;
}

/** Parses a JSON file of the model, with an error naming the file when it isn't JSON. */
export async function readJson(files: ModelFiles, file: string): Promise<unknown> {
  return parseJson(files, file, await files.text(file));
}

/** Parses `text`, the content of the model's `file`, with an error naming the file when it isn't JSON. */
export function parseJson(files: ModelFiles, file: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ModelFormatError(
      modelFilePath(files.name, file),
      '(json)',
      text.slice(0, 40),
      `is not valid JSON: ${cause}`,
      {
        cause,
      },
    );
  }
}

/** The file name of a `.gguf` location (a path or URL ending in `.gguf`), else undefined. */
export function ggufName(location: string): string | undefined {
  const last =
    location
      .replace(/[?#].*$/, '')
      .split('/')
      .pop() ?? '';
  return /\.gguf$/i.test(last) ? last : undefined;
}

/**
 * Model files under a URL prefix (`https://host/org/model/resolve/main/`, or a relative path), or
 * one GGUF file when `base` ends in `.gguf` (its folder's files, with `gguf` naming it). A request
 * that fails (the network, an error status, or an HTML page where a model file was expected)
 * throws `DownloadError` naming the URL requested; `exists` answers false for an error status or an
 * HTML page (optional files are probed with it), and throws only when the network fails.
 */
export function urlModelFiles(base: string, fetchFn: typeof fetch = (...a) => fetch(...a)): ModelFiles {
  const gguf = ggufName(base);
  const folder = gguf === undefined ? base : base.slice(0, base.lastIndexOf(gguf));
  const prefix = folder.endsWith('/') || folder === '' ? folder : `${folder}/`;
  const url = (file: string) => new URL(file, new URL(prefix, globalThis.location?.href ?? undefined)).href;
  return {
    name: base,
    ...(gguf === undefined ? {} : { gguf }),
    async exists(file) {
      const res = await request(url(file), fetchFn, { method: 'HEAD' });
      // Single-page-app servers (Vite's dev server among them) answer any path with index.html.
      return res.ok && !isHtmlAnswer(url(file), res);
    },
    async text(file) {
      const res = await request(url(file), fetchFn);
      checkResponse(url(file), res);
      return readBody(url(file), () => res.text());
    },
    open: (file) => urlBytes(url(file), fetchFn),
  };
}

/**
 * Model files held in memory (tests, files received from a page, small fixtures); a `name` ending
 * in `.gguf` makes it that one GGUF file (held under the same name in `files`).
 */
export function memoryModelFiles(name: string, files: ReadonlyMap<string, Uint8Array>): ModelFiles {
  const gguf = ggufName(name);
  const get = (file: string) => {
    const bytes = files.get(file);
    if (!bytes) throw new ModelFormatError(modelFilePath(name, file), '(file)', file, 'is missing');
    return bytes;
  };
  return {
    name,
    ...(gguf === undefined ? {} : { gguf }),
    exists: async (file) => files.has(file),
    text: async (file) => new TextDecoder().decode(get(file)),
    open: async (file) => memoryBytes(get(file), file),
  };
}

/**
 * Model files already on this machine (picked or dropped `File`s, a directory handle, a Node path),
 * listed once and read in place, never copied. `files` are paths relative to the model folder,
 * `/`-separated and sorted; `open` rejects with {@link InvalidInputError} for a name not among them.
 */
export interface LocalFiles extends ModelFiles {
  readonly files: readonly string[];
}

/**
 * {@link LocalFiles} over `File`s the user picked or dropped (`<input type=file webkitdirectory>` or
 * a drop). Each file is known by its path inside the picked folder (`webkitRelativePath` without
 * its first segment), or by its name when it has no relative path.
 */
export function localFilesModel(files: Iterable<File>, name = 'local files'): LocalFiles {
  const byName = new Map<string, Blob>();
  for (const file of files) {
    const rel = file.webkitRelativePath;
    byName.set(rel ? rel.split('/').slice(1).join('/') : file.name, file);
  }
  return blobsModel(byName, name);
}

/**
 * The part of `FileSystemDirectoryHandle` that {@link directoryModel} uses. Spelled out because
 * TypeScript's DOM library only declares `values()` in `DOM.AsyncIterable`; a real handle from
 * `showDirectoryPicker()` or `DataTransferItem.getAsFileSystemHandle()` has this shape.
 */
export interface DirectoryLike {
  readonly name: string;
  values(): AsyncIterable<DirectoryEntry>;
}

/** An entry of a {@link DirectoryLike}: a file handle, or a sub-directory. */
export type DirectoryEntry =
  | { readonly kind: 'file'; readonly name: string; getFile(): Promise<File> }
  | ({ readonly kind: 'directory' } & DirectoryLike);

/** {@link LocalFiles} over a folder from `showDirectoryPicker()` or a drop, walked recursively. */
export async function directoryModel(dir: DirectoryLike): Promise<LocalFiles> {
  const byName = new Map<string, Blob>();
  // Depth-first walk; `values()` yields file and directory handles of one folder.
  const walk = async (handle: DirectoryLike, prefix: string): Promise<void> => {
    for await (const entry of handle.values()) {
      if (entry.kind === 'file') byName.set(prefix + entry.name, await entry.getFile());
      else await walk(entry, `${prefix}${entry.name}/`);
    }
  };
  await walk(dir, '');
  return blobsModel(byName, dir.name);
}

/** {@link LocalFiles} over blobs by name (used by the two above, and by tests). */
export function blobsModel(byName: ReadonlyMap<string, Blob>, name: string): LocalFiles {
  const open = (file: string): Promise<FileBytes> => {
    const blob = byName.get(file);
    if (!blob) return Promise.reject(new InvalidInputError(`${name}: no file ${JSON.stringify(file)}`));
    return Promise.resolve(blobBytes(blob, file));
  };
  return {
    name,
    files: [...byName.keys()].sort(),
    exists: async (file) => byName.has(file),
    text: async (file) => {
      const blob = byName.get(file);
      if (!blob) throw new ModelFormatError(modelFilePath(name, file), '(file)', file, 'is missing');
      return blob.text();
    },
    open,
  };
}
