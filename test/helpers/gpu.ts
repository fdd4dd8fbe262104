// Shared GPU context for Node tests. GPU tests never skip: without an adapter they fail, so a green
// run proves the kernels ran. The adapter is printed once per file so CI logs name it.
import {
  createGpuContext,
  describeAdapter,
  type GpuContext,
  type GpuContextOptions,
} from '../../src/gpu/index.js';

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
