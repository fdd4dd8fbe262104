// matmul_common: what both forms of the matmul share, pulled in with `//#include matmul_common` at
// the top of matmul_serial.wgsl and matmul_split_k.wgsl; not a kernel of its own. The
// forms compute y[m, n] = sum_k x[x_off + m, k] * W[n, k], with W packed in one weight format and
// dequantized in registers (never expanded in GPU memory), and optionally the layer's neighbours
// fused in; one template per form serves GEMV (TM = 1) and GEMM (TM = 2, 4 or 8 rows of x per
// tile). This snippet declares the bindings, the constants TPR, TM, R and WR (how the including
// form maps threads to outputs: see its header), a block's decoding per format, the fused norm's
// weight and the epilogue, and dot16, the one order every variant sums a block in.
//
// Bindings (group 0): 0 uniform Params; 1 w: array<WTYPE> (one part of the matrix: its flat
//   elements e = n * K + k from word 0, read as vec4<u32> for F32, F16 and INT8, and for the 2-,
//   4-, 5- and 6-bit codes in the WIDE variant (split-K; a unit of 2 to 8 blocks in 1 to 5 loads);
//   otherwise as vec2<u32> for NIBBLES, u32 for INT2 and PLANAR); 2 x: array<vec4<f32>> [rows, K]; 3 y: array<f32>
//   [M, N] (columns n_off .. n_off + n_rows written; read too with ADD); 4 scales: array<u32> (the
//   part's block metadata from word 0, integer formats); GAMMA_AT gamma: array<vec4<f32>> [K]
//   (NORM); GROUPS: GAMMA_AT route: array<u32> (the routing table of src/kernels/moe/table.ts).
//   Large matrices are dispatched per part; a part starts on a group pair / super-block (checked in
//   TS), so e indexes both arrays.
// Layouts (flat over e; see QuantizedMatrix in src/quant/formats.ts), per "block" of 16 elements
//   e .. e + 15 (e % 16 == 0, within one row, one group and one sub-block):
//   F32 16 words at e; F16 8 words at e / 2 (element 2j in the low half);
//   INT8 (Q8_0) 4 words at e / 4, byte e % 4, two's complement q; f16 d of group g = e >> 5 in
//     half g & 1 of scales[g >> 1]; w = d * q.
//   NIBBLES (Q4_0, Q4_1, INT4, IQ4_NL, IQ4_XS) 2 words at e / 8, nibble e % 8, q in [0, 15]; with
//     IQ4 the code is IQ4_VALUES[nibble] (src/quant/layout.ts; the int8 table in 4 words, IQ4_TABLE).
//   IQ4_NL: d as INT8; w = d * q. IQ4_XS: scales[2s], scales[2s + 1] per super-block s = e >> 8
//     (quant_scales.wgsl); w = d * (ls_j - 32) * q.
//   Q4_0: d as INT8; w = d * q - 8d. Q4_1: scales[e >> 5] = f16 d | f16 m << 16; w = d * q + m.
//   INT4 (Q4_K): super-block s = e >> 8 has scales[4s .. 4s + 3]: 6-bit sc_j at bit 6j and mn_j at
//     bit 6(8 + j) of the 96-bit little-endian words 0-2 (j = (e >> 5) & 7), word 3 = f16 D | f16
//     M << 16; w = a * q - b, a = D * sc_j, b = M * mn_j.
//   INT2 (Q2_K) 1 word at e / 16, bits 2 * (e % 16), q in [0, 3]; scales[5s .. 5s + 4]: byte j & 3
//     of word j >> 2 = sc_j | mn_j << 4 (j = (e >> 4) & 15), word 4 = f16 D | f16 M << 16;
//     w = a * q - b as INT4.
//   PLANAR (5-bit codes: Q5_0, Q5_1, Q5_K, LB = 4, HB = 1; 6-bit: Q6_K, LB = 4, HB = 2; 3-bit:
//     Q3_K, LB = 2, HB = 1), per chunk c = e >> 7 of 128 elements at word CW * c (CW = 4 (LB +
//     HB)): the low plane of 4 LB words (LB bits at bit LB * r, r = e & 127), then the high plane
//     (HB bits at bit HB * r of the 4 HB words), so a block is LB / 2 low words and 16 HB bits of
//     one high word; q = (low | high << LB) - BIAS (Q5_0: 16, Q6_K: 32, Q3_K: 4, else 0). Q5_0: d
//     as INT8, w = d * q; Q5_1: as Q4_1; Q5_K: as INT4; Q6_K: pair t of super-blocks s = e >> 8
//     in scales[9t .. 9t + 8], f16 d in half s & 1 of word 0, int8 sc_j in byte j & 3 of word 1 +
//     4 (s & 1) + (j >> 2) (j = (e >> 4) & 15); w = (d * sc_j) * q. Q3_K: pairs in scales[7t ..
//     7t + 6], 6-bit sub-scale fields (quant_scales.wgsl); w = (d * (sc_j - 32)) * q.
//   LATTICE (the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), 5 lattice: array<u32>
//     (the codebook): super-block s = e >> 8 at word DW * s, the GGUF block less its d (in half s &
//     1 of scales[s >> 1]); a block's indices, signs and sub-scale decoded by lattice.wgsl, w =
//     (d * sub-scale) * (+-magnitude), exact. Read a block (u32 words) at a time, U = 1.
//   Weights are dequantized in registers (w = fma(a, q, -b), exact as src/quant/formats.ts's
//   dequantize: a * q is exact, or b = 0 (Q6_K, whose a * q may round: once, as llama.cpp's), and
//   multiplied in f32. F16 weights are widened by unpack2x16float on every device (a variant that
//   bitcast the words to vec2<f16> gave wrong values under wgpu/naga on lavapipe, and the same
//   values as unpack2x16float elsewhere).
// Fusions (one of each side per variant):
//   NORM (prologue): x is the un-normed residual; the kernel multiplies W by
//     x[m, k] * inv_rms[m] * g[k] (g = gamma, or 1 + gamma with ONE_PLUS), inv_rms = 1 / sqrt(
//     sum_k x^2 / K + eps) computed by every workgroup exactly as rmsnorm.wgsl (64 threads, thread
//     t sums k = t, t + 64, ..., then reduce.wgsl's tree): the same bits as RmsNorm then Matmul.
//   ADD (epilogue): y[m, n] = y[m, n] + result, the add kernel's op (x += W·a).
//   GATED (epilogue): the part holds n_rows gate rows then n_rows up rows (a gated pair); output
//     y[m, n_off + n] = gate_act(g) * u as elementwise.wgsl computes it (gate_act.wgsl: silu, or
//     gelu_tanh with GELU), g = gate_n · x, u = up_n · x.
//   GROUPS (an expert stack, src/kernels/moe/experts.ts; neither fusion): the part holds whole
//     experts e0 .. e0 + experts - 1 of n_rows rows each (a gated expert: its n_rows gate rows, then
//     its n_rows up rows), expert e's matrix at flat element (e - e0) * stride. Workgroup z is a
//     group slot g of the routing table: slots past its route[0] groups and groups of an expert
//     outside the part return at once (uniform per workgroup); group g's count rows take M's place:
//     output row s = first + i (i < count, y of stride N, n_off = 0) multiplies x row
//     route[members + s] (gather: x holds the pass's token rows) or s (x holds the sorted rows).
// Threads: none of its own. TPR (threads per workgroup), TM (rows of x per tile) and R (output
//   columns per thread or row group; WR = R weight rows, 2R with GATED) are template values
//   (matmulVars in src/kernels/matmul/variant.ts); the including form's header says how it uses
//   them.
// Preconditions (checked in TS): K % 16 == 0, each part starts at a flat index that is a multiple
//   of splitAlign (formats.ts: 32 to 512, a whole block of codes and scales; with GATED, so does
//   its up half). The including form pulls it in before any declaration of its own.

