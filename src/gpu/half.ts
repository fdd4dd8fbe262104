/**
 * Bit-level conversions between f32 and the 16-bit float formats checkpoints use, in plain TS so
 * they run in any host. Inputs are raw little-endian 16-bit patterns (`Uint16Array`).
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** Decodes one IEEE binary16 bit pattern to a number (exact: every half is an f32). */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac === 0 ? sign * Number.POSITIVE_INFINITY : Number.NaN;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

/**
 * Encodes a number as IEEE binary16 bits with round-to-nearest-even, the way `np.float16(x)` does:
 * overflow gives ±Inf, tiny values give subnormals or ±0, NaN gives a quiet NaN.
 */
export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  // Unbiased exponent re-biased for half.
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half (or zero): shift the full 24-bit significand down, rounding to nearest even.
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let m = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && (m & 1) === 1)) m++;
    return sign | m;
  }
  let h = sign | (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to Inf).
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1) === 1)) h++;
  return h;
}

/** Decodes bfloat16 bits: the top half of an f32. */
export function bf16BitsToF32(h: number): number {
  u32[0] = (h & 0xffff) << 16;
  return f32[0]!;
}

/** Encodes an f32 as bfloat16 bits with round-to-nearest-even (NaN stays NaN). */
export function f32ToBf16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  if ((bits & 0x7fffffff) > 0x7f800000) return ((bits >>> 16) | 0x40) & 0xffff;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

/** Decodes a buffer of little-endian binary16 values. */
export function f16ToF32Array(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = f16BitsToF32(bits[i]!);
  return out;
}

/** Decodes a buffer of little-endian bfloat16 values. */
export function bf16ToF32Array(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  const o32 = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) o32[i] = bits[i]! << 16;
  return out;
}
