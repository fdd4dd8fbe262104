// half_bits: f32 → IEEE half bits rounded to nearest even, shared by the kernels that write an f16
// KV cache (kv_write, qkv_rope), pulled in with `//#include half_bits`; not a kernel of its own.

// IEEE half bits of x rounded to nearest even (pack2x16float leaves the rounding to the device, so
// the cache would differ between GPUs and from the reference). Overflow gives ±Inf, NaN stays NaN.
fn half_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let sign = (b >> 16u) & 0x8000u;
  let biased = i32((b >> 23u) & 0xffu);
  var mant = b & 0x7fffffu;
  if (biased == 255) {
    return sign | 0x7c00u | select(0u, 0x200u, mant != 0u);
  }
  let e = biased - 112; // re-biased for half: - 127 + 15
  if (e >= 31) {
    return sign | 0x7c00u;
  }
  if (e <= 0) {
    // Subnormal half (or zero): the full 24-bit significand shifted down.
    if (e < -10) {
      return sign;
    }
    mant = mant | 0x800000u;
    let shift = u32(14 - e);
    let mid = 1u << (shift - 1u);
    var m = mant >> shift;
    let rest = mant & ((1u << shift) - 1u);
    if (rest > mid || (rest == mid && (m & 1u) == 1u)) {
      m = m + 1u;
    }
    return sign | m;
  }
  var h = sign | (u32(e) << 10u) | (mant >> 13u);
  let rest = mant & 0x1fffu;
  // A carry out of the mantissa bumps the exponent (up to Inf), as it should.
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u)) {
    h = h + 1u;
  }
  return h;
}
