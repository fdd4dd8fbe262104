// matmul_block: a 16-element block of the weights read from its flat element, as the serial form
// and the tiled GEMM read them (u32-word reads, never WIDE), pulled in with `//#include
// matmul_block` after matmul_common.wgsl; not a kernel of its own. load_block(e) is the block at
// flat element e (e % 16 == 0) of the part, dequantized to f32; load_codes(e, ab) the same on a
// grid ab = grid_at(e) the caller already holds (the serial form keeps a group's grid over its
// blocks).

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
