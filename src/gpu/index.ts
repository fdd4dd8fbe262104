export {
  alignUp,
  createBuffer,
  mapForRead,
  readBuffer,
  readF32,
  readU32,
  STORAGE,
  UNIFORM,
  uploadBuffer,
  writeBuffer,
} from './buffers.js';
export type { GpuCounts } from './counters.js';
export { addCounts, countsSince, GpuCounter, zeroCounts } from './counters.js';
export type { AdapterSummary, GpuContext, GpuContextOptions, GpuFeatures, KernelForms } from './device.js';
export { adapterKind, createGpuContext, describeAdapter } from './device.js';
export { requestAdapter } from './host.js';
export type { PipelineCode } from './pipelines.js';
export { PipelineCache } from './pipelines.js';
export { withErrorScope } from './scope.js';
export { GpuTimer } from './timing.js';
export type { LayoutKeys, UniformLayout, UniformType } from './uniforms.js';
export { defineUniforms } from './uniforms.js';
export type { WgslVariant, WgslVars } from './wgsl.js';
export { renderWgsl, wgslVariant } from './wgsl.js';
