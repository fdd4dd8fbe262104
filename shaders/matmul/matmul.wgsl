// matmul: y[m, n] = sum_k x[x_off + m, k] * W[n, k], with W packed in one weight format and
// dequantized in registers (never expanded in GPU memory), and optionally the layer's neighbours
// fused in. One template serves GEMV (TM = 1) and GEMM (TM = 2, 4 or 8 rows of x per tile).
//
// Bindings (group 0): 0 uniform Params; 1 w: array<WTYPE> (one part of the matrix: its flat
//   elements e = n * K + k from word 0, read as vec4<u32> for F32, F16 and INT8, and for the 2-,
//   4-, 5- and 6-bit codes in the WIDE variant (split-K; a unit of 2 to 8 blocks in 1 to 5 loads);
//   otherwise as vec2<u32> for NIBBLES, u32 for INT2 and PLANAR); 2 x: array<vec4<f32>> [rows, K]; 3 y: array<f32>
//   [M, N] (columns n_off .. n_off + n_rows written; read too with ADD); 4 scales: array<u32> (the
//   part's block metadata from word 0, integer formats); GAMMA_AT gamma: array<vec4<f32>> [K]
//   (NORM).
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
//   multiplied in f32. HALF (device with shader-f16, F16 weights): the halves are read as f16 and
//   widened, the same values as unpack2x16float.
// Fusions (one of each side per variant):
//   NORM (prologue): x is the un-normed residual; the kernel multiplies W by
//     x[m, k] * inv_rms[m] * g[k] (g = gamma, or 1 + gamma with ONE_PLUS), inv_rms = 1 / sqrt(
//     sum_k x^2 / K + eps) computed by every workgroup exactly as rmsnorm.wgsl (64 threads, thread
//     t sums k = t, t + 64, ..., then reduce.wgsl's tree): the same bits as RmsNorm then Matmul.
//   ADD (epilogue): y[m, n] = y[m, n] + result, the add kernel's op (x += W·a).
//   GATED (epilogue): the part holds n_rows gate rows then n_rows up rows (a gated pair); output
//     y[m, n_off + n] = gate_act(g) * u as elementwise.wgsl computes it (gate_act.wgsl: silu, or
//     gelu_tanh with GELU), g = gate_n · x, u = up_n · x.
// Layouts: SERIAL (software adapters: one thread per output column group, all of K; see its main
//   below) or split-K (GPUs), described here.
// Threads: a workgroup of TPR = 64 threads computes the RG * R = COLS output columns n0 .. n0 +
//   COLS - 1 of the part (n0 = COLS * flat workgroup index wid.y * nwg.x + wid.x). Thread t is lane
//   t % KL of row group t / KL (KL = p.lanes lanes per output, a power of two from 4 to 64 chosen
//   per matrix by the TS side, RG = 64 / KL groups); group g owns columns n0 + g * R .. + R - 1,
//   i.e. WR = R weight rows (2R with GATED: gate rows then up rows). R = 1 in the GEMV, 2 in the
//   tiles.
// K walk: K is cut into units of U consecutive 16-element blocks, the blocks UV 16-byte loads read
//   (U = 1, one block of UV loads: 4 for F32, 2 for F16, 1 for INT8 and the narrow NIBBLES /
//   INT2 / PLANAR reads of 8, 4 or 12 bytes; WIDE: U = 2 for NIBBLES, 4 for INT2, one vec4 of codes
//   each; U = 8 (a chunk) for 5-bit PLANAR in 4 + 1 loads and for Q3_K in 2 + 1, U = 4 (half a
//   chunk) for Q6_K in 2 + 1: the low vec4s, then the high one). Lane l owns the units
//   l, l + KL, l + 2 KL, ... of K and takes them UT at a time (a trip): it first loads every code
//   word and grid word of the trip's units for its WR rows (UT * WR * UV loads of 16 bytes, issued
//   before any is used: the bytes a thread has in flight), then for each unit in increasing order
//   and each of its blocks in order adds acc = acc + dot16(block, x block) per output, reading x
//   (f32, L1/L2-resident) straight from its buffer. Then the KL lane sums of an output are added in
//   lane order by one thread (workgroup memory). That order depends on neither M, nor the tile, nor
//   UT, nor COLS, nor the subgroup size, so a row's result is bit-identical in a GEMV and in any
//   GEMM batch (explicit fma keeps compilers from contracting differently).
// Tiles: the M rows of x are taken TM at a time (the last tile may be short); each weight block is
//   loaded once per tile and multiplied by the TM rows: WR * TM accumulators per thread.
// Preconditions (checked in TS): K % 16 == 0, each part starts at a flat index that is a multiple
//   of splitAlign (formats.ts: 32 to 512, a whole block of codes and scales; with GATED, so does
//   its up half); WIDE: K % (16 U) == 0, so every unit's loads are aligned vec4<u32>s of one row.
//#if HALF
enable f16;
//#endif

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
//#if HALF
  return vec4<f32>(vec4<f16>(bitcast<vec2<f16>>(a), bitcast<vec2<f16>>(b)));
