// quant_scales: the grid of an integer weight format at a flat element, pulled in with
// `//#include quant_scales` by matmul_common.wgsl, matmul_w8a8.wgsl and embed.wgsl; not a kernel of its
// own. Needs `scales: array<u32>` (the block metadata of src/quant/formats.ts's QuantizedMatrix, indexed from
// the part's first element) and the flags of `quantScaleVars` (matmul/variant.ts): one of INT8, Q4_0,
// Q4_1, Q5_0, Q5_1, SC6 (INT4, Q5_K), Q6_K, Q3_K, IQ4_NL, IQ4_XS, LATTICE, INT2 set (none:
// nothing is emitted).
//
// grid_at(e) = (a, b): element e dequantizes to a * q - b for its integer code q. It is
// grid_of(scale_words(e), e): scale_words loads the metadata words e's grid needs (one load of up
// to four words), grid_of decodes them, so a kernel may load the words of a whole unit of blocks
// early and decode each block's grid later: the same words serve every element of a group of 32
// (INT8, Q4_0, Q4_1), of a chunk of 128 (Q5_0, Q5_1), of a super-block (SC6), of 64 aligned ones
// (INT2, Q6_K).
//   INT8, Q4_0: f16 d of group g = e >> 5 in half g & 1 of scales[g >> 1]; (d, 0) and (d, 8d).
//     Words: (scales[g >> 1], 0, 0, 0).
//   Q4_1: scales[g] = f16 d | f16 m << 16; (d, -m). Words: (scales[g], 0, 0, 0).
//   Q5_0: d as INT8; (d, 0). Words: the chunk's (scales[2c], scales[2c + 1], 0, 0), c = e >> 7.
//   Q5_1: scales[g] as Q4_1. Words: the chunk's scales[4c .. 4c + 3].
//   SC6 (INT4, Q5_K): super-block s = e >> 8, sub-block j = (e >> 5) & 7: 6-bit sc_j at bit 6j and
//     mn_j at bit 48 + 6j of the little-endian words scales[4s .. 4s + 2] (a field may straddle
//     two words), (D, M) = unpack2x16float(scales[4s + 3]); (D * sc_j, M * mn_j). Words:
//     scales[4s .. 4s + 3].
//   Q6_K: s = e >> 8, j = (e >> 4) & 15, t = 9 (s >> 1): int8 sc_j in byte j & 3 of scales[t + 1 +
//     4 (s & 1) + (j >> 2)], f16 d in half s & 1 of scales[t]; (d * sc_j, 0). Words: (that
//     sub-scale word, scales[t], 0, 0).
//   INT2: s = e >> 8, j = (e >> 4) & 15: byte j & 3 of scales[5s + (j >> 2)] = sc_j | mn_j << 4,
//     (D, M) = unpack2x16float(scales[5s + 4]); (D * sc_j, M * mn_j). Words: (scales[5s + (j >> 2)],
//     scales[5s + 4], 0, 0).
//   Q3_K: s = e >> 8, j = (e >> 4) & 15, t = 7 (s >> 1), f = t + 1 + 3 (s & 1): the 6-bit sc_j at
//     bit 6j of the little-endian words scales[f .. f + 2], f16 d in half s & 1 of scales[t];
//     (d * (sc_j - 32), 0). Words: (scales[f], scales[f + 1], scales[f + 2], scales[t]).
//   IQ4_NL: as INT8 (the codes are IQ4 values, see matmul_common.wgsl).
//   LATTICE (the lattice i-quants): f16 d of super-block s = e >> 8 in half s & 1 of scales[e >> 9];
//     (d, 0), d the super-block's scale (the sub-block scales are in the codes: lattice.wgsl).
//     Words: (scales[e >> 9], 0, 0, 0).
//   IQ4_XS: s = e >> 8, j = (e >> 5) & 7: scales[2s] = f16 d | scales_h << 16, scales[2s + 1] =
//     scales_l; ls_j = nibble j of scales_l | bits 2j .. 2j + 1 of scales_h << 4; (d * (ls_j - 32),
//     0). Words: (scales[2s], scales[2s + 1], 0, 0).
// Every product is exact in f32 (an f16 times an integer below 256), as in src/quant/formats.ts.

