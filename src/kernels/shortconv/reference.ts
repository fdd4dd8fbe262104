// The plain-TS reference of an LFM2 short-convolution layer's mixer (Hugging Face's
// `Lfm2ShortConv.slow_forward` in f32, between in_proj and out_proj: the gate B · x, the causal
// depthwise convolution, the gate C · conv), the oracle of shortconv.ts's kernel, and the shape its
// callers share. The model's reference forward (model/blocks/shortconv/reference.ts) computes the same.
import { InvalidInputError } from '../../errors.js';

/** Largest kernel: each thread keeps its window in a private array of `kernel` floats. */
const SHORTCONV_MAX_KERNEL = 16;

/** Static shape of one short-convolution layer (every conv layer of a model shares it). */
export interface ShortConvShape {
  /** Channels H (the model's hidden size): in_proj's row is B | C | x, 3H wide. */
  channels: number;
  /** Taps K of the causal depthwise convolution (`conv_L_cache`, 2..{@link SHORTCONV_MAX_KERNEL}). */
  kernel: number;
}

/** Throws InvalidInputError, prefixed by `who`, naming the field of `shape` out of range. */
export function checkShortConvShape(shape: ShortConvShape, who: string): void {
  const { channels, kernel } = shape;
  if (!Number.isInteger(channels) || channels < 1)
    throw new InvalidInputError(`${who}: channels must be ≥ 1, got ${channels}`);
  if (!Number.isInteger(kernel) || kernel < 2 || kernel > SHORTCONV_MAX_KERNEL)
    throw new InvalidInputError(`${who}: kernel must be in 2..${SHORTCONV_MAX_KERNEL}, got ${kernel}`);
}

/**
 * Reference of a pass of T = proj.length / 3H rows, a chain following the window: per row t and
 * channel c, with B | C | x = proj[t] (thirds of the row),
 *   u_t = B ⊙ x (rounded to f32),
 *   conv_t[c] = Σ_{j<K} weight[c, j] · u_{t-(K-1)+j}[c]   (the u before row 0 from `window`, oldest
 *   first; zeros when `fresh`), summed in f64 and rounded once,
 *   y_t = C ⊙ conv_t.
 * Returns y [T, H]; `window` [K - 1, H] is advanced in place to the last K - 1 rows of u.
 */
export function shortConvKernelRef(
  shape: ShortConvShape,
  proj: Float32Array,
  weight: Float32Array,
  window: Float32Array,
  fresh: boolean,
): Float32Array {
  checkShortConvShape(shape, 'shortConvKernelRef');
  const { channels: H, kernel: K } = shape;
  if (proj.length % (3 * H) !== 0)
    throw new InvalidInputError(
      `shortConvKernelRef: proj holds ${proj.length} values, not a multiple of the row ${3 * H}`,
    );
  if (weight.length !== H * K || window.length !== (K - 1) * H)
    throw new InvalidInputError(
      `shortConvKernelRef: weight holds ${weight.length} values and window ${window.length}, need ${H * K} and ${(K - 1) * H}`,
    );
  const T = proj.length / (3 * H);
  if (fresh) window.fill(0);
  const y = new Float32Array(T * H);
  const u = new Float32Array(H);
  for (let t = 0; t < T; t++) {
    const row = t * 3 * H;
    for (let c = 0; c < H; c++) u[c] = proj[row + c]! * proj[row + 2 * H + c]!;
    for (let c = 0; c < H; c++) {
      let acc = 0;
      for (let j = 0; j < K - 1; j++) acc += weight[c * K + j]! * window[j * H + c]!;
      acc += weight[c * K + K - 1]! * u[c]!;
      y[t * H + c] = proj[row + H + c]! * Math.fround(acc);
    }
    window.copyWithin(0, H);
    window.set(u, (K - 2) * H);
  }
  return y;
}
