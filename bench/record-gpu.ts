// A GpuContext over a recording device: no GPU, no driver. Every WebGPU call weft makes is taken
// (buffers are sized but hold nothing, shaders are never compiled) and every compute dispatch is
// recorded with its pipeline, grid and bound buffers, so bench/occupancy.ts can list the real
// dispatches of a real-size model's decode step without loading it.
import { GpuCounter } from '../src/gpu/counters.js';
import type { AdapterSummary, GpuContext, GpuFeatures, KernelForms } from '../src/gpu/device.js';
import { PipelineCache } from '../src/gpu/pipelines.js';

/** A buffer as the recording device holds it: its label, size and the last bytes written to it. */
export interface RecordedBuffer {
  readonly label: string;
  readonly size: number;
  /** The bytes of the last queue write (a uniform's values), if any. */
  written: Uint8Array | undefined;
}

/** One compute dispatch: the pipeline's label (`kernel:variant`), its grid and its bindings. */
export interface RecordedDispatch {
  readonly pipeline: string;
  readonly workgroups: readonly [number, number, number];
  readonly buffers: readonly RecordedBuffer[];
}

/** A recording context and what it saw. */
export interface RecordingGpu {
  readonly ctx: GpuContext;
  readonly dispatches: RecordedDispatch[];
}

// WebGPU's constants, which weft reads as globals (a browser's; Dawn's in Node), where no host set them.
const CONSTANTS: Record<string, Record<string, number>> = {
  GPUBufferUsage: {
    MAP_READ: 0x1,
    MAP_WRITE: 0x2,
    COPY_SRC: 0x4,
    COPY_DST: 0x8,
    INDEX: 0x10,
    VERTEX: 0x20,
    UNIFORM: 0x40,
    STORAGE: 0x80,
    INDIRECT: 0x100,
    QUERY_RESOLVE: 0x200,
  },
  GPUMapMode: { READ: 0x1, WRITE: 0x2 },
};
for (const [name, values] of Object.entries(CONSTANTS))
  if (!(name in globalThis)) Object.defineProperty(globalThis, name, { value: values, configurable: true });

/** Limits of a large discrete GPU, as Chrome exposes them (so no matrix is split into parts it would not be). */
const LIMITS = {
  maxStorageBufferBindingSize: 2 ** 31 - 4,
  maxBufferSize: 2 ** 31 - 4,
  maxStorageBuffersPerShaderStage: 10,
  maxComputeWorkgroupStorageSize: 32768,
  maxComputeInvocationsPerWorkgroup: 1024,
  maxComputeWorkgroupSizeX: 1024,
  maxComputeWorkgroupsPerDimension: 65535,
  maxUniformBufferBindingSize: 65536,
  minUniformBufferOffsetAlignment: 256,
  minStorageBufferOffsetAlignment: 256,
};

/**
 * A context whose device records instead of computing: `kernels` picks the forms (default the GPU
 * forms), `features` what the pretend adapter has (default shader-f16 and subgroups, as a discrete
 * GPU in Chrome).
 */
export function recordingGpu(
  kernels: KernelForms = 'gpu',
  features: GpuFeatures = { subgroups: true, f16: true, timestamps: false },
): RecordingGpu {
  const dispatches: RecordedDispatch[] = [];
  const label = (d?: { label?: string }) => d?.label ?? '';
  const buffer = (d: GPUBufferDescriptor): GPUBuffer => {
    const b: RecordedBuffer & Record<string, unknown> = {
      label: label(d),
      size: d.size,
      usage: d.usage,
      written: undefined,
      mapState: 'unmapped',
      destroy() {},
      unmap() {},
      mapAsync: async () => {},
      getMappedRange: (_o?: number, size?: number) => new ArrayBuffer(size ?? d.size),
    };
    return b as unknown as GPUBuffer;
  };
  type Group = { buffers: RecordedBuffer[] };
  const pass = (): GPUComputePassEncoder => {
    let pipeline = '';
    let group: Group = { buffers: [] };
    const p = {
      setPipeline(pl: GPUComputePipeline) {
        pipeline = pl.label;
      },
      setBindGroup(_i: number, g: GPUBindGroup) {
        group = g as unknown as Group;
      },
      dispatchWorkgroups(x: number, y = 1, z = 1) {
        dispatches.push({ pipeline, workgroups: [x, y, z], buffers: group.buffers });
      },
      end() {},
      writeTimestamp() {},
    };
    return p as unknown as GPUComputePassEncoder;
  };
  const encoder = (): GPUCommandEncoder =>
    ({
      beginComputePass: pass,
      copyBufferToBuffer() {},
      clearBuffer() {},
      resolveQuerySet() {},
      finish: () => ({}),
    }) as unknown as GPUCommandEncoder;
  const queue = {
    writeBuffer(b: GPUBuffer, offset: number, data: BufferSource, dataOffset = 0, size?: number) {
      const view = ArrayBuffer.isView(data)
        ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
        : new Uint8Array(data);
      const elt =
        ArrayBuffer.isView(data) && 'BYTES_PER_ELEMENT' in data ? Number(data.BYTES_PER_ELEMENT) : 1;
      const from = dataOffset * elt;
      const bytes = view.slice(from, size === undefined ? undefined : from + size * elt);
      if (offset === 0) (b as unknown as RecordedBuffer).written = bytes;
    },
    submit() {},
    onSubmittedWorkDone: async () => {},
  };
  const device = {
    label: 'recording',
    queue,
    limits: LIMITS,
    features: new Set<string>(),
    lost: new Promise<never>(() => {}),
    createBuffer: buffer,
    createShaderModule: (d: GPUShaderModuleDescriptor) => ({
      label: label(d),
      getCompilationInfo: async () => ({ messages: [] }),
    }),
    createComputePipeline: (d: GPUComputePipelineDescriptor) => ({
      label: label(d),
      getBindGroupLayout: () => ({}),
    }),
    createBindGroup: (d: GPUBindGroupDescriptor) => ({
      label: label(d),
      buffers: [...d.entries].map(
        (e) => (e.resource as GPUBufferBinding).buffer as unknown as RecordedBuffer,
      ),
    }),
    createCommandEncoder: encoder,
    createQuerySet: () => ({ destroy() {} }),
    pushErrorScope() {},
    popErrorScope: async () => null,
    destroy() {},
  } as unknown as GPUDevice;
  const adapter: AdapterSummary = {
    vendor: 'recording',
    architecture: '',
    device: '',
    description: 'no GPU: dispatches recorded for bench/occupancy.ts',
    software: false,
  };
  const ctx: GpuContext = {
    device,
    adapter,
    features,
    limits: LIMITS as unknown as GPUSupportedLimits,
    kernels,
    pipelines: new PipelineCache(device),
    counter: new GpuCounter(device.queue),
    lost: new Promise(() => {}),
    lostError: undefined,
    assertAlive() {},
    destroy() {},
  };
  return { ctx, dispatches };
}
