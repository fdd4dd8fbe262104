// lattice: the GGUF lattice i-quants (LatticeFormat in src/quant/layout.ts) decoded a block of 16
// weights at a time, pulled in with `//#include lattice` by matmul_common.wgsl and embed.wgsl; not a
// kernel of its own. Needs `fn code_word(i: u32) -> u32` (word i of the part's codes),
// `lattice: array<u32>` (the format's codebook, src/quant/iq-grids.ts: two words per IQ2 entry,
// one per IQ3 entry) and one of the flags IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S with DW (words
// per super-block: the GGUF block less its f16 d, which quant_scales.wgsl's LATTICE reads).
//
// A block b = (e & 255) >> 4 of super-block e >> 8 lies in sub-block ib = b >> 1 (32 weights),
// half h = b & 1. lattice_words(e) loads and aligns what the block needs, as (v.x: its four grid
// index bytes or two 16-bit fields, v.y: its sign fields, v.z: its high index bits and sub-scale);
// lattice_quad(v, k) gives weights 4k .. 4k + 3 of the block as signed magnitudes and
// lattice_scale(v, d) their scale, so weight = scale * magnitude, exact in f32 as llama.cpp's
// dequantize_row_iq* computes it (an f16 times a sub-scale below 32, times a magnitude below 64).
//   IQ2_XXS: word 2ib: 4 index bytes; word 2ib + 1: 4 x 7-bit sign fields | sub-scale << 28;
//     scale d * (0.5 + ls) / 4.
//   IQ2_XS: word b: two 16-bit fields, 9-bit index | 7-bit sign field << 9; sub-scale nibble h of
//     byte ib of words 16, 17; scale as IQ2_XXS.
//   IQ2_S: half h of word ib: two index low bytes; half h of word 8 + ib: two sign bytes; byte ib
//     of words 16, 17: 2 high index bits per group of 8; byte ib of words 18, 19: two sub-scale
//     nibbles; scale as IQ2_XXS.
//   IQ3_XXS: word b: 4 index bytes (an entry of 4 weights each); word 16 + ib: 4 x 7-bit sign
//     fields | sub-scale << 28; scale d * (0.5 + ls) / 2.
//   IQ3_S: word b: 4 index low bytes; byte ib of words 16, 17: one high index bit per entry; half h
//     of word 18 + ib: two sign bytes; nibble ib of word 26: the sub-scale; scale d * (1 + 2 ls).
// A 7-bit sign field stands for 8 signs whose count of minus signs is even (ksign).

const DW: u32 = {{DW}}u;

fn lattice_words(e: u32) -> vec4<u32> {
  let base = (e >> 8u) * DW;
  let b = (e & 255u) >> 4u;
  let ib = b >> 1u;
  let h = b & 1u;
//#if IQ2_XXS
  let aux = code_word(base + 2u * ib + 1u);
  return vec4<u32>((code_word(base + 2u * ib) >> (16u * h)) & 0xffffu, (aux >> (14u * h)) & 0x3fffu, aux >> 28u, 0u);
//#endif
//#if IQ2_XS
  return vec4<u32>(code_word(base + b), 0u, (code_word(base + 16u + (ib >> 2u)) >> (8u * (ib & 3u) + 4u * h)) & 15u, 0u);
//#endif
//#if IQ2_S
  let qh = (code_word(base + 16u + (ib >> 2u)) >> (8u * (ib & 3u) + 4u * h)) & 15u;
  let sc = (code_word(base + 18u + (ib >> 2u)) >> (8u * (ib & 3u) + 4u * h)) & 15u;
  return vec4<u32>((code_word(base + ib) >> (16u * h)) & 0xffffu, (code_word(base + 8u + ib) >> (16u * h)) & 0xffffu, qh | (sc << 4u), 0u);
//#endif
//#if IQ3_XXS
  let aux = code_word(base + 16u + ib);
  return vec4<u32>(code_word(base + b), (aux >> (14u * h)) & 0x3fffu, aux >> 28u, 0u);
//#endif
//#if IQ3_S
  let qh = (code_word(base + 16u + (ib >> 2u)) >> (8u * (ib & 3u) + 4u * h)) & 15u;
  let sc = (code_word(base + 26u) >> (4u * ib)) & 15u;
  return vec4<u32>(code_word(base + b), (code_word(base + 18u + ib) >> (16u * h)) & 0xffffu, qh | (sc << 4u), 0u);
//#endif
}

// The 8 signs of a 7-bit sign field: bit 7 makes the count of set bits even.
fn ksign(s7: u32) -> u32 {
  return s7 | ((countOneBits(s7) & 1u) << 7u);
}

// Four magnitudes (the bytes of m) with the signs of bits 0 .. 3 of s.
fn sgn4(m: u32, s: u32) -> vec4<f32> {
  let v = vec4<f32>((vec4<u32>(m) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
  return select(v, -v, ((vec4<u32>(s) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) == vec4<u32>(1u));
}

// Weights 4k .. 4k + 3 of the block whose lattice_words are v, before their scale.
fn lattice_quad(v: vec4<u32>, k: u32) -> vec4<f32> {
  let g = k >> 1u;
  let hf = k & 1u;
//#if IQ2_XXS
  let idx = (v.x >> (8u * g)) & 255u;
  return sgn4(lattice[2u * idx + hf], ksign((v.y >> (7u * g)) & 127u) >> (4u * hf));
//#endif
//#if IQ2_XS
  let u = (v.x >> (16u * g)) & 0xffffu;
  return sgn4(lattice[2u * (u & 511u) + hf], ksign(u >> 9u) >> (4u * hf));
//#endif
//#if IQ2_S
  let idx = ((v.x >> (8u * g)) & 255u) | (((v.z >> (2u * g)) & 3u) << 8u);
  return sgn4(lattice[2u * idx + hf], v.y >> (4u * k));
//#endif
//#if IQ3_XXS
  return sgn4(lattice[(v.x >> (8u * k)) & 255u], ksign((v.y >> (7u * g)) & 127u) >> (4u * hf));
//#endif
//#if IQ3_S
  let idx = ((v.x >> (8u * k)) & 255u) | (((v.z >> k) & 1u) << 8u);
  return sgn4(lattice[idx], v.y >> (4u * k));
//#endif
}

// The scale of the block whose lattice_words are v, in a super-block of scale d.
fn lattice_scale(v: vec4<u32>, d: f32) -> f32 {
//#if IQ2_S
  return d * (0.5 + f32(v.z >> 4u)) * 0.25;
//#endif
//#if IQ3_XXS
  return d * (0.5 + f32(v.z)) * 0.5;
//#endif
//#if IQ3_S
  return d * f32(1u + 2u * (v.z >> 4u));
//#endif
//#if !IQ2_S
//#if !IQ3_XXS
//#if !IQ3_S
  return d * (0.5 + f32(v.z)) * 0.25;
//#endif
//#endif
//#endif
}
