// Web Worker that proves WebGPU compute runs off the main thread: it exposes, through comlink, the
// adapter description and the selftest kernel. Transport only: the work lives in src/.
import * as Comlink from 'comlink';
import { createGpuContext, describeAdapter, type GpuContext } from '../src/gpu/index.js';
import { saxpy, selftestInputs } from '../src/kernels/selftest/selftest.js';

let ctx: Promise<GpuContext> | undefined;
const context = () => {
  ctx ??= createGpuContext();
  return ctx;
};

const api = {
  /** One line naming the adapter the worker got. */
  async adapter(): Promise<string> {
    return describeAdapter((await context()).adapter);
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
