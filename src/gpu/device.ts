import { DeviceLostError, GpuUnavailableError } from '../errors.js';
import { GpuCounter } from './counters.js';
import { requestAdapter } from './host.js';
import { PipelineCache } from './pipelines.js';

/** Optional device features weft uses when the adapter has them. */
export interface GpuFeatures {
  /** WGSL `enable subgroups;` and subgroup built-ins. */
  readonly subgroups: boolean;
  /** WGSL `enable f16;` (native half precision arithmetic and storage). */
  readonly f16: boolean;
  /** Timestamp queries for GPU-side timing. */
  readonly timestamps: boolean;
}

/** Options of {@link createGpuContext}. */
export interface GpuContextOptions {
  powerPreference?: GPUPowerPreference;
  /** Features to leave off even when present, to test fallback paths (e.g. `['subgroups']`). */
  disable?: ReadonlyArray<keyof GpuFeatures>;
  /**
   * Which forms the heavy kernels take (see {@link GpuContext.kernels}); default: `serial` on a
   * software adapter, `gpu` elsewhere. Tests and the `--kernels` flags set it to run either form.
   */
  kernels?: KernelForms;
}

/**
 * The two forms of weft's heavy kernels (matmul, split attention, W8A8): `gpu`, the forms a GPU
 * wants (K split over many lanes and workgroups, launched wide to keep enough bytes in flight),
 * and `serial`, where each thread computes its outputs alone with no workgroup memory and no
 * barrier (software adapters; see {@link GpuContext.kernels}).
 */
export type KernelForms = 'gpu' | 'serial';

/** A short description of the adapter, for logs, stats and the demo page. */
export interface AdapterSummary {
  readonly vendor: string;
  readonly architecture: string;
  readonly device: string;
  readonly description: string;
  /** True when the adapter is a CPU implementation (SwiftShader, WARP, lavapipe). */
  readonly software: boolean;
}

/**
 * One WebGPU device with what weft needs beside it: the features actually enabled, the limits,
 * a pipeline cache, the counter of the work asked of it, and a promise that rejects with {@link DeviceLostError} when the device is lost.
 */
export interface GpuContext {
  readonly device: GPUDevice;
  readonly adapter: AdapterSummary;
  readonly features: GpuFeatures;
  readonly limits: GPUSupportedLimits;
  /**
   * The forms the heavy kernels take. `serial`: each thread computes its outputs alone, with no
   * workgroup memory and no barrier (the matmuls walk all of K per thread, attention scores a chunk
   * per query head in one thread); chosen on software adapters, which charge heavily for what a
   * GPU gets cheaply (SwiftShader: ~100 us per workgroup that uses workgroup memory, ~4 us per
   * barrier, against ~1 us for a workgroup with neither). `gpu`: K split over lanes and launched
   * wide (see kernels/matmul). The forms sum in different orders; every kernel on one context uses
   * the same form, so rows stay bit-identical whatever the batch size.
   */
  readonly kernels: KernelForms;
  readonly pipelines: PipelineCache;
  /**
   * Every dispatch, queue write, submission and readback weft makes on this device goes through
   * it and is counted (see {@link GpuCounter}).
   */
  readonly counter: GpuCounter;
  /** Resolves with the loss error when the device is lost; never rejects. */
  readonly lost: Promise<DeviceLostError>;
  /** Set once the device is lost: every later GPU call should throw it. */
  readonly lostError: DeviceLostError | undefined;
  /** Throws {@link DeviceLostError} if the device has been lost. */
  assertAlive(): void;
  destroy(): void;
}

/**
 * What an adapter is, from its info: `gpu`, `swiftshader` (Chromium's CPU Vulkan driver), or
 * another CPU implementation of WebGPU (`software`: Mesa's lavapipe / llvmpipe, WARP). The one
 * place weft tells them apart: {@link AdapterSummary.software} (and with it the default kernel
 * forms), the CLI's choice of host (Dawn's Node binding crashes on SwiftShader, not on lavapipe)
 * and the GPU benchmark's refusal of a CPU adapter all read it.
 */
