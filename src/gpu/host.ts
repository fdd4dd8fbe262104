import { GpuUnavailableError } from '../errors.js';

/** Vulkan ICD of SwiftShader as shipped by Debian's `chromium` package. */
const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
/** Device nodes that exist when the machine has a GPU a Vulkan driver could use. */
const GPU_DEVICE_NODES = ['/dev/dri', '/dev/nvidia0', '/dev/dxg'];

interface DawnModule {
  create(flags: string[]): GPU;
  globals: Record<string, unknown>;
}

let dawn: Promise<DawnModule> | undefined;
/**
 * Dawn instances made so far, kept for the life of the process: when one is garbage-collected while
 * its devices live, or before them at exit, Dawn can crash the process.
 */
const instances: GPU[] = [];

/**
 * Requests a WebGPU adapter from the host: `navigator.gpu` in a page or worker, else Dawn from the
 * npm package `webgpu` in Node. In Node, when `VK_ICD_FILENAMES` is unset and the machine has no GPU
 * (or Dawn finds no usable adapter on the installed drivers), Dawn is pointed at Chromium's
 * SwiftShader, so CPU-only machines still get an adapter.
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
  const fs = await import('node:fs');
  const env = process.env;
  const canUseSwiftShader = !env.VK_ICD_FILENAMES && fs.existsSync(SWIFTSHADER_ICD);
  if (canUseSwiftShader && !GPU_DEVICE_NODES.some((p) => fs.existsSync(p)))
    env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  const mod = await loadDawn();
  const adapter = await instance(mod).requestAdapter(options);
  if (adapter || !canUseSwiftShader || env.VK_ICD_FILENAMES) return adapter;
  // The installed drivers gave nothing usable (Dawn refuses lavapipe, for one): try SwiftShader.
  env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  return instance(mod, true).requestAdapter(options);
}

/** The latest Dawn instance (a new one when `fresh`, after the driver setting changed). */
function instance(mod: DawnModule, fresh = false): GPU {
  let gpu = instances[instances.length - 1];
  if (!gpu || fresh) {
    gpu = mod.create([]);
    instances.push(gpu);
  }
  return gpu;
}

function loadDawn(): Promise<DawnModule> {
  dawn ??= (async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    // Dawn warns when this is unset; a private temp dir silences it.
    process.env.XDG_RUNTIME_DIR ??= fs.mkdtempSync(`${os.tmpdir()}/weft-xdg-`);
    const specifier = 'webgpu';
    let mod: DawnModule;
    try {
      mod = await import(/* @vite-ignore */ specifier);
    } catch (cause) {
      throw new GpuUnavailableError('npm package "webgpu" (Dawn for Node) is not installed', { cause });
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
