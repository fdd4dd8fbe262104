// kv_ring: the cache row of an absolute slot, shared by the kernels that address a KV cache by slot
// (kv_write, kv_compact, qkv_rope, attention_split), pulled in with `//#include kv_ring`; not a
// kernel of its own.

// The row of the K/V buffers holding slot s: with a ring of `ring` rows (a sliding-window layer's
// cache), s mod ring; with ring 0 (no ring), s itself.
fn cache_row(s: u32, ring: u32) -> u32 {
  if (ring == 0u) {
    return s;
  }
  return s % ring;
}
