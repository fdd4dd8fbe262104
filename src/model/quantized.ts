import { hadamardRef } from '../kernels/hadamard/construct.js';
import type { WeightFormat } from '../kernels/matmul/quant.js';
import { quantizeActRef } from '../kernels/w8a8/w8a8.js';
import {
  crop,
  effectiveWeights,
  isRotatedLinear,
  packedWidth,
  packLinear,
  ROTATION_SEED,
  type RotationChoice,
  rotationFor,
  unrotateRows,
  zeroPad,
} from '../quant/pack.js';
import type { Tensor } from './weights.js';

/**
 * The reference's W8A8 activation path (a `LinearInputHook` of model/reference): each row of a
 * linear's input x [T, width] is zero-padded to {@link packedWidth}, rotated when `choice` rotates
 * that width ({@link rotationFor}), rounded to int8 per token exactly as the GPU's `quantize_act`
 * does (`quantizeActRef`), dequantized, un-rotated and cropped. Multiplied by
 * {@link effectiveWeights} this is the GPU's (W·Rᵀ)_q · Q(R·x) up to f32 rounding; when padding and
 * rotation meet (a width that is not a Hadamard size), the product through the padded columns of
 * (W·Rᵀ)_q·R is left out: a rounding-sized term, since those columns are zero before quantization.
 * The rounding is the same for every linear, so the hook ignores which one it feeds (callers may
 * omit `linears`).
 */
export function w8a8Inputs(choice: RotationChoice): (x: Float32Array, width: number) => Float32Array {
  return (x, width) => {
    const rotate = rotationFor(choice, width);
    const T = x.length / width;
    const n = packedWidth(width, rotate);
    let m = zeroPad(x, T, width, T, n);
    if (rotate === 'hadamard') m = hadamardRef(m, T, n, ROTATION_SEED);
    const { q, scale } = quantizeActRef(m, T, n);
    let d: Float32Array = new Float32Array(T * n);
    for (let i = 0; i < d.length; i++) d[i] = q[i]! * scale[Math.floor(i / n)]!;
    if (rotate === 'hadamard') d = unrotateRows(d, T, n);
    return crop(d, n, T, width);
  };
}

/**
 * The tensors with every matrix rounded through `format` exactly as the GPU runner packs it
 * (vectors stay f32): the CPU reference of a quantized model. Each `*_proj` linear's input is
 * rotated as `rotate` chooses for its width ({@link rotationFor}). With `hessians` (from
 * `collectHessians`, in the same rotation), the linears they name are rounded by GPTQ, as
 * `weft convert --calibrate` packs them.
 */
export function roundedThrough(
  tensors: Record<string, Tensor>,
  format: WeightFormat,
  rotate: RotationChoice = 'none',
  hessians?: ReadonlyMap<string, Float64Array>,
): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  for (const [name, t] of Object.entries(tensors)) {
    const [rows, cols] = t.shape;
    if (t.shape.length !== 2 || !rows || !cols) {
      out[name] = t;
      continue;
    }
    const r = isRotatedLinear(name) ? rotationFor(rotate, cols) : 'none';
    const pad = { rows, cols: packedWidth(cols, r) };
    out[name] = {
      shape: t.shape,
      data: effectiveWeights(
        packLinear(t.data, rows, cols, pad, format, r, hessians?.get(name)),
        rows,
        cols,
        r,
      ),
    };
  }
  return out;
}
