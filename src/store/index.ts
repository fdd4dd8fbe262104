/**
 * The weights cache: model sources, the download manager and the IndexedDB store. Import
 * `node-source.ts` separately (Node only).
 */
export * from './download.js';
export * from './errors.js';
export * from './reader.js';
export * from './sha256.js';
export * from './source.js';
export * from './store.js';