//#if INT8
fn scale_words(e: u32) -> vec4<u32> {
  return vec4<u32>(scales[e >> 6u], 0u, 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  return vec2<f32>(unpack2x16float(w.x)[(e >> 5u) & 1u], 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if IQ4_NL
fn scale_words(e: u32) -> vec4<u32> {
  return vec4<u32>(scales[e >> 6u], 0u, 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  return vec2<f32>(unpack2x16float(w.x)[(e >> 5u) & 1u], 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if Q4_0
fn scale_words(e: u32) -> vec4<u32> {
  return vec4<u32>(scales[e >> 6u], 0u, 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let d = unpack2x16float(w.x)[(e >> 5u) & 1u];
  return vec2<f32>(d, 8.0 * d);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if SC6
fn scale_words(e: u32) -> vec4<u32> {
  let s = 4u * (e >> 8u);
  return vec4<u32>(scales[s], scales[s + 1u], scales[s + 2u], scales[s + 3u]);
}

// Word i (< 3) of the 96-bit field array.
fn field_word(w: vec4<u32>, i: u32) -> u32 {
  return select(select(w.x, w.y, i == 1u), w.z, i == 2u);
}

// `width` (< 32) bits at bit `pos` of the 96-bit field array w.xyz.
fn field(w: vec4<u32>, pos: u32, width: u32) -> u32 {
  let i = pos >> 5u;
  let off = pos & 31u;
  var v = field_word(w, i) >> off;
  if (off + width > 32u) {
    v |= field_word(w, i + 1u) << (32u - off);
  }
  return v & ((1u << width) - 1u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let j = (e >> 5u) & 7u;
  let dm = unpack2x16float(w.w);
  return dm * vec2<f32>(f32(field(w, 6u * j, 6u)), f32(field(w, 48u + 6u * j, 6u)));
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if Q4_1
fn scale_words(e: u32) -> vec4<u32> {
  return vec4<u32>(scales[e >> 5u], 0u, 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let dm = unpack2x16float(w.x);
  return vec2<f32>(dm.x, -dm.y);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if Q5_0
fn scale_words(e: u32) -> vec4<u32> {
  let c = 2u * (e >> 7u);
  return vec4<u32>(scales[c], scales[c + 1u], 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  return vec2<f32>(unpack2x16float(w[(e >> 6u) & 1u])[(e >> 5u) & 1u], 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if Q5_1
fn scale_words(e: u32) -> vec4<u32> {
  let c = 4u * (e >> 7u);
  return vec4<u32>(scales[c], scales[c + 1u], scales[c + 2u], scales[c + 3u]);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let dm = unpack2x16float(w[(e >> 5u) & 3u]);
  return vec2<f32>(dm.x, -dm.y);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if Q6_K
fn scale_words(e: u32) -> vec4<u32> {
  let s = e >> 8u;
  let t = 9u * (s >> 1u);
  return vec4<u32>(scales[t + 1u + 4u * (s & 1u) + ((e >> 6u) & 3u)], scales[t], 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let sc = bitcast<i32>(w.x << (24u - 8u * ((e >> 4u) & 3u))) >> 24u;
  return vec2<f32>(unpack2x16float(w.y)[(e >> 8u) & 1u] * f32(sc), 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if INT2
fn scale_words(e: u32) -> vec4<u32> {
  let s = 5u * (e >> 8u);
  return vec4<u32>(scales[s + ((e >> 6u) & 3u)], scales[s + 4u], 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let j = (e >> 4u) & 15u;
  let byte = (w.x >> (8u * (j & 3u))) & 255u;
  let dm = unpack2x16float(w.y);
  return dm * vec2<f32>(f32(byte & 15u), f32(byte >> 4u));
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if Q3_K
fn scale_words(e: u32) -> vec4<u32> {
  let s = e >> 8u;
  let t = 7u * (s >> 1u);
  let f = t + 1u + 3u * (s & 1u);
  return vec4<u32>(scales[f], scales[f + 1u], scales[f + 2u], scales[t]);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let pos = 6u * ((e >> 4u) & 15u);
  let off = pos & 31u;
  var v = w[pos >> 5u] >> off;
  if (off > 26u) {
    v |= w[(pos >> 5u) + 1u] << (32u - off);
  }
  let sc = i32(v & 63u) - 32;
  return vec2<f32>(unpack2x16float(w.w)[(e >> 8u) & 1u] * f32(sc), 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if IQ4_XS
fn scale_words(e: u32) -> vec4<u32> {
  let s = 2u * (e >> 8u);
  return vec4<u32>(scales[s], scales[s + 1u], 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  let j = (e >> 5u) & 7u;
  let ls = ((w.y >> (4u * j)) & 15u) | (((w.x >> (16u + 2u * j)) & 3u) << 4u);
  return vec2<f32>(unpack2x16float(w.x).x * f32(i32(ls) - 32), 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
//#if LATTICE
fn scale_words(e: u32) -> vec4<u32> {
  return vec4<u32>(scales[e >> 9u], 0u, 0u, 0u);
}

fn grid_of(w: vec4<u32>, e: u32) -> vec2<f32> {
  return vec2<f32>(unpack2x16float(w.x)[(e >> 8u) & 1u], 0.0);
}

fn grid_at(e: u32) -> vec2<f32> {
  return grid_of(scale_words(e), e);
}
//#endif
