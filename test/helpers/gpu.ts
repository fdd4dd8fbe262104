// Shared GPU context for tests, and runOnce, the one way kernel tests run a kernel: upload the
// inputs, encode one compute pass, read back, destroy. GPU tests never skip: without an adapter
// they fail, so a green run proves the kernels ran. The adapter is printed once per file so CI
// logs name it.
import { createBuffer, uploadBuffer } from '../../src/gpu/buffers.js';
import {
  createGpuContext,
  describeAdapter,
  type GpuContext,
  type GpuContextOptions,
} from '../../src/gpu/index.js';
import { BindGroupCache } from '../../src/kernels/bind.js';

const contexts = new Map<string, Promise<GpuContext>>();

/** A GPU context for this test file (one per distinct option set), created on first use. */
export function gpu(options: GpuContextOptions = {}): Promise<GpuContext> {
  const key = JSON.stringify(options);
  let ctx = contexts.get(key);
  if (!ctx) {
    ctx = createGpuContext(options).then((c) => {
      const f = Object.entries(c.features)
        .filter(([, on]) => on)
        .map(([k]) => k);
      console.log(`[gpu] adapter: ${describeAdapter(c.adapter)}; features: ${f.join(', ') || 'none'}`);
      return c;
    });
    contexts.set(key, ctx);
  }
  return ctx;
}

/** What {@link runOnce} hands its setup: buffers and kernels made here are destroyed together. */
export interface KernelRun {
  /** A bind-group cache for the kernels of this run. */
  readonly binds: BindGroupCache;
  /** A new storage buffer holding `data`. */
  upload(data: ArrayBufferView): GPUBuffer;
  /** A new zero-filled storage buffer of `bytes`. */
  empty(bytes: number): GPUBuffer;
  /** Destroys `owned` (a kernel instance, a `GpuMatrix`) when the run ends. */
  own<T extends { destroy(): void }>(owned: T): T;
}

/** What a {@link runOnce} setup returns: the commands of the pass, and what to read afterwards. */
export interface KernelSteps<R> {
  encode(pass: GPUComputePassEncoder): void;
  read(): Promise<R>;
}

/**
 * Runs kernels once, as kernel tests do: `setup` uploads the inputs and builds the kernels through
 * `run`; its `encode` is recorded into one compute pass and submitted, then its `read` is awaited.
 * Every buffer and kernel made through `run` is destroyed afterwards, also when a step throws.
 */
export async function runOnce<R>(
  ctx: GpuContext,
  label: string,
  setup: (run: KernelRun) => KernelSteps<R>,
): Promise<R> {
  const owned: { destroy(): void }[] = [];
  const own = <T extends { destroy(): void }>(o: T): T => {
    owned.push(o);
    return o;
  };
  const run: KernelRun = {
    binds: new BindGroupCache(ctx.device),
    upload: (data) => own(uploadBuffer(ctx, data, `${label}-in`)),
    empty: (bytes) => own(createBuffer(ctx, bytes, `${label}-out`)),
    own,
  };
  try {
    const steps = setup(run);
    const enc = ctx.device.createCommandEncoder({ label });
    const pass = enc.beginComputePass({ label });
    steps.encode(pass);
    pass.end();
    ctx.device.queue.submit([enc.finish()]);
    return await steps.read();
  } finally {
    for (const o of owned) o.destroy();
  }
}
