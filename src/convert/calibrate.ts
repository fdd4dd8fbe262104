// Calibration for GPTQ (quant/gptq): run the plain-TS reference forward over calibration text and sum
// H = Σ x xᵀ of every linear's input (quant/hessian), keyed by the linear's checkpoint name.
import { InvalidInputError } from '../errors.js';
import { rmsNormRef } from '../kernels/norm/rmsnorm.js';
import { normWeight } from '../model/blocks/ops.js';
import { finalNormName } from '../model/families/index.js';
import { ReferenceRunner } from '../model/reference/reference.js';
import type { ModelSpec } from '../model/spec/spec.js';
import type { NamedTensors } from '../model/weights.js';
import { HessianSum } from '../quant/hessian.js';
import type { Rotation } from '../quant/pack.js';
import type { WeftTokenizer } from '../tokenizer/tokenizer.js';

/** Positions per calibration window, BOS included: the models' training and evaluation context. */
export const CALIBRATION_WINDOW = 256;

/**
 * Cuts a calibration text into the windows {@link collectHessians} runs: the text (final newline
 * dropped) encoded without special tokens, split into consecutive chunks of `length − 1` ids, each
 * fed after `bos` from position 0 (the last window shorter). Windows of `length` positions, like the
 * evaluation's (bench/quality.ts), so the statistics see the positions the model is scored on.
 */
export function calibrationWindows(
  tokenizer: Pick<WeftTokenizer, 'encode'>,
  text: string,
  bos: number,
  length = CALIBRATION_WINDOW,
): number[][] {
  if (!Number.isInteger(length) || length < 2)
    throw new InvalidInputError(`calibrationWindows: length ${length} must be an integer >= 2`);
  const ids = tokenizer.encode(text.replace(/\n$/, ''), { addSpecialTokens: false });
  const windows: number[][] = [];
  for (let s = 0; s < ids.length; s += length - 1) windows.push([bos, ...ids.slice(s, s + length - 1)]);
  return windows;
}

/** Options of {@link collectHessians}. */
export interface CalibrationOptions {
  /** The rotation the linears will be packed with: H is taken in the same (padded, rotated) basis. */
  readonly rotate: Rotation;
  /** Called after each window. */
  readonly onWindow?: (done: number, total: number) => void;
}

/**
 * The checkpoint name of the LM head's weights: `lm_head.weight`, or the embedding it is tied to
 * (one matrix serves both, packed once; its codes are then chosen for the head's products).
 */
export function headWeightName(spec: Pick<ModelSpec, 'tiedEmbeddings'>): string {
  return spec.tiedEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
}

/**
 * Runs the f32 reference forward over each window (from an empty cache, positions 0, 1, ...) and
 * returns, for every `*_proj` linear, H = Σ x xᵀ [n, n] (f64) of its input rows over all window
 * positions, with n = `packedWidth(width, rotate)` and each row padded and rotated as
 * {@link HessianSum} describes: the `hessian` that `gptqCodes` takes for the padded matrix that
 * `packLinear` quantizes. Keys are checkpoint names (`model.layers.0.self_attn.q_proj.weight`);
 * linears that read one input (q/k/v; gate/up) share one matrix object. The LM head is keyed too
 * (under {@link headWeightName}): H of the final normed hidden states [hidden, hidden], never
 * rotated (the runner rotates only `*_proj` inputs). At int2 the head rounded to nearest costs most
 * of the demo target's KLD, and a tied embedding is that same matrix. Memory: one [n, n] f64 per
 * distinct input, four per layer and one for the head.
 */
export function collectHessians(
  spec: ModelSpec,
  source: NamedTensors,
  windows: readonly (readonly number[])[],
  options: CalibrationOptions,
): Map<string, Float64Array> {
  if (windows.length === 0 || windows.some((w) => w.length === 0))
    throw new InvalidInputError('collectHessians: need at least one window, and no empty window');
  const capacity = Math.max(...windows.map((w) => w.length));
  const model = new ReferenceRunner(spec, source, { capacity });
  // One sum per distinct input, under the name of every linear that reads it; made at first sight,
  // when the hook tells the input's width.
  const sums = new Map<string, HessianSum>();
  model.linearInput = (x, width, linears) => {
    let sum = sums.get(linears[0]!);
    if (sum === undefined) {
      sum = new HessianSum(width, options.rotate);
      for (const name of linears) sums.set(name, sum);
    }
    sum.add(x);
    return x;
  };
  // The head reads rmsnorm(x) of the last block's output with the final norm's weight as it
  // multiplies (the family's final norm; 1 + w where norms are zero-centred), as the reference computes it.
  const head = new HessianSum(spec.hidden, 'none');
  const norm = normWeight(spec, source.get(finalNormName(spec)).data);
  model.residualHook = {
    output: (layer, x) => {
      if (layer === spec.layers - 1) head.add(rmsNormRef(x, norm, { n: spec.hidden, eps: spec.rmsEps }));
    },
  };
  windows.forEach((ids, i) => {
    model.logitsFor(ids);
    options.onWindow?.(i + 1, windows.length);
  });
  const matrices = new Map<HessianSum, Float64Array>();
  const out = new Map<string, Float64Array>();
  for (const [name, sum] of sums) {
    const h = matrices.get(sum) ?? sum.matrix();
    matrices.set(sum, h);
    out.set(name, h);
  }
  out.set(headWeightName(spec), headHessian(head.matrix(), head.n, spec.tiedEmbeddings));
  return out;
}

/**
 * The objective of the LM head's weights, H [n, n] (in place): the head's own H = Σ x xᵀ and, when
 * the embedding is tied to it, the embedding's use of the same rows, as mean(H_kk)·I (the mean over
 * the live columns, H_kk > 0, so padding does not dilute it): every weight's own error, weighed
 * like an input of average energy. The head's H alone lets GPTQ move
 * single weights far to fix the head's products, which the embedding then reads as they are; on
 * the demo target at int2 that alone made the tied matrix worse than rounding to nearest.
 */
export function headHessian(h: Float64Array, n: number, tied: boolean): Float64Array {
  if (!tied) return h;
  let sum = 0;
  let live = 0;
  for (let k = 0; k < n; k++) {
    sum += h[k * n + k]!;
    if (h[k * n + k]! > 0) live++;
  }
  const mean = live > 0 ? sum / live : 1;
  for (let k = 0; k < n; k++) h[k * n + k] = h[k * n + k]! + mean;
  return h;
}
