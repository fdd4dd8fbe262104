// embed: out[m, :] = row ids[m] of an embedding table [V, n] in any weight format of
// src/quant/formats.ts, dequantized exactly as its `dequantize` does (bit-identical), times the
// f32 p.scale when the variant is SCALE (Gemma 3: sqrt(hidden); without, the values as they are). The
// table is resident as a GpuMatrix (src/kernels/matmul/matrix.ts), split by rows into parts; one
// dispatch per part writes the outputs whose id falls in rows [row0, row0 + rows) of that part.
//
// Part layout (flat: local row v = id - row0, column j, element e = v * n + j; each part's data
//   and scales start at its element 0, see src/quant/formats.ts's QuantizedMatrix):
//   F32: data[e] holds the f32 bits. F16: element e in the low (e even) or high half of data[e / 2].
//   INT8 (Q8_0): byte e % 4 of data[e / 4], two's complement q. NIBBLES (Q4_0, Q4_1, INT4, IQ4_NL,
//   IQ4_XS): nibble e % 8 of data[e / 8], q in [0, 15] (IQ4: the table value of the nibble). INT2
//   (Q2_K): bits 2 * (e % 16) of data[e / 16], q in [0, 3]. PLANAR (Q5_0, Q5_1, Q5_K: LB = 4, HB =
//   1; Q6_K: LB = 4, HB = 2; Q3_K: LB = 2, HB = 1): chunk c = e >> 7 at word 4 (LB + HB) c, r = e &
//   127: LB bits at bit LB r of the low plane, then HB bits at bit HB r of the high plane (word 4 LB
//   + HB r / 32); q = (low | high << LB) - BIAS.
//   Scales (f16 d per 32; K-quant super-blocks of 256): grid_at(e) = (a, b) of quant_scales.wgsl,
//   and w = fma(a, q, -b) (a * q is exact, or b = 0: formats.ts's fround(a * q - b)).
// Bindings (group 0): 0 uniform Params { M, n, row0, rows, scale }; 1 ids: array<u32> [M];
//   2 out: array<f32> [M, n] (written where the id is in this part); 3 data: array<u32>;
//   4 scales: array<u32> (integer formats); 5 lattice: array<u32> (the lattice i-quants' codebook,
//   decoded by lattice.wgsl a block of 16 at a time).
// Threads: one invocation per output element, flat index over the grid.
// Preconditions: ids < V (an id in no part leaves its output row unwritten).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> data: array<u32>;
//#if SCALED
@group(0) @binding(4) var<storage, read> scales: array<u32>;
//#endif
//#if LATTICE
@group(0) @binding(5) var<storage, read> lattice: array<u32>;

fn code_word(i: u32) -> u32 {
  return data[i];
}

//#include lattice
//#endif

//#include quant_scales

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
  if (i >= p.M * p.n) {
    return;
  }
  let id = ids[i / p.n];
  let j = i % p.n;
  if (id < p.row0 || id - p.row0 >= p.rows) {
    return;
  }
  let e = (id - p.row0) * p.n + j;
//#if F32
  let v = bitcast<f32>(data[e]);
//#endif
//#if F16
  let v = unpack2x16float(data[e / 2u])[e % 2u];
//#endif
//#if INT8
  let q = f32(bitcast<i32>(data[e / 4u] << (24u - 8u * (e % 4u))) >> 24u);
//#endif
//#if NIBBLES
  let k = (data[e / 8u] >> (4u * (e % 8u))) & 15u;
//#if IQ4
  // The IQ4 value of nibble k (int8s of IQ4_TABLE).
  let t = vec4<u32>({{IQ4_TABLE}});
  let q = f32(bitcast<i32>(t[k >> 2u] << (24u - 8u * (k & 3u))) >> 24u);
//#else
  let q = f32(k);
//#endif
//#endif
//#if INT2
  let q = f32((data[e / 16u] >> (2u * (e % 16u))) & 3u);
//#endif
//#if PLANAR
  let lb = {{LB}}u;
  let hb = {{HB}}u;
  let base = (e >> 7u) * 4u * (lb + hb);
  let r = e & 127u;
  let lo = (data[base + (lb * r) / 32u] >> ((lb * r) % 32u)) & ((1u << lb) - 1u);
  let hi = (data[base + 4u * lb + (hb * r) / 32u] >> ((hb * r) % 32u)) & ((1u << hb) - 1u);
  let q = f32(i32(lo | (hi << lb)) - {{BIAS}});
//#endif
//#if LATTICE
  // Weight e & 15 of its block: the block's quad (e & 15) >> 2, on the block's scale.
  let lv = lattice_words(e & ~15u);
  let q = lattice_quad(lv, (e & 15u) >> 2u)[e & 3u];
  let ab = vec2<f32>(lattice_scale(lv, grid_at(e).x), 0.0);
//#else
//#if SCALED
  let ab = grid_at(e);
//#endif
//#endif
//#if SCALED
  let v = fma(ab.x, q, -ab.y);
//#endif
//#if SCALE
  out[i] = v * p.scale;
//#else
  out[i] = v;
//#endif
}
