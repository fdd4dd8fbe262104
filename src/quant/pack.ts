// How a linear's weights are packed for the GPU: the weight precision a user chooses (`Quant`), the
// optional Hadamard rotation of its input, the padded width and the one packing function that the
// runner and the converter share. Below formats/ and model/, above kernels/.
import { InvalidInputError } from '../errors.js';
import {
  dequantize,
  encode,
  type GgufOnlyFormat,
  gridOf,
  isIntFormat,
  type QuantizedMatrix,
  quantize,
  type WeightFormat,
} from './formats.js';
import { gptqCodes } from './gptq.js';
import { blockButterflies, hadamardFactor, hadamardPlan, hadamardRef, hadamardSigns } from './hadamard.js';
import { refineKQuant } from './refine.js';

/**
 * Weight precision on the device: a weight format, or `w8a8` (int8 weights, activations rounded
 * per token). The GGUF block formats (`q4_0`, `q4_1`, `q5_0`, `q5_1`, `q5_k`, `q6_k`, see
 * {@link GgufOnlyFormat}) are what a GGUF of that type is placed in as stored, and so its default;
 * asked of another model they round to nearest as llama.cpp's reference quantizers do (weft-q
 * checkpoints do not store them, see {@link QuantFormat}).
 */
export type Quant = WeightFormat | 'w8a8';

/**
 * Rotation of a linear's input: `'hadamard'` multiplies the activations by R = H·D/√n on the GPU
 * before the matmul and packs the weights as W·Rᵀ (so W·x = (W·Rᵀ)(R·x) exactly before rounding),
 * which spreads outliers across the row before quantizing (QuaRot-style, online).
 */
export type Rotation = 'none' | 'hadamard';

/**
 * How a runner chooses the rotation of each linear's input: a {@link Rotation} for every `*_proj`
 * linear, or `'auto'` (W8A8's default): rotate the inputs whose width is a multiple of 16 and a
 * Hadamard size as it stands, and leave the others unrotated (no padding to a larger Hadamard
 * size; the load reports them). q, k, v, gate and up read the hidden width, o the query width (heads × head_dim),
 * down the MLP width.
 */
export type RotationChoice = Rotation | 'auto';

/** The rotation of a `*_proj` input of `width` under `choice` (see {@link RotationChoice}). */
export function rotationFor(choice: RotationChoice, width: number): Rotation {
  if (choice !== 'auto') return choice;
  return width % 16 === 0 && isHadamardSize(width) ? 'hadamard' : 'none';
}

/** Seed of the sign vector D of every rotation (offline packing and online kernel must agree). */
export const ROTATION_SEED = 0x77656674;

/** The weight formats weft-q checkpoints store: every format but the GGUF block formats. */
export type QuantFormat = Exclude<WeightFormat, GgufOnlyFormat>;

/** Weight format of each quant choice (w8a8 keeps int8 weights and rounds activations per token). */
export function formatOf(quant: Quant): WeightFormat {
  return quant === 'w8a8' ? 'int8' : quant;
}

/** True when `n` is a size the Hadamard kernels can rotate (K·2^m, see `hadamardFactor`). */
export function isHadamardSize(n: number): boolean {
  try {
    hadamardFactor(n);
    return true;
  } catch {
    return false;
  }
}

/**
 * The width K a linear's input is packed at: `cols` rounded up to the matmul's blocks of 16 and,
 * when rotating, further up to the next Hadamard size (344 → 384 = 12·32). The extra columns are
 * zero weights meeting zero activations, so the product is unchanged.
 */
export function packedWidth(cols: number, rotate: Rotation): number {
  const n = Math.ceil(cols / 16) * 16;
  if (rotate === 'none') return n;
  // A power of two ≥ n always works, so the search ends by 2n.
  for (let m = n; m <= 2 * n; m += 16) if (isHadamardSize(m)) return m;
  throw new InvalidInputError(`packedWidth: no Hadamard size between ${n} and ${2 * n}`);
}

