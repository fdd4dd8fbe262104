// embed: out[m, :] = row ids[m] of an embedding table [V, n] in any weight format of
// src/kernels/matmul/quant.ts, dequantized exactly as its `dequantize` does (bit-identical). The
// table is resident as a GpuMatrix (src/kernels/matmul/matmul.ts), split by rows into parts; one
// dispatch per part writes the outputs whose id falls in rows [row0, row0 + rows) of that part.
//
// Part layout (rows padded to whole u32 words, wpr words per row, G = n / group groups per row,
//   local row v = id - row0):
//   F32: data[v * wpr + j] holds the f32 bits. F16: element j in the low (j even) or high half of
//   word j / 2. INT8: 4 per word, element j at bits 8 * (j % 4), two's complement, w = q * scale.
//   INT4 / INT2 (BITS = 4 / 2): 32 / BITS per word at bits BITS * (j % (32 / BITS)), unsigned,
//   w = (q - zero) * scale. scale / zero of (v, j) at v * G + j / group.
// Bindings (group 0): 0 uniform Params { M, n, row0, rows, wpr, group, G }; 1 ids: array<u32> [M];
//   2 out: array<f32> [M, n] (written where the id is in this part); 3 data: array<u32> [rows * wpr];
//   4 scales: array<f32> [rows * G] (integer formats); 5 zeros: array<f32> [rows * G] (INT4 / INT2).
// Threads: one invocation per output element, flat index over the grid.
// Preconditions: ids < V (an id in no part leaves its output row unwritten).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> data: array<u32>;
//#if SCALED
@group(0) @binding(4) var<storage, read> scales: array<f32>;
//#endif
//#if ZEROS
@group(0) @binding(5) var<storage, read> zeros: array<f32>;
//#endif

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
  let v = id - p.row0;
  let row = v * p.wpr;
//#if F32
  out[i] = bitcast<f32>(data[row + j]);
//#endif
//#if F16
  out[i] = unpack2x16float(data[row + j / 2u])[j % 2u];
//#endif
//#if INT8
  let q = bitcast<i32>(data[row + j / 4u] << (24u - 8u * (j % 4u))) >> 24u;
  out[i] = f32(q) * scales[v * p.G + j / p.group];
//#endif
//#if ZEROS
  let per = 32u / {{BITS}}u;
  let q = (data[row + j / per] >> ({{BITS}}u * (j % per))) & ((1u << {{BITS}}u) - 1u);
  let gi = v * p.G + j / p.group;
  out[i] = (f32(q) - zeros[gi]) * scales[gi];
//#endif
}
