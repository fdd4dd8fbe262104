// Quantized KV caches (int8, int4): each cache slot holds, per KV head, one f32 scale word then the
// head's values packed (4 per u32 at int8, 8 at int4), symmetric round to nearest even. Keys may be
// rotated first by a per-head Hadamard transform (QuaRot's rotation of keys): R = H_D · diag(s) / √D,
// orthogonal, so with the queries rotated the same way every score q·k is unchanged while the keys'
// outlier channels are spread over the head before rounding. The plain-TS layout and references
// here; the kernel (kv_quant.wgsl) writes what they write.
import { InvalidInputError } from '../../errors.js';
import { hadamardSigns } from '../../quant/hadamard.js';

/** The integer formats of a KV cache and the largest |q| each rounds to (symmetric, no offset). */
export const KV_INT_LEVELS = { int8: 127, int4: 7 } as const;

/** An integer KV format. */
export type KvIntFormat = keyof typeof KV_INT_LEVELS;

/** Seed of the per-head rotation's signs (fixed: the cache's layout, like its element order). */
export const KV_ROTATION_SEED = 0x6b76;

const SIGNS = new Map<number, Float32Array>();

/**
 * The rotation's signs s [headDim] (fixed by {@link KV_ROTATION_SEED}), made once per head size:
 * the reference and the host readers turn every cached head with them.
 */
export function kvRotationSigns(headDim: number): Float32Array {
  let s = SIGNS.get(headDim);
  if (!s) {
    s = hadamardSigns(headDim, KV_ROTATION_SEED);
    SIGNS.set(headDim, s);
  }
  return s;
}

/** Whether `format` is an integer (scaled) KV format. */
export function isKvInt(format: string | undefined): format is KvIntFormat {
  return format === 'int8' || format === 'int4';
}

/** Values per u32 word of an integer format. */
export function kvIntPerWord(format: KvIntFormat): number {
  return format === 'int8' ? 4 : 8;
}

/** u32 words of one head in a slot: the scale, then headDim values packed. */
export function kvIntHeadWords(format: KvIntFormat, headDim: number): number {
  const per = kvIntPerWord(format);
  if (headDim % per !== 0)
    throw new InvalidInputError(
      `KV cache: an ${format} cache needs headDim a multiple of ${per}, got ${headDim}`,
    );
  return 1 + headDim / per;
}

/** Whether keys of heads of `headDim` can be rotated (the butterflies need a power of two, ≤ 512). */
export function kvRotatable(headDim: number): boolean {
  return headDim >= 2 && headDim <= 512 && (headDim & (headDim - 1)) === 0;
}

/** In place, x ↦ R x = H (s ⊙ x) / √D on one head (f64; R is symmetric in H, so R⁻¹ y = s ⊙ (H y) / √D). */
export function rotateHead(x: Float64Array, signs: Float32Array, inverse = false): void {
  const D = x.length;
  if (!inverse) for (let i = 0; i < D; i++) x[i]! *= signs[i]!;
  for (let h = 1; h < D; h *= 2)
    for (let i = 0; i < D; i += 2 * h)
      for (let j = i; j < i + h; j++) {
        const a = x[j]!;
        const b = x[j + h]!;
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const s = 1 / Math.sqrt(D);
  for (let i = 0; i < D; i++) x[i] = x[i]! * s * (inverse ? signs[i]! : 1);
}

/** Rounds half to even, as WGSL's `round` does. */
function roundEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * One head's scale and rounded values, in f32 as the kernel computes them: scale = max|x| · (1 /
 * levels) (0 for a zero head), q = clamp(round(x / scale), ±levels).
 */