/** `w` [rows, cols] placed in the top-left of a zero [padRows, padCols] matrix (itself when equal). */
export function zeroPad(
  w: Float32Array,
  rows: number,
  cols: number,
  padRows: number,
  padCols: number,
): Float32Array {
  if (padRows === rows && padCols === cols) return w;
  const out = new Float32Array(padRows * padCols);
  for (let r = 0; r < rows; r++) out.set(w.subarray(r * cols, (r + 1) * cols), r * padCols);
  return out;
}

/**
 * Packs one linear weight [rows, cols] exactly as the GPU runner places it: zero-padded to
 * `pad`, rotated on the input side (W·Rᵀ over the padded width) when `rotate` is `'hadamard'`,
 * then quantized to `format` (flat blocks over the padded matrix). The converter and the
 * runner both call this, so a converted checkpoint is bit-identical to quantizing while loading.
 * With `hessian` (H = Σ x xᵀ [pad.cols, pad.cols] of the linear's padded, rotated inputs on
 * calibration text, see `collectHessians`), an integer format chooses its scales by the search
 * of round-to-nearest weighted by each input's energy (`gridOf` with diag H) and its codes by
 * GPTQ's error feedback ({@link gptqCodes}): both lower the error of the layer's output rather
 * than of each weight. int4 and int2 then refine codes, sub-block scales and mins and D/M together
 * on GPTQ's objective ({@link refineKQuant}), which never raises it.
 */
export function packLinear(
  w: Float32Array,
  rows: number,
  cols: number,
  pad: { readonly rows: number; readonly cols: number },
  format: WeightFormat,
  rotate: Rotation,
  hessian?: Float64Array,
): QuantizedMatrix {
  if (w.length !== rows * cols)
    throw new InvalidInputError(`packLinear: w has ${w.length} elements for [${rows}, ${cols}]`);
  if (rotate === 'hadamard' && !isHadamardSize(pad.cols))
    throw new InvalidInputError(`packLinear: padded width ${pad.cols} is not a Hadamard size`);
  let m = zeroPad(w, rows, cols, pad.rows, pad.cols);
  if (rotate === 'hadamard') m = hadamardRef(m, pad.rows, pad.cols, ROTATION_SEED);
  if (hessian === undefined || !isIntFormat(format)) return quantize(m, pad.rows, pad.cols, format);
  // The scales weigh each input by its energy on the calibration text (diag H); GPTQ picks codes.
  const importance = Float32Array.from({ length: pad.cols }, (_, k) => hessian[k * pad.cols + k]!);
  const grid = gridOf(m, pad.rows, pad.cols, format, importance);
  const codes = gptqCodes(m, pad.rows, pad.cols, hessian, grid, { order: 'energy' });
  if (format !== 'int4' && format !== 'int2') return encode(grid, codes);
  // K-quants: codes, sub-scales and D/M refined together on GPTQ's objective.
  const refined = refineKQuant(m, pad.rows, pad.cols, hessian, grid, codes);
  return encode(refined.grid, refined.codes);
}

/**
 * Rᵀ·y for each row y [n] of y [M, n], R = H_n·D/√n the rotation of {@link ROTATION_SEED}: the
 * inverse of `hadamardRef` (R is orthogonal), in O(n log n) per row. H_n = hb ⊗ H_P (the block mix
 * hb of `hadamardPlan` across blocks of P, Sylvester butterflies within a block), so
 * Hᵀ = hbᵀ ⊗ H_P: the same butterflies (H_P is symmetric), the transposed mix (hb need not be:
 * Paley I matrices are not), then the scale and the signs.
 */