//#else
  return vec4<f32>(unpack2x16float(a), unpack2x16float(b));
//#endif
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

//#if SERIAL
//#if SCALES
// The 16 weights of the block at flat element e of the part, on its grid ab = grid_at(e) (the
// serial form reuses a grid over the blocks of one group).
fn load_codes(e: u32, ab: vec2<f32>) -> Block {
//#if INT8
  return int8_block(w[e / 16u], ab);
//#endif
//#if NIBBLES
  let v = w[e / 16u];
  return nibble_block(v.x, v.y, ab);
//#endif
//#if INT2
  return int2_block(w[e / 16u], ab);
//#endif
//#if PLANAR
  let v = planar_words(e);
  return planar_block(v.x, v.y, v.z, ab);
//#endif
//#if LATTICE
  return lattice_block(lattice_words(e), ab.x);
//#endif
}
//#endif

// The 16 weights of the block at flat element e of the part.
fn load_block(e: u32) -> Block {
//#if F32
  let i = e / 4u;
  return Block(bitcast<vec4<f32>>(w[i]), bitcast<vec4<f32>>(w[i + 1u]), bitcast<vec4<f32>>(w[i + 2u]), bitcast<vec4<f32>>(w[i + 3u]));
//#endif
//#if F16
  return f16_block(w[e / 8u], w[e / 8u + 1u]);
//#endif
//#if SCALES
  return load_codes(e, grid_at(e));
//#endif
}

//#if NORM
// x[i] * x[i] (the vec4 at i), or 0 past `end`: adding it leaves a sum of squares unchanged.
fn sq(i: u32, end: u32) -> vec4<f32> {
  if (i < end) {
    let v = x[i];
    return v * v;
  }
  return vec4<f32>(0.0);
}

// rmsnorm.wgsl's scale 1 / sqrt(mean(x^2) + eps) of row `row` of x, by one thread in the same sum
// order and ops: its 64 threads' partial sums s_t = x_t^2 + x_{t+64}^2 + ... (here the 16 vec4s
// s0 .. s15, component c of s_j being s_{4j+c}), then reduce.wgsl's tree over them (halving: 32,
// 16, ..., 1).
fn row_inv_rms(row: u32) -> f32 {
  let kv = p.K / 4u;
  let b = (p.x_off + row) * kv;
  let end = b + kv;
  var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
  var s4 = vec4<f32>(0.0); var s5 = vec4<f32>(0.0); var s6 = vec4<f32>(0.0); var s7 = vec4<f32>(0.0);
  var s8 = vec4<f32>(0.0); var s9 = vec4<f32>(0.0); var s10 = vec4<f32>(0.0); var s11 = vec4<f32>(0.0);
  var s12 = vec4<f32>(0.0); var s13 = vec4<f32>(0.0); var s14 = vec4<f32>(0.0); var s15 = vec4<f32>(0.0);
  for (var i = b; i < end; i += 16u) {
    s0 += sq(i, end); s1 += sq(i + 1u, end); s2 += sq(i + 2u, end); s3 += sq(i + 3u, end);
    s4 += sq(i + 4u, end); s5 += sq(i + 5u, end); s6 += sq(i + 6u, end); s7 += sq(i + 7u, end);
    s8 += sq(i + 8u, end); s9 += sq(i + 9u, end); s10 += sq(i + 10u, end); s11 += sq(i + 11u, end);
    s12 += sq(i + 12u, end); s13 += sq(i + 13u, end); s14 += sq(i + 14u, end); s15 += sq(i + 15u, end);
  }
  s0 += s8; s1 += s9; s2 += s10; s3 += s11; s4 += s12; s5 += s13; s6 += s14; s7 += s15;
  s0 += s4; s1 += s5; s2 += s6; s3 += s7;
  s0 += s2; s1 += s3;
  s0 += s1;
  let h = s0.xy + s0.zw;
  return 1.0 / sqrt((h.x + h.y) / f32(p.K) + p.eps);
}
//#endif

