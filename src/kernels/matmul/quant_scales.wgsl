// quant_scales: the grid of an integer weight format at a flat element, pulled in with
// `//#include quant_scales` by matmul.wgsl, matmul_w8a8.wgsl and embed.wgsl; not a kernel of its
// own. Needs `scales: array<u32>` (the block metadata of quant.ts's QuantizedMatrix, indexed from
// the part's first element) and one of INT8, Q4_0, INT4, INT2 set (none: grid_at is not emitted).
//
// grid_at(e) = (a, b): element e dequantizes to a * q - b for its integer code q.
//   INT8, Q4_0: f16 d of group g = e >> 5 in half g & 1 of scales[g >> 1]; (d, 0) and (d, 8d).
//   INT4: super-block s = e >> 8, sub-block j = (e >> 5) & 7: 6-bit sc_j at bit 6j and mn_j at bit
//     48 + 6j of the little-endian words scales[4s .. 4s + 2] (a field may straddle two words),
//     (D, M) = unpack2x16float(scales[4s + 3]); (D * sc_j, M * mn_j).
//   INT2: s = e >> 8, j = (e >> 4) & 15: byte j & 3 of scales[5s + (j >> 2)] = sc_j | mn_j << 4,
//     (D, M) = unpack2x16float(scales[5s + 4]); (D * sc_j, M * mn_j).
// Every product is exact in f32 (an f16 times an integer below 64), as in quant.ts.

//#if INT8
fn grid_at(e: u32) -> vec2<f32> {
  let g = e >> 5u;
  return vec2<f32>(unpack2x16float(scales[g >> 1u])[g & 1u], 0.0);
}
//#endif
//#if Q4_0
fn grid_at(e: u32) -> vec2<f32> {
  let g = e >> 5u;
  let d = unpack2x16float(scales[g >> 1u])[g & 1u];
  return vec2<f32>(d, 8.0 * d);
}
//#endif
//#if INT4
// `width` (< 32) bits at bit `pos` of the 96-bit field array starting at scales[base].
fn field(base: u32, pos: u32, width: u32) -> u32 {
  let i = base + (pos >> 5u);
  let off = pos & 31u;
  var v = scales[i] >> off;
  if (off + width > 32u) {
    v |= scales[i + 1u] << (32u - off);
  }
  return v & ((1u << width) - 1u);
}

fn grid_at(e: u32) -> vec2<f32> {
  let s = e >> 8u;
  let j = (e >> 5u) & 7u;
  let dm = unpack2x16float(scales[4u * s + 3u]);
  return dm * vec2<f32>(f32(field(4u * s, 6u * j, 6u)), f32(field(4u * s, 48u + 6u * j, 6u)));
}
//#endif
//#if INT2
fn grid_at(e: u32) -> vec2<f32> {
  let s = e >> 8u;
  let j = (e >> 4u) & 15u;
  let byte = (scales[5u * s + (j >> 2u)] >> (8u * (j & 3u))) & 255u;
  let dm = unpack2x16float(scales[5u * s + 4u]);
  return dm * vec2<f32>(f32(byte & 15u), f32(byte >> 4u));
}
//#endif
