/**
 * weft: a WebGPU LLM inference runtime for the browser and Node.
 *
 * @packageDocumentation
 */
export * from './errors.js';
export * from './gpu/index.js';
export { saxpy, saxpyRef, selftestInputs } from './kernels/selftest/selftest.js';
