/**
 * Node-only helpers of weft (`weft/node`): local model folders and files. Kept out of the main
 * entry so browser bundles never import `node:fs`.
 *
 * @packageDocumentation
 */
export { fileSource, pathModel } from './formats/node-file.js';
export { resolveNodeModel } from './store/node-source.js';
