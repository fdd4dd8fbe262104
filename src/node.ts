/**
 * Node-only helpers of weft (`weft/node`): local model folders and files, and the choice of the
 * Vulkan driver Dawn uses (call `useVulkanDriver` before the first engine or GPU context). Kept out
 * of the main entry so browser bundles never import `node:fs`.
 *
 * @packageDocumentation
 */
// The public types name WebGPU's (GPUBuffer, GPUDevice): an app's type-check finds them here.
/// <reference types="@webgpu/types" preserve="true" />

export { pathBytes, pathModel } from './formats/io/node-file.js';
export {
  autoVulkanDriver,
  useVulkanDriver,
  VULKAN_DRIVERS,
  VULKAN_ICDS,
  type VulkanChoice,
  type VulkanDriver,
} from './host/vulkan.js';
export { resolveNodeModel } from './store/node-source.js';
