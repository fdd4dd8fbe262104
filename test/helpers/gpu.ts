// Shared GPU context for tests, and runOnce, the one way kernel tests run a kernel: upload the
// inputs, encode one compute pass, read back, destroy. GPU tests never skip: without an adapter
// they fail, so a green run proves the kernels ran. The adapter is printed once per file so CI
// logs name it.
//
// The vitest project says where its GPU tests run (`provide: { gpuHost }` in vitest.config.ts):
// the Vulkan driver a Node project asks Dawn for, the kernel forms its contexts take by default,
// and what its adapter must be. A context that is not what the project asked for fails every test
// that uses it, so a project can never fall back to another adapter silently.
import { inject } from 'vitest';
import { createBuffer, uploadBuffer } from '../../src/gpu/buffers.js';
import {
  createGpuContext,
  describeAdapter,
  type GpuContext,
  type GpuContextOptions,
  type KernelForms,
} from '../../src/gpu/index.js';
import type { VulkanDriver } from '../../src/host/vulkan.js';
import { BindGroupCache } from '../../src/kernels/bind.js';

/** A vitest project's GPU: where its tests run, and what they must get. */
export interface GpuHost {
  /** Node projects: the Vulkan driver Dawn is pointed at (see useVulkanDriver). */
  readonly vulkan?: VulkanDriver;
  /** The kernel forms of every context that does not name its own (default: the adapter's). */
  readonly kernels?: KernelForms;
  /** A regular expression the adapter's description must match. */
  readonly adapter?: string;
  /** Features the adapter must have. */
  readonly features?: readonly ('f16' | 'subgroups' | 'timestamps')[];
  /** The JavaScript runtime the tests must run in: `deno` (its `navigator.gpu` is wgpu). */
  readonly runtime?: 'deno';
}

declare module 'vitest' {
  export interface ProvidedContext {
    gpuHost: GpuHost;
  }
}

/** This project's {@link GpuHost} (empty where the project provides none). */
export function gpuHost(): GpuHost {
  return inject('gpuHost') ?? {};
}

/**
 * The kernel forms a kernel test runs in this project: both on a project that leaves the forms to
 * the adapter (Chromium on SwiftShader covers the serial forms and runs the GPU forms too), only the
 * pinned one on a project that pins its forms (lavapipe runs the GPU forms: SwiftShader already
 * covers the serial ones, and each compile costs lavapipe seconds).
 */
export function projectForms<T extends readonly [string, KernelForms]>(layouts: readonly T[]): T[] {
  const pinned = gpuHost().kernels;
  return layouts.filter(([, forms]) => pinned === undefined || forms === pinned);
}

const contexts = new Map<string, Promise<GpuContext>>();

/**
 * A GPU context for this test file (one per distinct option set), created on first use, with the
 * project's kernel forms unless `options` names its own. Rejects when the adapter is not the one
 * the project asked for.
 */
export function gpu(options: GpuContextOptions = {}): Promise<GpuContext> {
  const key = JSON.stringify(options);
  let ctx = contexts.get(key);
  if (!ctx) {
    ctx = create(options);
    contexts.set(key, ctx);
  }
  return ctx;
}

async function create(options: GpuContextOptions): Promise<GpuContext> {
  const host = gpuHost();
  if (host.runtime === 'deno' && !('Deno' in globalThis))
    throw new Error("this project's GPU tests need Deno's WebGPU (wgpu): run them with npm run test:deno");
  if (typeof window === 'undefined') {
    const { useVulkanDriver } = await import('../../src/host/vulkan.js');
    useVulkanDriver(host.vulkan ?? 'auto');
  }
  const c = await createGpuContext({ ...(host.kernels ? { kernels: host.kernels } : {}), ...options });
  const f = Object.entries(c.features)
    .filter(([, on]) => on)
    .map(([k]) => k);
  const name = describeAdapter(c.adapter);
  console.log(`[gpu] adapter: ${name}; features: ${f.join(', ') || 'none'}; kernels: ${c.kernels}`);
  const missing = (host.features ?? []).filter((k) => !c.features[k] && !options.disable?.includes(k));
  if ((host.adapter && !new RegExp(host.adapter, 'i').test(name)) || missing.length > 0)
    throw new Error(
      `this project's GPU tests need ${host.adapter ?? 'any adapter'} with ${host.features?.join(', ') || 'no feature'}, got ${name} with ${f.join(', ') || 'none'}`,
    );
  return c;
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
