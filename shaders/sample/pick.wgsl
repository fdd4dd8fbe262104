// pick: how the samplers (sample.wgsl, topk.wgsl) order (score, id) candidates, pulled in with
// `//#include pick`; not a kernel of its own. Larger score first, ties to the lower id (as argmax
// and gumbel.ts break them); NONE marks an empty slot.

const NONE: u32 = 0xffffffffu;

// (s1, i1) beats (s2, i2): larger score, ties to the lower id; NONE never beats a real candidate.
fn better(s1: f32, i1: u32, s2: f32, i2: u32) -> bool {
  if (i1 == NONE) {
    return false;
  }
  return i2 == NONE || s1 > s2 || (s1 == s2 && i1 < i2);
}
