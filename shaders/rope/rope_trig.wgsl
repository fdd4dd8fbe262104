// rope_trig: the rotation shared by the RoPE kernels (rope, qkv_rope), pulled in with
// `//#include rope_trig`; not a kernel of its own. cos_sin is accurate to a few f32 ulps for
// angles below ~1e5 (see rope.wgsl's header); rotate turns the pair (a, b) by the angle.

// (cos, sin) of angle.
fn cos_sin(angle: f32) -> vec2<f32> {
  let k = round(angle * 0.6366197723675814);
  let x = (angle - k * 1.5703125) - k * 4.838267948966482e-4;
  let x2 = x * x;
  let s = x * (1.0 + x2 * (-1.0 / 6.0 + x2 * (1.0 / 120.0 + x2 * (-1.0 / 5040.0 + x2 * (1.0 / 362880.0 +
    x2 * (-1.0 / 39916800.0))))));
  let c = 1.0 + x2 * (-0.5 + x2 * (1.0 / 24.0 + x2 * (-1.0 / 720.0 + x2 * (1.0 / 40320.0 + x2 * (-1.0 /
    3628800.0 + x2 * (1.0 / 479001600.0))))));
  switch (i32(k) & 3) {
    case 0: {
      return vec2<f32>(c, s);
    }
    case 1: {
      return vec2<f32>(-s, c);
    }
    case 2: {
      return vec2<f32>(-c, -s);
    }
    default: {
      return vec2<f32>(s, -c);
    }
  }
}

fn rotate(a: f32, b: f32, c: f32, s: f32) -> vec2<f32> {
  return vec2<f32>(a * c - b * s, b * c + a * s);
}