// Serial form (software adapters; see GpuContext.kernels): thread t of a workgroup computes the
// R output columns c0 .. c0 + R - 1 (c0 = (flat workgroup index * TPR + t) * R) for TM rows of x
// at a time, walking every block of K itself in increasing order: acc = acc + dot16(block) per
// output. No workgroup memory and no barrier (a CPU implementation pays microseconds per barrier
// and ~100 us per workgroup for zeroing workgroup memory); x is read straight from its buffer.
// The loops over columns and tile rows are unrolled (//#for) into named scalars, as a CPU
// implementation keeps an indexed local array in memory: accumulators a{c}_{m} (column c, tile
// row m; u{c}_{m} for a gated pair's up rows), weight-row starts e{c} (eu{c}), tile rows xr{m}.
// With a grid per group of 32 (GROUPED: int8, q4_0, int4) a row's grid is computed at the group's
// first block and kept; the GEMV of such a K % 32 == 0 matrix (PAIRS) walks a group per trip, its
// grid once, then its two blocks. The order depends on neither M nor the tile, so rows are
// bit-identical whatever M is, as in the split-K layout below (whose sums differ from these). Tile
// rows past M read row M - 1 and are neither summed nor written.
@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let c0 = ((wid.y * nwg.x + wid.x) * TPR + t) * R;
  if (c0 >= p.n_rows) {
    return;
  }
  let nblk = p.K / 16u;
  let kv = p.K / 4u;
  let last = p.n_rows - 1u;
  // First flat element of each column's weight row (columns past the part repeat its last row).
//#for c < R
  let e{{c}} = min(c0 + {{c}}u, last) * p.K;
//#if GATED
  let eu{{c}} = (min(c0 + {{c}}u, last) + p.n_rows) * p.K;
