import { InvalidInputError } from '../errors.js';
import { ggufName, localFilesModel, type ModelFiles } from '../formats/io/files.js';

/** The hub weft resolves model ids against unless told otherwise. */
export const DEFAULT_HUB_URL = 'https://huggingface.co';

/**
 * Where a model's files are, resolved from whatever the user named ({@link resolveModel}). `hub`: a
 * Hugging Face model id at a revision, fetched from `<baseUrl>/<id>/resolve/<revision>/<file>`.
 * `url`: any folder URL, fetched from `<baseUrl>/<file>`. Both are remote: read in place with Range
 * requests, or downloaded into the IndexedDB cache and read from there; `file` picks one `.gguf` of
 * the folder (GGUF repositories hold several quantizations), and only that file is fetched.
 * `local`: files the user already has (picked `File`s, a directory handle, a Node path), read in
 * place and never copied into the cache.
 */
export type ModelSource = HubSource | UrlSource | LocalSource;

/** A Hugging Face model id (`org/name`) at a revision (branch, tag or commit). */
export interface HubSource {
  readonly kind: 'hub';
  readonly id: string;
  readonly revision: string;
  readonly baseUrl: string;
  /** One `.gguf` file of the repository: the model is that file. */
  readonly file?: string;
}

/** A plain folder URL (absolute); file names are appended to it. */
export interface UrlSource {
  readonly kind: 'url';
  readonly baseUrl: string;
  /** One `.gguf` file of the folder: the model is that file. */
  readonly file?: string;
}

/** Files on the user's machine, read in place. */
export interface LocalSource {
  readonly kind: 'local';
  readonly files: ModelFiles;
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
  return { id: m[1], file: m[2], revision: m[3] };
}

/**
 * A model named as plain data, which crosses `postMessage` to weft's engine worker:
 * - a string: a URL prefix of a Hugging Face-layout folder or the URL of a `.gguf` file (absolute,
 *   or starting with `/`, `./` or `../`, relative to the page), or a hub id
 *   `org/name[/file.gguf][@revision]` (see {@link parseHubRef});
 * - `hub`: the same hub id as fields; `baseUrl` defaults to the loader's `hubBase`, else
 *   {@link DEFAULT_HUB_URL};
 * - `files`: `File`s the user picked (a folder or loose files), read in place, never copied.
 */
export type ModelChoice =
  | string
  | (HubRef & { readonly kind: 'hub'; readonly baseUrl?: string })
  | { readonly kind: 'files'; readonly name?: string; readonly files: readonly File[] };

/**
 * Everything a model can be named by: a {@link ModelChoice}, a resolved {@link ModelSource}, or
 * {@link ModelFiles} made by hand (in memory, a Node path through `pathModel`).
 */
export type ModelRef = ModelChoice | ModelSource | ModelFiles;

/** Options of {@link resolveModel}. */
export interface ResolveOptions {
  /** Base URL of the hub for ids that do not name one (default {@link DEFAULT_HUB_URL}). */
  readonly hubBase?: string;
}

/**
 * The one place a model's name becomes a {@link ModelSource}. Relative URLs resolve against the
 * page (or worker) location. Throws {@link InvalidInputError} for a string that is neither a URL nor
 * a hub id, and for a hub `file` that is not a `.gguf`. In Node, `resolveNodeModel`
 * (`store/node-source.ts`) also takes filesystem paths.
 */
export function resolveModel(model: ModelRef, options: ResolveOptions = {}): ModelSource {
  if (typeof model === 'string') return resolveString(model, options);
  if (!('kind' in model)) return { kind: 'local', files: model };
  switch (model.kind) {
    case 'hub': {
      if (model.file !== undefined && ggufName(model.file) !== model.file)
        throw new InvalidInputError(
          `hub model file must be a .gguf file of the repository, got ${JSON.stringify(model.file)}`,
        );
      const hub = hubModel(model.id, {
        revision: model.revision,
        baseUrl: model.baseUrl ?? options.hubBase ?? DEFAULT_HUB_URL,
      });
      return model.file === undefined ? hub : { ...hub, file: model.file };
    }
    case 'files':
      return { kind: 'local', files: localFilesModel(model.files, model.name) };
    case 'url':
    case 'local':
      return model;
  }
}

function resolveString(text: string, options: ResolveOptions): ModelSource {
  if (/^(https?:|\/|\.\.?\/)/.test(text)) {
    const page = globalThis.location?.href;
    if (!/^https?:/.test(text) && page === undefined)
      throw new InvalidInputError(
        `model URL "${text}" is relative, and there is no page to resolve it against`,
      );
    const url = new URL(text, page).href;
    const file = ggufName(url);
    if (file === undefined) return urlModel(url);
    return { ...urlModel(url.replace(/[?#].*$/, '').slice(0, -file.length)), file };
  }
  const ref = parseHubRef(text);
  if (ref) return resolveModel({ kind: 'hub', ...ref }, options);
  throw new InvalidInputError(
    `model "${text}" is neither a URL, a path starting with / or ./, nor a Hugging Face id "org/name" (optionally "/file.gguf" and "@revision")`,
  );
}

/**
 * A short name of a source for messages and the engine's model id: `org/name[/file.gguf]@revision`,
 * the URL of a folder or `.gguf` file, or the local files' own name.
 */
export function sourceName(source: ModelSource): string {
  switch (source.kind) {
    case 'hub':
      return `${source.id}${source.file === undefined ? '' : `/${source.file}`}@${source.revision}`;
    case 'url':
      return fileUrl(source, source.file);
    case 'local':
      return source.files.name;
  }
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

/**
 * The URL of `file` in a remote source, or of the source's folder (ending in `/`) without one: the
 * one place hub URLs are built. Path segments are percent-encoded, `/` kept.
 */
export function fileUrl(source: RemoteSource, file?: string): string {
  const folder =
    source.kind === 'hub'
      ? `${source.baseUrl}/${source.id}/resolve/${encodeURIComponent(source.revision)}/`
      : `${source.baseUrl}/`;
  if (file === undefined) return folder;
  checkFileName(file);
  return folder + file.split('/').map(encodeURIComponent).join('/');
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

/** Throws unless `file` is a relative path without empty, `.` or `..` segments. */
function checkFileName(file: string): void {
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