export function quantizeHead(x: ArrayLike<number>, format: KvIntFormat): { scale: number; q: Int8Array } {
  const levels = KV_INT_LEVELS[format];
  let amax = 0;
  for (let i = 0; i < x.length; i++) amax = Math.max(amax, Math.abs(Math.fround(x[i]!)));
  const scale = Math.fround(amax * Math.fround(1 / levels));
  const q = new Int8Array(x.length);
  if (scale > 0)
    for (let i = 0; i < x.length; i++)
      q[i] = Math.max(-levels, Math.min(levels, roundEven(Math.fround(Math.fround(x[i]!) / scale))));
  return { scale, q };
}

/** The words of one slot [kvHeads, headDim] (rotated per head first when `rotate`). */
export function encodeKvIntRow(
  format: KvIntFormat,
  kvHeads: number,
  headDim: number,
  row: Float32Array,
  rotate: boolean,
): Uint32Array {
  const hw = kvIntHeadWords(format, headDim);
  const per = kvIntPerWord(format);
  const bits = 32 / per;
  const mask = (1 << bits) - 1;
  const bias = format === 'int4' ? 8 : 0;
  const signs = rotate ? kvRotationSigns(headDim) : undefined;
  const out = new Uint32Array(kvHeads * hw);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  for (let h = 0; h < kvHeads; h++) {
    let x: ArrayLike<number> = row.subarray(h * headDim, (h + 1) * headDim);
    if (signs) {
      const t = Float64Array.from(x);
      rotateHead(t, signs);
      x = Float32Array.from(t);
    }
    const { scale, q } = quantizeHead(x, format);
    f32[0] = scale;
    out[h * hw] = u32[0]!;
    for (let i = 0; i < headDim; i++)
      out[h * hw + 1 + Math.floor(i / per)]! |= ((q[i]! + bias) & mask) << (bits * (i % per));
  }
  return out;
}

/** The values of one slot's words as stored (in the rotated basis when the keys are rotated). */
export function decodeKvIntRow(
  format: KvIntFormat,
  kvHeads: number,
  headDim: number,
  words: Uint32Array,
): Float32Array {
  const hw = kvIntHeadWords(format, headDim);
  const per = kvIntPerWord(format);
  const bits = 32 / per;
  const out = new Float32Array(kvHeads * headDim);
  const u32 = new Uint32Array(1);
  const f32 = new Float32Array(u32.buffer);
  for (let h = 0; h < kvHeads; h++) {
    u32[0] = words[h * hw]!;
    const scale = f32[0]!;
    for (let i = 0; i < headDim; i++) {
      const w = words[h * hw + 1 + Math.floor(i / per)]!;
      const raw = (w >>> (bits * (i % per))) & ((1 << bits) - 1);
      const q = format === 'int4' ? raw - 8 : (raw << 24) >> 24;
      out[h * headDim + i] = Math.fround(q * scale);
    }
  }
  return out;
}

/** `rows` [kvHeads, headDim] (f32, in the rotated basis) turned back per head: R⁻¹ in f64, then f32. */
export function unrotateRow(rows: Float32Array, kvHeads: number, headDim: number): Float32Array {
  const signs = kvRotationSigns(headDim);
  const out = new Float32Array(rows.length);
  for (let h = 0; h < kvHeads; h++) {
    const t = Float64Array.from(rows.subarray(h * headDim, (h + 1) * headDim));
    rotateHead(t, signs, true);
    out.set(t, h * headDim);
  }
  return out;
}

/**
 * What a slot of an integer cache gives back for `row` [kvHeads, headDim], in the unrotated basis:
 * the reference's keys and values (R⁻¹ of the rounded rotated head when `rotate`, in f64, then f32).
 * Attention over these with plain queries scores as the GPU's rotated queries over the rotated cache.
 */
export function kvIntRoundTrip(
  format: KvIntFormat,
  kvHeads: number,
  headDim: number,
  row: Float32Array,
  rotate: boolean,
): Float32Array {
  const stored = decodeKvIntRow(
    format,
    kvHeads,
    headDim,
    encodeKvIntRow(format, kvHeads, headDim, row, rotate),
  );
  return rotate ? unrotateRow(stored, kvHeads, headDim) : stored;
}
