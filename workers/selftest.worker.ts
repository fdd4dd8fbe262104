// Web Worker that proves WebGPU compute runs off the main thread: it exposes, through comlink, the
// adapter's description and features, and the selftest kernel. Transport only: the work lives in src/.
import * as Comlink from 'comlink';
import { createGpuContext, describeAdapter, type GpuContext, type KernelForms } from '../src/gpu/index.js';
import { saxpy, selftestInputs } from '../src/kernels/selftest/selftest.js';

let ctx: Promise<GpuContext> | undefined;
const context = () => {
  ctx ??= createGpuContext();
  return ctx;
};

/**
 * The adapter the worker got: one line naming it, whether it is a CPU implementation, the optional
 * features the device enabled (the engine's device, made the same way, enables the same) and the
 * forms its heavy kernels take.
 */
export interface AdapterReport {
  line: string;
  software: boolean;
  f16: boolean;
  subgroups: boolean;
  kernels: KernelForms;
}

const api = {
  /** The adapter, its features and kernel forms (see {@link AdapterReport}). */
  async adapter(): Promise<AdapterReport> {
    const c = await context();
    return {
      line: describeAdapter(c.adapter),
      software: c.adapter.software,
      f16: c.features.f16,
      subgroups: c.features.subgroups,
      kernels: c.kernels,
    };
  },
  /** Runs the selftest kernel on the deterministic inputs of size `n` and returns y. */
  async selftest(n: number): Promise<Float32Array> {
    const { alpha, a, b } = selftestInputs(n);
    return saxpy(await context(), alpha, a, b);
  },
};

/** The API the selftest worker exposes through comlink. */
export type SelftestWorkerApi = typeof api;

Comlink.expose(api);