{{PARAMS}}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<{{WTYPE}}>;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
//#if SCALES
@group(0) @binding(4) var<storage, read> scales: array<u32>;
//#endif
//#if LATTICE
@group(0) @binding(5) var<storage, read> lattice: array<u32>;
//#endif
//#if NORM
@group(0) @binding({{GAMMA_AT}}) var<storage, read> gamma: array<vec4<f32>>;
//#endif
//#if GROUPS
@group(0) @binding({{GAMMA_AT}}) var<storage, read> route: array<u32>;
//#endif

const TPR: u32 = {{TPR}}u;
// Rows of x per tile: the accumulators a thread holds per weight row.
const TM: u32 = {{TM}}u;
// Output columns per thread (serial) or per row group (split-K), and the weight rows behind them.
const R: u32 = {{R}}u;
//#if GATED
const WR: u32 = 2u * R;
//#else
const WR: u32 = R;
//#endif

// 16 weights (or 16 inputs) of one block.
struct Block {
  a: vec4<f32>,
  b: vec4<f32>,
  c: vec4<f32>,
  d: vec4<f32>,
}

fn i8x4(v: u32) -> vec4<f32> {
  return vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(v << 24u, v << 16u, v << 8u, v)) >> vec4<u32>(24u));
}

fn u4x4(v: u32, sh: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(v) >> (vec4<u32>(0u, 4u, 8u, 12u) + sh)) & vec4<u32>(15u));
}