export function adapterKind(
  info: Pick<GPUAdapterInfo, 'vendor' | 'architecture' | 'device' | 'description'>,
): 'gpu' | 'swiftshader' | 'software' {
  const text = `${info.vendor} ${info.architecture} ${info.device} ${info.description}`;
  if (/swiftshader/i.test(text)) return 'swiftshader';
  return /llvmpipe|lavapipe|warp|software/i.test(text) ? 'software' : 'gpu';
}

/**
 * Requests an adapter and a device with the largest storage-binding and buffer limits the adapter
 * allows and the optional features it has (subgroups, shader-f16, timestamp-query).
 */
export async function createGpuContext(options: GpuContextOptions = {}): Promise<GpuContext> {
  const adapter = await requestAdapter({ powerPreference: options.powerPreference ?? 'high-performance' });
  if (!adapter) {
    throw new GpuUnavailableError(
      'requestAdapter() returned null: no WebGPU adapter (in a browser: update the GPU driver, or enable WebGPU; in Node: call useVulkanDriver from weft/node, or pass --vulkan, to pick a Vulkan driver)',
    );
  }
  const off = new Set(options.disable ?? []);
  const want = (f: GPUFeatureName, key: keyof GpuFeatures) => adapter.features.has(f) && !off.has(key);
  const features: GpuFeatures = {
    subgroups: want('subgroups' as GPUFeatureName, 'subgroups'),
    f16: want('shader-f16', 'f16'),
    timestamps: want('timestamp-query', 'timestamps'),
  };
  const requiredFeatures: GPUFeatureName[] = [];
  if (features.subgroups) requiredFeatures.push('subgroups' as GPUFeatureName);
  if (features.f16) requiredFeatures.push('shader-f16');
  if (features.timestamps) requiredFeatures.push('timestamp-query');
  const a = adapter.limits;
  const device = await adapter.requestDevice({
    label: 'weft',
    requiredFeatures,
    requiredLimits: {
      maxStorageBufferBindingSize: a.maxStorageBufferBindingSize,
      maxBufferSize: a.maxBufferSize,
      maxStorageBuffersPerShaderStage: a.maxStorageBuffersPerShaderStage,
      maxComputeWorkgroupStorageSize: a.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: a.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: a.maxComputeWorkgroupSizeX,
      maxComputeWorkgroupsPerDimension: a.maxComputeWorkgroupsPerDimension,
    },
  });
  const info = adapter.info;
  const summary: AdapterSummary = {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    software: adapterKind(info) !== 'gpu',
  };
  let lostError: DeviceLostError | undefined;
  const lost = device.lost.then((l) => {
    lostError = new DeviceLostError(l.reason, l.message || 'no message');
    return lostError;
  });
  const kernels = options.kernels ?? (summary.software ? 'serial' : 'gpu');
  return {
    device,
    adapter: summary,
    features,
    limits: device.limits,
    kernels,
    pipelines: new PipelineCache(device),
    counter: new GpuCounter(device.queue),
    lost,
    get lostError() {
      return lostError;
    },
    assertAlive() {
      if (lostError) throw lostError;
    },
    destroy() {
      device.destroy();
    },
  };
}

/** One line naming the adapter, e.g. `google swiftshader (SwiftShader Device (Subzero)) [software]`. */
export function describeAdapter(a: AdapterSummary): string {
  const name = [a.vendor, a.architecture].filter(Boolean).join(' ') || 'unknown adapter';
  const detail = a.description || a.device;
  return `${name}${detail ? ` (${detail})` : ''}${a.software ? ' [software]' : ''}`;
}

/**
 * The device loss behind `err`, a failure of a step on `ctx`: `err` itself when it is a
 * {@link DeviceLostError}, else the loss of `ctx`'s device when it is lost. A lost device can fail a
 * step (a mapping, a validation) before its `lost` promise settles, so this waits a moment
 * (`graceMs`) for it. Undefined when the failure is not a loss (or there is no context).
 */
export async function lossBehind(
  ctx: Pick<GpuContext, 'lost' | 'lostError'> | undefined,
  err: unknown,
  graceMs = 50,
): Promise<DeviceLostError | undefined> {
  if (err instanceof DeviceLostError) return err;
  if (!ctx) return undefined;
  if (ctx.lostError) return ctx.lostError;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), graceMs);
  });
  try {
    return await Promise.race([ctx.lost, late]);
  } finally {
    clearTimeout(timer);
  }
}
