// sample: token choice on the GPU from logits, so logits never travel to the CPU.
//
// Variants (renderWgsl flags): GREEDY (argmax, ties to the lower id), else Gumbel-max sampling
// with temperature, top-k, top-p and min-p by the restricted Gumbel-argmax (ALGORITHMS.md §1);
// NOISE replaces both with a debug kernel that writes the raw Philox bits, U and G of a grid of
// (position, token) pairs for the bit-exactness test.
//
// Noise: G(seed, position, token) from gumbel_noise.wgsl, bit-identical to gumbel.ts up to `log`.
//
// Sampling bindings (group 0): 0 uniform Params { R, V, seed, invT, topK, topP, minP };
//   1 logits: array<f32> [R, V]; 2 positions: array<u32> [R] (absolute position of each row);
//   3 ids: array<u32> [R] (written).
// Noise bindings: 0 uniform Params { P, V, seed }; 1 positions [P]; 2 bits [P, V] u32;
//   3 u [P, V] f32; 4 g [P, V] f32.
// Threads: sampling, one workgroup of WG threads per row (flat workgroup index over the grid),
//   each thread striding over the vocabulary, then workgroup-memory tree reductions (fixed order,
//   so the result of a row does not depend on R). Noise, one thread per (position, token).
// Restricted Gumbel-argmax: c = argmax of ℓ·invT + G over S (initially all tokens); if c fails a
//   filter judged on unperturbed logits (count / mass of strictly larger logits, or p_c/p_max),
//   S = { v : ℓ_v > ℓ_c } and repeat. Every filter keeps an upper set in logit order, so the loop
//   ends with the Gumbel-argmax over exactly the allowed set.
// Preconditions: WG is a power of two ≤ 256; V ≥ 1; invT > 0 unless GREEDY.

{{PARAMS}}

const WG: u32 = {{WG}}u;

//#include gumbel_noise

//#if NOISE
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> positions: array<u32>;
@group(0) @binding(2) var<storage, read_write> bits_out: array<u32>;
@group(0) @binding(3) var<storage, read_write> u_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> g_out: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.y * nwg.x * WG + gid.x;
  if (i >= p.P * p.V) {
    return;
  }
  let key = gumbel_key(p.seed, positions[i / p.V]);
  let bits = philox_bits(key, i % p.V);
  let u = uniform_from_bits(bits);
  bits_out[i] = bits;
  u_out[i] = u;
  g_out[i] = gumbel_from_uniform(u);
}
//#else
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;

var<workgroup> red_s: array<f32, WG>;
var<workgroup> red_i: array<u32, WG>;
var<workgroup> red_c: array<u32, WG>;
var<workgroup> done: u32;
//#include reduce

//#include pick

// Tree reduction of (red_s, red_i) to the best pair in slot 0.
fn reduce_best(t: u32) {
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s && better(red_s[t + s], red_i[t + s], red_s[t], red_i[t])) {
      red_s[t] = red_s[t + s];
      red_i[t] = red_i[t + s];
    }
  }
  workgroupBarrier();
}

// Tree reduction of (red_s as a sum, red_c as a count) into slot 0.
fn reduce_sum(t: u32) {
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      red_s[t] += red_s[t + s];
      red_c[t] += red_c[t + s];
    }
  }
  workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= p.R) {
    return;
  }
  let base = row * p.V;
//#if GREEDY
  _ = positions[row]; // keeps binding 2 in the auto layout, so both variants bind the same buffers
  var bs = 0.0;
  var bi = NONE;
  for (var v = t; v < p.V; v += WG) {
    let s = logits[base + v];
    if (better(s, v, bs, bi)) {
      bs = s;
      bi = v;
    }
  }
  red_s[t] = bs;
  red_i[t] = bi;
  reduce_best(t);
  if (t == 0u) {
    ids[row] = red_i[0];
  }
//#else
  let key = gumbel_key(p.seed, positions[row]);
  let filtered = p.topK > 0u || p.topP < 1.0 || p.minP > 0.0;
  // Max logit and softmax normaliser at temperature 1/invT, for the filters only (`filtered` comes
  // from the uniform block, so the barriers inside stay in uniform control flow).
  var lmax = 0.0;
  var total = 0.0;
  if (filtered) {
    var m = -3.4e38;
    for (var v = t; v < p.V; v += WG) {
      m = max(m, logits[base + v]);
    }
    lmax = wg_max(m, t);
    var z = 0.0;
    for (var v = t; v < p.V; v += WG) {
      z += exp((logits[base + v] - lmax) * p.invT);
    }
    total = wg_sum(z, t);
  }
  // S = { v : !has_thr || ℓ_v > thr }.
  var has_thr = false;
  var thr = 0.0;
  loop {
    var bs = 0.0;
    var bi = NONE;
    for (var v = t; v < p.V; v += WG) {
      let l = logits[base + v];
      if (has_thr && !(l > thr)) {
        continue;
      }
      let s = l * p.invT + gumbel_from_uniform(uniform_from_bits(philox_bits(key, v)));
      if (better(s, v, bs, bi)) {
        bs = s;
        bi = v;
      }
    }
    red_s[t] = bs;
    red_i[t] = bi;
    reduce_best(t);
    let c = red_i[0];
    let lc = logits[base + c];
    var ok = true;
    if (filtered) {
      var mass = 0.0;
      var count = 0u;
      for (var v = t; v < p.V; v += WG) {
        let l = logits[base + v];
        if (l > lc) {
          mass += exp((l - lmax) * p.invT);
          count += 1u;
        }
      }
      workgroupBarrier();
      red_s[t] = mass;
      red_c[t] = count;
      reduce_sum(t);
      let pc = exp((lc - lmax) * p.invT);
      ok = (p.topK == 0u || red_c[0] < p.topK) && (p.topP >= 1.0 || red_s[0] < p.topP * total) &&
        (p.minP <= 0.0 || pc >= p.minP);
    }
    if (t == 0u) {
      done = select(0u, 1u, ok);
      if (ok) {
        ids[row] = c;
      }
    }
    has_thr = true;
    thr = lc;
    if (workgroupUniformLoad(&done) == 1u) {
      break;
    }
  }
//#endif
}
//#endif
