// sample: token choice on the GPU from logits, so logits never travel to the CPU.
//
// Variants (renderWgsl flags): GREEDY (argmax, ties to the lower id), else Gumbel-max sampling
// with temperature, top-k, top-p and min-p by the restricted Gumbel-argmax (ALGORITHMS.md §1);
// NOISE replaces both with a debug kernel that writes the raw Philox bits, U and G of a grid of
// (position, token) pairs for the bit-exactness test.
//
// Noise (bit-identical to gumbel.ts beside this file): key = splitmix64 finalizer of
// seed + (pos + 1) * 0x9E3779B97F4A7C15 in u32 pairs; bits = Philox 4x32-10 word 0 with counter
// (token, 0, 0, 0); U = ((bits >> 9) + 0.5) * 2^-23 (exact in f32, strictly inside (0, 1));
// G = -log(-log U). 64-bit products use mulhi built from 16-bit halves: u32 arithmetic only.
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

fn mulhilo(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let p11 = a1 * b1;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  return vec2<u32>(hi, a * b);
}

// 64-bit values as vec2(hi, lo).
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let p = mulhilo(a.y, b.y);
  return vec2<u32>(p.x + a.y * b.x + a.x * b.y, p.y);
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.y + b.y;
  return vec2<u32>(a.x + b.x + select(0u, 1u, lo < a.y), lo);
}

fn xorshr64(z: vec2<u32>, s: u32) -> vec2<u32> {
  return vec2<u32>(z.x ^ (z.x >> s), z.y ^ ((z.y >> s) | (z.x << (32u - s))));
}

// Philox key (k0, k1) = (lo, hi) of the mixed 64-bit state.
fn gumbel_key(seed: u32, pos: u32) -> vec2<u32> {
  var z = mul64(add64(vec2<u32>(0u, pos), vec2<u32>(0u, 1u)), vec2<u32>(0x9e3779b9u, 0x7f4a7c15u));
  z = add64(z, vec2<u32>(0u, seed));
  z = mul64(xorshr64(z, 30u), vec2<u32>(0xbf58476du, 0x1ce4e5b9u));
  z = mul64(xorshr64(z, 27u), vec2<u32>(0x94d049bbu, 0x133111ebu));
  z = xorshr64(z, 31u);
  return vec2<u32>(z.y, z.x);
}

fn philox_bits(key: vec2<u32>, token: u32) -> u32 {
  var c = vec4<u32>(token, 0u, 0u, 0u);
  var k = key;
  for (var round = 0u; round < 10u; round++) {
    if (round > 0u) {
      k += vec2<u32>(0x9e3779b9u, 0xbb67ae85u);
    }
    let p0 = mulhilo(0xd2511f53u, c.x);
    let p1 = mulhilo(0xcd9e8d57u, c.z);
    c = vec4<u32>(p1.x ^ c.y ^ k.x, p1.y, p0.x ^ c.w ^ k.y, p0.y);
  }
  return c.x;
}

fn uniform_from_bits(bits: u32) -> f32 {
  // (m + 0.5) needs at most 24 significant bits and 2^-23 is a power of two: both steps exact.
  return (f32(bits >> 9u) + 0.5) * 1.1920928955078125e-7;
}

// -log(u) with small relative error for all u. WGSL's log only promises 2^-21 absolute error on
// [0.5, 2], which near u = 1 (where -log u ~ 1e-7 and the largest G live) would swamp the value;
// there, with w = 1 - u exact, -log(1 - w) = 2 atanh(s), s = w / (2 - w) ≤ 1/3, by its odd series.
fn neg_log_u(u: f32) -> f32 {
  if (u < 0.5) {
    return -log(u);
  }
  let s = (1.0 - u) / (1.0 + u);
  let s2 = s * s;
  var poly = 1.0 / 19.0;
  for (var k = 17.0; k > 0.0; k -= 2.0) {
    poly = poly * s2 + 1.0 / k;
  }
  return 2.0 * s * poly;
}

fn gumbel_from_uniform(u: f32) -> f32 {
  return -log(neg_log_u(u));
}

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

const NONE: u32 = 0xffffffffu;

// (s1, i1) beats (s2, i2): larger score, ties to the lower id; NONE never beats a real candidate.
fn better(s1: f32, i1: u32, s2: f32, i2: u32) -> bool {
  if (i1 == NONE) {
    return false;
  }
  return i2 == NONE || s1 > s2 || (s1 == s2 && i1 < i2);
}

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