//#endif
//#endfor
  for (var m0 = 0u; m0 < p.M; m0 += TM) {
    let tr = min(TM, p.M - m0);
//#for m < TM
    let xr{{m}} = (p.x_off + min(m0 + {{m}}u, p.M - 1u)) * kv;
//#endfor
//#if NORM
    // One call site in a loop, not one per tile row: each inlined copy of row_inv_rms's unrolled
    // sum costs SwiftShader's compiler about as much as the rest of the kernel (TM = 8: 2.6 s).
    var invs: array<f32, TM>;
    for (var m = 0u; m < TM; m++) {
      invs[m] = row_inv_rms(min(m0 + m, p.M - 1u));
    }
//#for m < TM
    let inv{{m}} = vec4<f32>(invs[{{m}}]);
//#endfor
//#endif
//#for c < R
//#for m < TM
    var a{{c}}_{{m}} = 0.0;
//#if GATED
    var u{{c}}_{{m}} = 0.0;
//#endif
//#endfor
//#if GROUPED
    var ab{{c}} = vec2<f32>(0.0);
//#if GATED
    var abu{{c}} = vec2<f32>(0.0);
//#endif
//#endif
//#endfor
//#if PAIRS
    for (var blk = 0u; blk < nblk; blk += 2u) {
//#else
    for (var blk = 0u; blk < nblk; blk += 1u) {
//#endif
      let j = blk * 4u;
//#if NORM
//#for q < 4
      let g{{q}} = norm_weight(j + {{q}}u);
//#endfor
//#if PAIRS
//#for q < 4
      let h{{q}} = norm_weight(j + {{q}}u + 4u);
//#endfor
//#endif
//#endif
//#for c < R
//#if PAIRS
      let f{{c}} = e{{c}} + blk * 16u;
      let ab{{c}} = grid_at(f{{c}});
      let w{{c}} = load_codes(f{{c}}, ab{{c}});
      let v{{c}} = load_codes(f{{c}} + 16u, ab{{c}});
//#if GATED
      let fu{{c}} = eu{{c}} + blk * 16u;
      let abu{{c}} = grid_at(fu{{c}});
      let wu{{c}} = load_codes(fu{{c}}, abu{{c}});
      let vu{{c}} = load_codes(fu{{c}} + 16u, abu{{c}});
//#endif
//#else
//#if GROUPED
      let f{{c}} = e{{c}} + blk * 16u;
      if (blk == 0u || (f{{c}} & 31u) == 0u) {
        ab{{c}} = grid_at(f{{c}});
      }
      let w{{c}} = load_codes(f{{c}}, ab{{c}});
//#if GATED
      let fu{{c}} = eu{{c}} + blk * 16u;
      if (blk == 0u || (fu{{c}} & 31u) == 0u) {
        abu{{c}} = grid_at(fu{{c}});
      }
      let wu{{c}} = load_codes(fu{{c}}, abu{{c}});
//#endif
//#else
      let w{{c}} = load_block(e{{c}} + blk * 16u);
//#if GATED
      let wu{{c}} = load_block(eu{{c}} + blk * 16u);
//#endif
//#endif
//#endif
//#endfor
//#for m < TM
      if ({{m}}u == 0u || tr > {{m}}u) {
//#if NORM
        let x{{m}} = Block(x[xr{{m}} + j] * inv{{m}} * g0, x[xr{{m}} + j + 1u] * inv{{m}} * g1, x[xr{{m}} + j + 2u] * inv{{m}} * g2, x[xr{{m}} + j + 3u] * inv{{m}} * g3);
//#else
        let x{{m}} = Block(x[xr{{m}} + j], x[xr{{m}} + j + 1u], x[xr{{m}} + j + 2u], x[xr{{m}} + j + 3u]);
//#endif
//#for c < R
        a{{c}}_{{m}} = a{{c}}_{{m}} + dot16(w{{c}}, x{{m}});
//#if GATED
        u{{c}}_{{m}} = u{{c}}_{{m}} + dot16(wu{{c}}, x{{m}});
//#endif
//#endfor
//#if PAIRS
//#if NORM
        let y{{m}} = Block(x[xr{{m}} + j + 4u] * inv{{m}} * h0, x[xr{{m}} + j + 5u] * inv{{m}} * h1, x[xr{{m}} + j + 6u] * inv{{m}} * h2, x[xr{{m}} + j + 7u] * inv{{m}} * h3);
//#else
        let y{{m}} = Block(x[xr{{m}} + j + 4u], x[xr{{m}} + j + 5u], x[xr{{m}} + j + 6u], x[xr{{m}} + j + 7u]);
//#endif
//#for c < R
        a{{c}}_{{m}} = a{{c}}_{{m}} + dot16(v{{c}}, y{{m}});
//#if GATED
        u{{c}}_{{m}} = u{{c}}_{{m}} + dot16(vu{{c}}, y{{m}});
//#endif
//#endfor
//#endif
      }
//#endfor
    }
//#for c < R
    if ({{c}}u == 0u || c0 + {{c}}u < p.n_rows) {
//#for m < TM
      if ({{m}}u == 0u || tr > {{m}}u) {
        let at = (m0 + {{m}}u) * p.N + p.n_off + c0 + {{c}}u;
//#if GATED
        store_out(at, a{{c}}_{{m}}, u{{c}}_{{m}});
//#else
        store_out(at, a{{c}}_{{m}}, 0.0);
//#endif
      }
//#endfor
    }
//#endfor
  }
}
//#else
// Blocks per unit, 16-byte code loads per unit, units per trip; code and grid words of a trip.
const U: u32 = {{U}}u;
const UV: u32 = {{UV}}u;
const UT: u32 = {{UT}}u;
const NC: u32 = WR * UT * UV;
const NS: u32 = WR * UT;