export function unrotateRows(y: Float32Array, M: number, n: number): Float32Array {
  if (y.length !== M * n)
    throw new InvalidInputError(`unrotateRows: y has ${y.length} elements for [${M}, ${n}]`);
  const { P, Kb, hb, scale } = hadamardPlan(n);
  const signs = hadamardSigns(n, ROTATION_SEED);
  const out = new Float32Array(M * n);
  const t = new Float64Array(n);
  for (let r = 0; r < M; r++) {
    for (let i = 0; i < n; i++) t[i] = y[r * n + i]!;
    blockButterflies(t, P, Kb);
    for (let a = 0; a < Kb; a++)
      for (let b = 0; b < P; b++) {
        let acc = t[a * P + b]!;
        if (Kb > 1) {
          acc = 0;
          for (let c = 0; c < Kb; c++) acc += hb[c * Kb + a]! * t[c * P + b]!;
        }
        out[r * n + a * P + b] = acc * scale * signs[a * P + b]!;
      }
  }
  return out;
}

/**
 * The decoder's linear weights, which a weft-q checkpoint packs: every `*_proj`, LFM2's
 * feed-forward `w1`, `w2` and `w3`, and a mixture's experts (not the router, not the LM head, not
 * the embedding).
 */
export function isLinear(name: string): boolean {
  return name.endsWith('_proj.weight') || /\.feed_forward\.(experts\.\d+\.)?w[123]\.weight$/.test(name);
}

/**
 * The matrices besides the linears that the runner places packed at the linears' format (never
 * rotated), which a weft-q checkpoint therefore packs so: Gemma 4's per-layer-input table
 * (`embed_tokens_per_layer`, [vocab, layers · width]) and projection (`per_layer_model_projection`,
 * [layers · width, H]), and each layer's per-layer gate and projection.
 */
export function isPerLayerMatrix(name: string): boolean {
  return (
    name === 'model.embed_tokens_per_layer.weight' ||
    /(^|\.)per_layer_(model_projection|input_gate|projection)\.weight$/.test(name)
  );
}

/**
 * The linears whose input the runner may rotate (packed as W·Rᵀ): every {@link isLinear} but a
 * mixture's experts and shared expert, whose matmuls read the normed rows as they are.
 */
export function isRotatedLinear(name: string): boolean {
  return isLinear(name) && !/\.(experts|shared_expert)\./.test(name);
}

/**
 * A mixture's router (`mlp.gate`, LFM2's `feed_forward.gate`, Gemma 4's `router.proj`) and its shared expert's gate: kept in
 * f32 wherever weights are packed (the GPU's route kernel reads them so, as llama.cpp keeps them),
 * since a choice between close experts turns on their last bits.
 */
export function isRouter(name: string): boolean {
  return /\.(mlp|feed_forward)\.(gate|shared_expert_gate)\.weight$|\.router\.proj\.weight$/.test(name);
}

/**
 * The MLP's input linears, gate and up (LFM2: `feed_forward.w1` and `w3`): placed with zero rows
 * up to the padded MLP width that down reads.
 */
export function isMlpInput(name: string): boolean {
  return /\.(mlp\.(gate|up)_proj|feed_forward\.w[13])\.weight$/.test(name);
}

/**
 * The f32 weights [rows, cols] that a packed linear multiplies the (unrotated) input by: the
 * dequantized matrix, un-rotated ((W·Rᵀ)_q · R) and cropped to the unpadded shape. The CPU
 * reference of a quantized (and maybe rotated) model runs on these. Row r of W_q·R is
 * (Rᵀ·W_q[r]ᵀ)ᵀ, so the un-rotation is {@link unrotateRows} over the rows.
 */
export function effectiveWeights(
  q: QuantizedMatrix,
  rows: number,
  cols: number,
  rotate: Rotation,
): Float32Array {
  const n = q.cols;
  let d = dequantize(q);
  if (rotate === 'hadamard') d = unrotateRows(d, q.rows, n);
  return crop(d, n, rows, cols);
}

/** The top-left [rows, cols] of a matrix with rows of `n` (itself when n === cols and it has `rows` rows). */
export function crop(m: Float32Array, n: number, rows: number, cols: number): Float32Array {
  if (n === cols && m.length === rows * cols) return m;
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) out.set(m.subarray(r * n, r * n + cols), r * cols);
  return out;
}
