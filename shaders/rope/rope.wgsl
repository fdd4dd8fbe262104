// rope: rotary position embedding applied in place to q [M, heads, headDim] and k [M, kvHeads,
// headDim] at explicit positions (tree nodes stand at prefix + depth, not consecutive).
//
// Bindings (group 0): 0 uniform Params { M, heads, kvHeads, headDim, rotaryDim };
//   1 positions: array<u32> [M]; 2 inv_freq: array<f32> [rotaryDim / 2] (computed on the CPU,
//   llama3 scaling folded in);
//   3 q: array<f32> [M, heads, headDim] (read-write); 4 k: array<f32> [M, kvHeads, headDim] (read-write).
// Pairs: INTERLEAVED rotates (2i, 2i + 1); otherwise HF rotate-half rotates (i, i + rotaryDim/2),
//   and elements rotaryDim .. headDim - 1 are left as they are (partial rotary; rotaryDim = headDim
//   when interleaved); pair i uses inv_freq[i]. angle = f32(pos) * inv_freq[i] (one correctly rounded f32 multiply, as
//   HF computes it). cos/sin are computed here, not with WGSL's cos/sin (whose error bound is 2^-11
//   and which SwiftShader meets only to ~1e-4): Cody-Waite reduction by π/2 = 1.5703125 +
//   4.838267948966482e-4 (k * 1.5703125 is exact for |k| < 2^16, i.e. angles below ~1e5), then
//   Taylor polynomials on [-π/4, π/4] (truncation < 1e-10), so the result is within a few f32 ulps
//   of the exact cos/sin of the f32 angle.
// Q_TEMP (Llama 4's query temperature, Ministral 3): a rotated query pair is then multiplied by
//   1 + beta · ln(1 + floor(pos / FLOOR)) (q_temp); the keys are not. Needs rotaryDim = headDim.
// Threads: one invocation per pair, flat index over (m, head of q then k, i), over the grid.
// Preconditions: rotaryDim even, ≤ headDim; positions < 102900 (so |k| < 2^16 in the reduction).

{{PARAMS}}

const WG: u32 = {{WG}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(3) var<storage, read_write> q: array<f32>;
@group(0) @binding(4) var<storage, read_write> k: array<f32>;

//#include rope_trig

//#if Q_TEMP
// Llama 4's query temperature at position pos: 1 + beta · ln(1 + floor(pos / FLOOR)).
fn q_temp(pos: u32) -> f32 {
  return 1.0 + bitcast<f32>({{Q_TEMP_BETA_BITS}}u) * log(1.0 + f32(pos / {{Q_TEMP_FLOOR}}u));
}
//#endif

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let idx = gid.y * nwg.x * WG + gid.x;
  let half = p.rotaryDim / 2u;
  let allHeads = p.heads + p.kvHeads;
  if (idx >= p.M * allHeads * half) {
    return;
  }
  let i = idx % half;
  let hh = (idx / half) % allHeads;
  let m = idx / (half * allHeads);
  let angle = f32(positions[m]) * inv_freq[i];
//#if ATTN_FACTOR
  let cs = cos_sin(angle) * bitcast<f32>({{ATTN_FACTOR_BITS}}u);
//#else
  let cs = cos_sin(angle);
//#endif
  let c = cs.x;
  let s = cs.y;
//#if INTERLEAVED
  let ia = 2u * i;
  let ib = 2u * i + 1u;
//#else
  let ia = i;
  let ib = i + half;
//#endif
  if (hh < p.heads) {
    let base = (m * p.heads + hh) * p.headDim;
//#if Q_TEMP
    let o = rotate(q[base + ia], q[base + ib], c, s) * q_temp(positions[m]);
//#else
    let o = rotate(q[base + ia], q[base + ib], c, s);
//#endif
    q[base + ia] = o.x;
    q[base + ib] = o.y;
  } else {
    let base = (m * p.kvHeads + hh - p.heads) * p.headDim;
    let o = rotate(k[base + ia], k[base + ib], c, s);
    k[base + ia] = o.x;
    k[base + ib] = o.y;
  }
}