// Load v (< UV) of the codes of the unit whose first block is at flat element e.
fn unit_word(e: u32, v: u32) -> vec4<u32> {
//#if F32
  return w[e / 4u + v];
//#endif
//#if F16
  return w[e / 8u + v];
//#endif
//#if INT8
  return w[e / 16u];
//#endif
//#if NIBBLES
//#if WIDE
  return w[e / 32u];
//#else
  return vec4<u32>(w[e / 16u], 0u, 0u);
//#endif
//#endif
//#if INT2
//#if WIDE
  return w[e / 64u];
//#else
  return vec4<u32>(w[e / 16u], 0u, 0u, 0u);
//#endif
//#endif
//#if PLANAR
//#if WIDE
  // The unit's U LB / 8 low vec4s, then the vec4 of the high planes that holds its bits.
  let at = (e >> 7u) * (CW / 4u);
  let r = e & 127u;
  if (v < U * LB / 8u) {
    return w[at + ((r * LB) >> 7u) + v];
  }
  return w[at + LB + ((r * HB) >> 7u)];
//#else
  return vec4<u32>(planar_words(e), 0u);
//#endif
//#endif
//#if LATTICE
  return lattice_words(e);
//#endif
}

// Block b (< U) of the unit whose code loads start at c[at], on grid ab (integer formats).
fn unit_block(c: ptr<function, array<vec4<u32>, NC>>, at: u32, b: u32, ab: vec2<f32>) -> Block {
//#if F32
  return Block(bitcast<vec4<f32>>((*c)[at]), bitcast<vec4<f32>>((*c)[at + 1u]), bitcast<vec4<f32>>((*c)[at + 2u]), bitcast<vec4<f32>>((*c)[at + 3u]));
//#endif
//#if F16
  return f16_block((*c)[at], (*c)[at + 1u]);
//#endif
//#if INT8
  return int8_block((*c)[at], ab);
//#endif
//#if NIBBLES
  let v = (*c)[at];
  return nibble_block(v[2u * b], v[2u * b + 1u], ab);
//#endif
//#if INT2
  return int2_block((*c)[at][b], ab);
//#endif
//#if PLANAR
//#if WIDE
  // Block b's low words: word (LB b / 2) % 4 of low vec4 LB b / 8 (and the next, LB = 4).
  let lo = (*c)[at + (b * LB) / 8u];
  let i = ((b * LB) / 2u) & 3u;
  let hi = (*c)[at + U * LB / 8u][(b * HB) >> 1u] >> ((16u * b * HB) & 31u);
  return planar_block(lo[i], lo[min(i + 1u, 3u)], hi, ab);
//#else
  let v = (*c)[at];
  return planar_block(v.x, v.y, v.z, ab);
//#endif
//#endif
//#if LATTICE
  return lattice_block((*c)[at], ab.x);
//#endif
}

//#if NORM
// Each tile row's inv_rms (NORM).
var<workgroup> inv_rms: array<f32, TM>;
var<workgroup> ss_scratch: array<f32, TM * TPR>;

// rmsnorm.wgsl's scale 1 / sqrt(mean(x^2) + eps) of rows m0 .. m0 + TM - 1 of x (rows past M: 1):
// thread t sums k = t, t + 64, ..., then reduce.wgsl's tree, the same sum order and ops, run for
// the TM rows side by side.
fn tile_inv_rms(m0: u32, t: u32) {
  for (var m = 0u; m < TM; m++) {
    var ss = 0.0;
    if (m0 + m < p.M) {
      let base = (p.x_off + m0 + m) * p.K;
      for (var i = t; i < p.K; i += TPR) {
        let v = x[(base + i) / 4u][i % 4u];
        ss += v * v;
      }
    }
    ss_scratch[m * TPR + t] = ss;
  }
  for (var s = TPR / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      for (var m = 0u; m < TM; m++) {
        ss_scratch[m * TPR + t] += ss_scratch[m * TPR + t + s];
      }
    }
  }
  workgroupBarrier();
  if (t < TM) {
    inv_rms[t] = 1.0 / sqrt(ss_scratch[t * TPR] / f32(p.K) + p.eps);
  }
  workgroupBarrier();
}
//#endif

