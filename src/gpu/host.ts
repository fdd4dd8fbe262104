import { GpuUnavailableError } from '../errors.js';

interface DawnModule {
  create(flags: string[]): GPU;
  globals: Record<string, unknown>;
}

let dawn: Promise<DawnModule> | undefined;
/**
 * The Dawn instance, kept for the life of the process: when one is garbage-collected while its
 * devices live, or before them at exit, Dawn can crash the process.
 */
let instance: GPU | undefined;

/**
 * Requests a WebGPU adapter from the host: `navigator.gpu` in a page or worker, else Dawn from the
 * npm package `webgpu` in Node, on the Vulkan driver the process chose. Library code never
 * chooses it: a Node entry point calls `useVulkanDriver` (src/host/vulkan.ts, exported by
 * `weft/node`) first, or sets `VK_ICD_FILENAMES` itself; otherwise the Vulkan loader's own search
 * decides. Returns null when the host has no adapter.
 */
export async function requestAdapter(options: GPURequestAdapterOptions = {}): Promise<GPUAdapter | null> {
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (nav?.gpu) return nav.gpu.requestAdapter(options);
  const proc = (globalThis as { process?: { versions?: { node?: string } } }).process;
  if (!proc?.versions?.node) {
    throw new GpuUnavailableError(
      'WebGPU is not available in this browser: use a recent Chrome or Edge (113+), or enable WebGPU in its flags.',
    );
  }
  const mod = await loadDawn();
  instance ??= mod.create([]);
  return instance.requestAdapter(options);
}

function loadDawn(): Promise<DawnModule> {
  dawn ??= (async () => {
    const specifier = 'webgpu';
    let mod: DawnModule;
    try {
      mod = await import(/* @vite-ignore */ specifier);
    } catch (cause) {
      throw new GpuUnavailableError(
        'WebGPU in Node needs the npm package "webgpu" (Dawn), an optional peer dependency of weft: npm install webgpu',
        { cause },
      );
    }
    // Dawn's constants (GPUBufferUsage, ...) are globals in browsers; mirror that in Node.
    for (const [k, v] of Object.entries(mod.globals)) {
      if (!(k in globalThis))
        Object.defineProperty(globalThis, k, { value: v, configurable: true, writable: true });
    }
    return mod;
  })();
  return dawn;
}
