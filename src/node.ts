/**
 * Node-only helpers of weft (`weft/node`): local model folders and files. Kept out of the main
 * entry so browser bundles never import `node:fs`.
 *
 * @packageDocumentation
 */
export { fileSource } from './formats/node-file.js';
export { dirModelFiles } from './model/node-files.js';
export { pathModel } from './store/node-source.js';
