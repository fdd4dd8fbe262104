import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { createBuffer, readF32, UNIFORM, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms } from '../../gpu/uniforms.js';
import { wgslVariant } from '../../gpu/wgsl.js';
import { grid } from '../dispatch.js';

const WG = 64;
const Params = defineUniforms('Params', { n: 'u32', alpha: 'f32' });

/** Plain-TS reference of the selftest kernel: `y[i] = alpha * a[i] + b[i]` in f32. */
export function saxpyRef(alpha: number, a: Float32Array, b: Float32Array): Float32Array {
  const y = new Float32Array(a.length);
  const al = Math.fround(alpha);
  for (let i = 0; i < a.length; i++) y[i] = Math.fround(Math.fround(al * a[i]!) + b[i]!);
  return y;
}

/**
 * Runs the selftest kernel (`y = alpha * a + b`) on the GPU and reads the result back. Used by the
 * host checks (Node, page, worker) to prove that WebGPU compute really runs.
 */
export async function saxpy(
  ctx: GpuContext,
  alpha: number,
  a: Float32Array,
  b: Float32Array,
): Promise<Float32Array> {
  if (a.length !== b.length)
    throw new InvalidInputError(`saxpy: a has ${a.length} elements but b has ${b.length}`);
  const n = a.length;
  const pipeline = await ctx.pipelines.prepare('selftest', ...wgslVariant(shaders.selftest, Params, { WG }));
  const params = uploadBuffer(ctx, new Uint8Array(Params.pack({ n, alpha })), 'selftest-params', UNIFORM);
  const bufA = uploadBuffer(ctx, a, 'selftest-a');
  const bufB = uploadBuffer(ctx, b, 'selftest-b');
  const bufY = createBuffer(ctx, n * 4, 'selftest-y');
  const bind = ctx.device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [params, bufA, bufB, bufY].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const enc = ctx.device.createCommandEncoder({ label: 'selftest' });
  const pass = enc.beginComputePass({ label: 'selftest' });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bind);
  ctx.counter.dispatch(pass, ...grid(Math.ceil(n / WG), ctx.limits.maxComputeWorkgroupsPerDimension));
  pass.end();
  ctx.counter.submit([enc.finish()]);
  try {
    return await readF32(ctx, bufY, n);
  } finally {
    for (const buf of [params, bufA, bufB, bufY]) buf.destroy();
  }
}

/** Deterministic inputs for host checks: the page and the test derive the same arrays from `n`. */
export function selftestInputs(n: number): { alpha: number; a: Float32Array; b: Float32Array } {
  const a = new Float32Array(n);
  const b = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    a[i] = ((i * 7919) % 1000) / 100 - 5;
    b[i] = ((i * 104729) % 997) / 50 - 10;
  }
  return { alpha: 1.5, a, b };
}
