// The steps several blocks' encodes share: a linear's input normed and rotated as its weights were
// packed, and a linear whose result is added into the residual stream.
import type { Hadamard } from '../../kernels/hadamard/hadamard.js';
import type { GpuPass, Linear } from './gpu.js';

/** A linear's input as its weights expect it: R·x in the rotation's buffer, or x itself. */
export function rotatedInput(p: GpuPass, r: Hadamard | undefined, x: GPUBuffer): GPUBuffer {
  const rot = p.k.rot;
  if (!r || !rot) return x;
  r.encode(p.pass, x, rot.out, p.T);
  return rot.out;
}

/**
 * The input of a linear that does not apply its norm itself: norm(x) with `gamma` into h, rotated if
 * its weights were packed for R·x (one rotated copy serves q, k and v, or gate and up).
 */
export function normedInput(p: GpuPass, gamma: GPUBuffer): GPUBuffer {
  p.k.norm.encode(p.pass, p.a.x, gamma, p.a.h, p.T);
  return rotatedInput(p, p.k.rot?.hidden, p.a.h);
}

/**
 * x += W·input: in the matmul's epilogue, or through tmp and the add kernel (W8A8); with `outNorm`
 * (Gemma's sandwich norms), x += rmsnorm(W·input) · outNorm through tmp and the norm-add kernel.
 */
export function encodeResidual(p: GpuPass, linear: Linear, input: GPUBuffer, outNorm?: GPUBuffer): void {
  const { a, T } = p;
  if (outNorm) {
    if (!p.k.normAdd) throw new Error('encodeResidual: a model with sandwich norms has the norm-add kernel');
    linear.encode(p.pass, input, a.tmp, T, p.prefill);
    p.k.normAdd.encode(p.pass, a.tmp, outNorm, a.x, T);
    return;
  }
  if (linear.fused.add) {
    linear.encode(p.pass, input, a.x, T, p.prefill);
    return;
  }
  linear.encode(p.pass, input, a.tmp, T, p.prefill);
  p.k.add.encode(p.pass, a.tmp, a.x, T * p.spec.hidden);
}