// The 16 inputs of block blk of tile row m (NORM: x * inv_rms * g, rmsnorm's op order).
fn x_block(row: u32, m: u32, blk: u32) -> Block {
  let i = row * (p.K / 4u) + blk * 4u;
//#if NORM
  let s = vec4<f32>(inv_rms[m]);
  let j = blk * 4u;
  return Block(x[i] * s * norm_weight(j), x[i + 1u] * s * norm_weight(j + 1u), x[i + 2u] * s * norm_weight(j + 2u), x[i + 3u] * s * norm_weight(j + 3u));
//#else
  return Block(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
//#endif
}

// Lane sums of accumulator a = r * TM + m of row group g: red[((g * WR + r) * TM + m) * KL + lane]
// (RG * KL = TPR whatever KL is).
var<workgroup> red: array<f32, TPR * WR * TM>;

@compute @workgroup_size(TPR)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  // Lanes per output (a uniform: one pipeline serves every matrix of a format), row groups, and
  // the output columns n0 .. n0 + COLS - 1 of the part; past-the-end workgroups exit together.
  let KL = p.lanes;
  let COLS = (TPR / KL) * R;
  let n0 = (wid.y * nwg.x + wid.x) * COLS;
  if (n0 >= p.n_rows) {
    return;
  }
  let lane = t % KL;
  let g = t / KL;
  let units = p.K / (16u * U);
  // First flat element of weight row r (rows past the part repeat its last row; not written).
  var row_e: array<u32, WR>;
  for (var r = 0u; r < WR; r++) {
    let n = min(n0 + g * R + r % R, p.n_rows - 1u) + (r / R) * p.n_rows;
    row_e[r] = n * p.K;
  }
  for (var m0 = 0u; m0 < p.M; m0 += TM) {
//#if NORM
    tile_inv_rms(m0, t);
//#endif
    var acc = array<f32, WR * TM>();
    // Rows of this tile within M (the last tile may be short; its other rows are not computed).
    let tr = min(TM, p.M - m0);
    for (var i0 = 0u; i0 * KL + lane < units; i0 += UT) {
      // The trip's loads first: every code word and grid word of its units, for every weight row
      // (a unit past the end reloads the last one, which is not summed).
      var c: array<vec4<u32>, NC>;
//#if SCALES
      var sw: array<vec4<u32>, NS>;
//#endif
      for (var s = 0u; s < UT; s++) {
        let u = min((i0 + s) * KL + lane, units - 1u);
        for (var r = 0u; r < WR; r++) {
          let e = row_e[r] + u * U * 16u;
          for (var v = 0u; v < UV; v++) {
            c[(r * UT + s) * UV + v] = unit_word(e, v);
          }
//#if SCALES
          sw[r * UT + s] = scale_words(e);
//#endif
        }
      }
      // Then the units in increasing order, a unit's blocks in order.
      for (var s = 0u; s < UT; s++) {
        let u = (i0 + s) * KL + lane;
        if (u < units) {
          for (var b = 0u; b < U; b++) {
            let blk = u * U + b;
            for (var r = 0u; r < WR; r++) {
              var ab = vec2<f32>(0.0);
//#if SCALES
              ab = grid_of(sw[r * UT + s], row_e[r] + blk * 16u);
//#endif
              let wb = unit_block(&c, (r * UT + s) * UV, b, ab);
              for (var m = 0u; m < tr; m++) {
                acc[r * TM + m] = acc[r * TM + m] + dot16(wb, x_block(p.x_off + m0 + m, m, blk));
              }
            }
          }
        }
      }
    }
    for (var a = 0u; a < WR * TM; a++) {
      red[(g * WR * TM + a) * KL + lane] = acc[a];
    }
    workgroupBarrier();
    // Output o = c * TM + m (column c, tile row m): its KL lane sums added in lane order.
    for (var o = t; o < COLS * TM; o += TPR) {
      let c = o / TM;
      let m = o % TM;
      let gc = c / R;
      let at0 = ((gc * WR + c % R) * TM + m) * KL;
      var sum = 0.0;
      for (var l = 0u; l < KL; l++) {
        sum += red[at0 + l];
      }
      if (n0 + c < p.n_rows && m0 + m < p.M) {
        let at = (m0 + m) * p.N + p.n_off + n0 + c;
        var u = 0.0;
//#if GATED
        for (var l = 0u; l < KL; l++) {
          u += red[at0 + R * TM * KL + l];
        }
//#endif
        store_out(at, sum, u);
      }
    }
    workgroupBarrier(); // every sum is read before the next tile writes red
  }
}
//#endif
