import { InvalidInputError } from '../errors.js';
import { type ByteSource, blobSource } from '../formats/source.js';

/** The hub weft resolves model ids against unless told otherwise. */
export const DEFAULT_HUB_URL = 'https://huggingface.co';

/**
 * Where a model's files come from. `hub`: a Hugging Face model id at a revision, fetched from
 * `<baseUrl>/<id>/resolve/<revision>/<file>`. `url`: any folder URL, fetched from `<baseUrl>/<file>`.
 * Both are remote and go through the download manager and the IndexedDB cache. `local`: files the
 * user already has (a picked or dropped folder, `File`s, a Node path); they are read in place and
 * never copied into the cache.
 */
export type ModelSource = HubSource | UrlSource | LocalSource;

/** A Hugging Face model id (`org/name`) at a revision (branch, tag or commit). */
export interface HubSource {
  readonly kind: 'hub';
  readonly id: string;
  readonly revision: string;
  readonly baseUrl: string;
}

/** A plain folder URL; file names are appended to it. */
export interface UrlSource {
  readonly kind: 'url';
  readonly baseUrl: string;
}

/** Files on the user's machine, by name (a path relative to the model folder, `/`-separated). */
export interface LocalSource {
  readonly kind: 'local';
  /** A label for messages, e.g. the folder name. */
  readonly name: string;
  readonly files: readonly string[];
  /** Opens one file for random access; throws {@link InvalidInputError} for a name not in `files`. */
  open(file: string): Promise<ByteSource>;
}

/** A remote source: one the download manager can fetch and the store can cache. */
export type RemoteSource = HubSource | UrlSource;

/**
 * What the store files a cached model under: the remote source without its mirror (the same id at
 * the same revision is the same model whichever base URL served it) plus the revision. Plain URLs
 * use the whole folder URL and an empty revision.
 */
export interface ModelKey {
  readonly source: string;
  readonly revision: string;
}

const HUB_ID = /^[\w.-]+\/[\w.-]+$/;

/**
 * A hub model as people write it: `org/name`, then optionally `/file.gguf` (one GGUF file of a
 * repository that holds several quantizations) and `@revision` (branch, tag or commit).
 */
export interface HubRef {
  readonly id: string;
  readonly file?: string;
  readonly revision?: string;
}

const HUB_REF = /^([\w.-]+\/[\w.-]+)(?:\/([\w.-]+\.gguf))?(?:@([\w.\-/]+))?$/i;

/** Parses `org/name[/file.gguf][@revision]`; undefined when `text` is not written that way. */
export function parseHubRef(text: string): HubRef | undefined {
  const m = HUB_REF.exec(text);
  if (!m?.[1] || m[1].includes('..')) return undefined;
  return { id: m[1], ...(m[2] ? { file: m[2] } : {}), ...(m[3] ? { revision: m[3] } : {}) };
}

/**
 * A {@link HubSource} for `id` (`org/name`). `revision` defaults to `main`, `baseUrl` to
 * {@link DEFAULT_HUB_URL} (tests and mirrors pass their own). Throws {@link InvalidInputError} for an
 * id that is not two path-safe names separated by one `/`.
 */
export function hubModel(id: string, options: { revision?: string; baseUrl?: string } = {}): HubSource {
  if (!HUB_ID.test(id) || id.includes('..')) {
    throw new InvalidInputError(`hub model id must look like "org/name", got ${JSON.stringify(id)}`);
  }
  const revision = options.revision ?? 'main';
  if (revision === '' || revision.includes('..')) {
    throw new InvalidInputError(`revision must be a branch, tag or commit, got ${JSON.stringify(revision)}`);
  }
  return { kind: 'hub', id, revision, baseUrl: trimSlash(options.baseUrl ?? DEFAULT_HUB_URL) };
}

/** A {@link UrlSource} for a folder URL (absolute, http or https). */
export function urlModel(baseUrl: string): UrlSource {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch (cause) {
    throw new InvalidInputError(`model URL must be absolute, got ${JSON.stringify(baseUrl)}`, { cause });
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidInputError(`model URL must be http or https, got ${JSON.stringify(baseUrl)}`);
  }
  return { kind: 'url', baseUrl: trimSlash(baseUrl) };
}

/** The URL of `file` in a remote source; path segments are percent-encoded, `/` kept. */
export function fileUrl(source: RemoteSource, file: string): string {
  checkFileName(file);
  const path = file.split('/').map(encodeURIComponent).join('/');
  return source.kind === 'hub'
    ? `${source.baseUrl}/${source.id}/resolve/${encodeURIComponent(source.revision)}/${path}`
    : `${source.baseUrl}/${path}`;
}

/** The store key of a remote source (see {@link ModelKey}). */
export function modelKey(source: RemoteSource): ModelKey {
  return source.kind === 'hub'
    ? { source: source.id, revision: source.revision }
    : { source: source.baseUrl, revision: '' };
}

/** A {@link ModelKey} as one string, `source@revision`: how the store spells it in IndexedDB keys. */
export function keyString(key: ModelKey): string {
  return `${key.source}@${key.revision}`;
}

/**
 * A {@link LocalSource} over `File`s the user picked or dropped (`<input type=file webkitdirectory>`
 * or a drop). Each file is known by its path inside the picked folder (`webkitRelativePath` without
 * its first segment), or by its name when it has no relative path.
 */
export function localFilesModel(files: Iterable<File>, name = 'local files'): LocalSource {
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

/** A {@link LocalSource} over a folder from `showDirectoryPicker()` or a drop, walked recursively. */
export async function directoryModel(dir: DirectoryLike): Promise<LocalSource> {
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

/** A {@link LocalSource} over blobs by name (used by the two above, and by tests). */
export function blobsModel(byName: ReadonlyMap<string, Blob>, name: string): LocalSource {
  return {
    kind: 'local',
    name,
    files: [...byName.keys()].sort(),
    open(file) {
      const blob = byName.get(file);
      if (!blob) return Promise.reject(new InvalidInputError(`${name}: no file ${JSON.stringify(file)}`));
      return Promise.resolve(blobSource(blob, file));
    },
  };
}

/** Throws unless `file` is a relative path without empty, `.` or `..` segments. */
export function checkFileName(file: string): void {
  const parts = file.split('/');
  if (file === '' || parts.some((p) => p === '' || p === '.' || p === '..')) {
    throw new InvalidInputError(
      `file name must be a relative path inside the model, got ${JSON.stringify(file)}`,
    );
  }
}

function trimSlash(url: string): string {
  return url.replace(/\/+$/, '');
}
