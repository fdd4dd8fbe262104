// gumbel_noise: the Gumbel noise G(seed, position, token) of the samplers (sample.wgsl, topk.wgsl),
// bit-identical to gumbel.ts up to `log`, pulled in with `//#include gumbel_noise`; not a kernel of
// its own. key = splitmix64 finalizer of seed + (pos + 1) * 0x9E3779B97F4A7C15 in u32 pairs;
// bits = Philox 4x32-10 word 0 with counter (token, 0, 0, 0); U = ((bits >> 9) + 0.5) * 2^-23
// (exact in f32, strictly inside (0, 1)); G = -log(-log U). 64-bit products use mulhi built from
// 16-bit halves: u32 arithmetic only.

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