fn u2x4(v: u32, sh: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(v) >> (vec4<u32>(0u, 2u, 4u, 6u) + sh)) & vec4<u32>(3u));
}

//#if IQ4
// The IQ4 value (an int8 of IQ4_TABLE) of nibble k.
fn iq4(k: u32) -> f32 {
  let t = vec4<u32>({{IQ4_TABLE}});
  return f32(bitcast<i32>(t[k >> 2u] << (24u - 8u * (k & 3u))) >> 24u);
}
//#endif

// Four codes of nibbles from bit sh of v: the nibbles, or with IQ4 their table values.
fn n4(v: u32, sh: u32) -> vec4<f32> {
//#if IQ4
  let k = (vec4<u32>(v) >> (vec4<u32>(0u, 4u, 8u, 12u) + sh)) & vec4<u32>(15u);
  return vec4<f32>(iq4(k.x), iq4(k.y), iq4(k.z), iq4(k.w));
//#else
  return u4x4(v, sh);
//#endif
}

// Four f16 weights of two words, widened to f32.
fn h4(a: u32, b: u32) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
}

//#include quant_scales

// Four codes q on the grid a * q - b (one rounding: a * q is exact).
fn deq(q: vec4<f32>, ab: vec2<f32>) -> vec4<f32> {
  return fma(q, vec4<f32>(ab.x), vec4<f32>(-ab.y));
}

// The 16 weights of an F16 block in words h0, h1.
fn f16_block(h0: vec4<u32>, h1: vec4<u32>) -> Block {
  return Block(h4(h0.x, h0.y), h4(h0.z, h0.w), h4(h1.x, h1.y), h4(h1.z, h1.w));
}

// The 16 weights of an INT8 block of codes v on grid ab.
fn int8_block(v: vec4<u32>, ab: vec2<f32>) -> Block {
  return Block(deq(i8x4(v.x), ab), deq(i8x4(v.y), ab), deq(i8x4(v.z), ab), deq(i8x4(v.w), ab));
}

//#if NIBBLES
// The 16 weights of a block of nibble codes (words lo, hi) on grid ab.
fn nibble_block(lo: u32, hi: u32, ab: vec2<f32>) -> Block {
  return Block(deq(n4(lo, 0u), ab), deq(n4(lo, 16u), ab), deq(n4(hi, 0u), ab), deq(n4(hi, 16u), ab));
}
//#endif
//#if INT2
// The 16 weights of a block of 2-bit codes (word c) on grid ab.
fn int2_block(c: u32, ab: vec2<f32>) -> Block {
  return Block(deq(u2x4(c, 0u), ab), deq(u2x4(c, 8u), ab), deq(u2x4(c, 16u), ab), deq(u2x4(c, 24u), ab));
}
//#endif
//#if PLANAR
// Low and high bits per code, words per chunk of 128 codes (LW of them the low plane); the bias of
// the stored codes.
const LB: u32 = {{LB}}u;
const HB: u32 = {{HB}}u;
const LW: u32 = 4u * LB;
const CW: u32 = 4u * (LB + HB);
const BIAS: i32 = {{BIAS}};

// Four codes minus BIAS: LB low bits each from bit sh of lo, HB high bits each from bit hs of hi.
fn p4(lo: u32, sh: u32, hi: u32, hs: u32) -> vec4<f32> {
  let l = (vec4<u32>(lo) >> (vec4<u32>(0u, 1u, 2u, 3u) * LB + sh)) & vec4<u32>((1u << LB) - 1u);
  let h = (vec4<u32>(hi) >> (vec4<u32>(0u, 1u, 2u, 3u) * HB + hs)) & vec4<u32>((1u << HB) - 1u);
  return vec4<f32>(vec4<i32>(l | (h << vec4<u32>(LB))) - vec4<i32>(BIAS));
}

// The 16 weights of a planar block: its low words lo0, lo1 (LB = 4: 8 codes each; LB = 2: lo0
// holds all 16) and its 16 HB high bits from bit 0 of hi, on grid ab. Quad k of 4 codes starts at
// bit 4 LB k of the low words.
fn planar_block(lo0: u32, lo1: u32, hi: u32, ab: vec2<f32>) -> Block {
  let q = 4u * LB;
  return Block(deq(p4(lo0, 0u, hi, 0u), ab), deq(p4(select(lo0, lo1, q >= 32u), q & 31u, hi, 4u * HB), ab), deq(p4(select(lo0, lo1, 2u * q >= 32u), (2u * q) & 31u, hi, 8u * HB), ab), deq(p4(select(lo0, lo1, 3u * q >= 32u), (3u * q) & 31u, hi, 12u * HB), ab));
}

//#if !WIDE
// The block at flat element e (e % 16 == 0) of a planar part read as u32s: (low word 0, low word 1
// (LB = 2: word 0 again), its high bits shifted to bit 0).
fn planar_words(e: u32) -> vec3<u32> {
  let base = (e >> 7u) * CW;
  let r = e & 127u;
  let lo = base + ((r * LB) >> 5u);
  return vec3<u32>(w[lo], w[lo + LB / 4u], w[base + LW + ((r * HB) >> 5u)] >> ((r * HB) & 31u));
}
//#endif
//#endif

//#if LATTICE
fn code_word(i: u32) -> u32 {
  return w[i];
}

//#include lattice

// The 16 weights of the lattice block whose lattice_words are v, in a super-block of scale d.
fn lattice_block(v: vec4<u32>, d: f32) -> Block {
  let ab = vec2<f32>(lattice_scale(v, d), 0.0);
  return Block(deq(lattice_quad(v, 0u), ab), deq(lattice_quad(v, 1u), ab), deq(lattice_quad(v, 2u), ab), deq(lattice_quad(v, 3u), ab));
}
//#endif

//#if NORM
fn norm_weight(j: u32) -> vec4<f32> {
//#if ONE_PLUS
  return 1.0 + gamma[j];
//#else
  return gamma[j];
//#endif
}
//#endif

//#if GATED
//#include gate_act
//#endif

//#if GROUPS
// Group slot g of the routing table as this part runs it: its first output row, its rows, and the
// flat element its expert's matrix starts at; no rows past the table's groups or for an expert
// of another part.
struct Group {
  first: u32,
  count: u32,
  base: u32,
}

fn route_group(g: u32) -> Group {
  if (g >= route[0]) {
    return Group(0u, 0u, 0u);
  }
  let at = p.groups + 4u * g;
  let e = route[at];
  if (e < p.e0 || e >= p.e0 + p.experts) {
    return Group(0u, 0u, 0u);
  }
  return Group(route[at + 1u], route[at + 2u], (e - p.e0) * p.stride);
}
//#endif

// The row of x that output row `at` multiplies (GROUPS: `at` is a sorted position).
fn x_row(at: u32) -> u32 {
//#if GROUPS
  if (p.gather != 0u) {
    return route[p.members + at];
  }
  return at;
//#else
  return p.x_off + at;
//#endif
}

// The epilogue: writes output `at` from its sum s (GATED: the gate's, u the up row's).
fn store_out(at: u32, s: f32, u: f32) {
//#if GATED
  y[at] = gate_act(s) * u;
//#else
//#if ADD
  y[at] = y[at] + s;
//#else
  y[at] = s;
//#endif
//#endif
}

fn dot4(a: vec4<f32>, b: vec4<f32>, c: f32) -> f32 {
  return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, c))));
}

// One block's contribution to one output: the fixed order every variant uses.
fn dot16(wb: Block, xb: Block) -> f32 {
  return dot4(wb.d, xb.d, dot4(wb.c, xb.c, dot4(wb.b, xb.b, dot4(wb.a, xb.a, 0.0))));
}
