// attention_split: the partial pass of split attention. The keys are cut into chunks of CH
// absolute cache slots (chunk c = slots [c·CH, (c+1)·CH)); one workgroup scores one chunk for every
// query head of one KV head of one row, and writes that chunk's softmax partial (max m, sum l and
// the unnormalised weighted V) or, when the row's visible keys all lie in one chunk, the row's
// final output. attention_merge.wgsl folds the partials of the other rows.
//
// Bindings (group 0): 0 uniform Params { scale, first, window, ring, chunks }; 1 q:
//   array<vec4<f32>> [T, heads, D]; 2 kc, 3 vc: [rows, kvHeads, D] as array<vec4<f32>>, or with
//   KV_F16 array<vec2<u32>> (IEEE halves packed two per u32, element 2j in the low 16 bits: 4
//   elements per vec2<u32>), or with KV_INT array<u32> of int8 / int4 heads (KV_INT4), each its
//   scale word then its values (kv_quant.wgsl's layout; a rotated cache is read as stored, its
//   queries rotated the same way); slot s at row cache_row(s, ring) (kv_ring.wgsl): s mod ring with a
//   ring (rows = ring, a sliding-window layer's cache), s itself with ring 0 (rows = capacity);
//   4 vis: array<vec2<u32>> [T], per row a 64-bit mask (x low, y high) over the 64 slots ending at
//   the row's own: bit d marks slot slots[r] - d visible; 5 slots: array<u32> [T], each row's own
//   cache slot (where kvWrite put its K/V), slots[T-1] the largest; 6 positions: array<u32> [T],
//   each row's position (RoPE's: slots[r] for a chain, base + depth in a tree);
//   7 out: array<vec4<f32>> [T, heads, D] (written for rows whose visible keys fit one chunk);
//   8 part: array<f32> [T, kvHeads, chunks, G · (D + 2)] (written for the other rows): G · D
//   unnormalised sums acc[g, d], then m[g], then l[g]; chunk c at c mod chunks (a uniform: every
//   chunk, or with a ring the most one row's window spans, so the partials too stay the window's
//   size; a row's visible chunks are consecutive and at most `chunks`, so they never collide).
// Grid: (NC, kvHeads, T) workgroups; T and kvHeads come from num_workgroups, so the only uniform
//   (scale, first, window, ring, chunks) is written once, and a decode step rewrites nothing here.
//   The NC columns are the chunks that end at the pass's last, slots[T-1] / CH: workgroup x takes
//   chunk c = slots[T-1] / CH + 1 + x - NC (none when that is below 0). The wrapper sizes NC from
//   the chunk of the first window start any row may have, max(0, base + 1 - window) (every
//   position ≥ base), to that of its bound on the largest slot, so with a window only the chunks
//   that can be visible are launched (a decode step far into the context: about
//   (window + 64) / CH + 2, not all of them); without one NC = slots[T-1] / CH + 1 (chunk 0 on).
// Visibility: row r at slot me = slots[r] sees slot s ≤ me when me - s ≥ 64 (the tree region
//   is never longer than 64 slots, so older slots are its committed prefix) or bit me - s of
//   vis[r] is set. A chain (prefill, decode) sets every bit; a depth-first tree at slots base + r
//   sets bit d iff r - d < 0 (prefix) or r - d is r or an ancestor (visWords); a tree grown on the
//   GPU sets its ancestors' slots, wherever they lie. So the words of a chain or a decode step do
//   not depend on its position. Besides, a slot s < first is seen by its own row only (s == me):
//   a draft head's entry at slot 0 has no input feature, and later entries must not attend to it.
// Window: with window > 0 (Gemma 3's and Mistral's local layers), row r at position pos =
//   positions[r] sees only slots s ≥ lo = pos + 1 - window (p - k < window, prefix slot s standing
//   at position s). window ≥ 64 (checked in TS), so every tree slot a row sees (an ancestor, less
//   than 64 positions behind) is in its window: the test on the slot alone is exact.
//   Chunk c of row r is empty when c·CH > me or (c + 1)·CH ≤ lo; the workgroup returns, and the
//   row's visible chunks are first = lo / CH ..= last = me / CH.
// Ring: slots, chunks and every order stay absolute; only the row a slot is read from changes, so a
//   ring gives the bits a full cache holding the same keys gives. ring ≥ window + 64 (checked in
//   TS): a pass's rows lie within 64 slots, so none of its writes overwrote a key a row sees.
// Threads: WG per workgroup. Scores: thread t takes keys j = t + i·WG (i < CH / WG) of the chunk,
//   reads each K row once (vec4 loads) and dots it with the G staged query heads. Max and sum per
//   head: fixed-order tree reductions over the threads. Weighted V: with D4 ≤ WG thread t takes
//   vec4 column t % D4 and keys j ≡ t / D4 (mod S), S = WG / D4, each V vec4 read once for the G
//   heads (VB keys' loads issued at once, then added in key order); the S parts are added in order
//   s = 0, 1, ... through workgroup memory. With D4 > WG (head 512: D4 = 2 · WG) S = 1 and thread t
//   takes the CPT = D4 / WG columns t, t + WG, ..., every key of each in key order, and writes its
//   own sums (no parts to add). Every order is fixed by the absolute slot, never by T, so a row's
//   output is bit-identical whatever rows share the pass (batch invariance).
// Dispatches: rows whose visible keys fit one chunk (first == last) are final after this pass, so
//   a pass whose grid is one chunk wide (NC = 1: every key below CH, or every row's window within
//   one chunk) costs this one dispatch; otherwise attention_merge follows (two in all; it skips
//   those rows).
// Preconditions: D % 4 == 0, and D ≤ 4 · WG or D a multiple of 4 · WG; heads = G · kvHeads; CH a multiple of WG, WG a power of
//   two; slots[T-1] the largest; window 0 or ≥ 64, and a row's position at most its slot (a tree
//   row's depth at most its index) and with a window at least the pass's first slot base; with a
//   ring every slot below base + 64; every visible slot written in kc and vc (and with a ring not
//   overwritten since).

{{PARAMS}}

const WG: u32 = {{WG}}u;
const CH: u32 = {{CH}}u; // keys per chunk
const G: u32 = {{G}}u; // query heads per KV head
const D: u32 = {{D}}u; // head dim
const D4: u32 = D / 4u;
const KPT: u32 = CH / WG; // keys scored per thread
const S: u32 = max(1u, WG / D4); // key parts of the weighted-V sum
const CPT: u32 = max(1u, D4 / WG); // vec4 columns of the weighted-V sum per thread
const OWN: bool = D4 > WG; // each thread writes its own columns' sums (S = 1, no parts to add)
const VB: u32 = {{VB}}u; // V loads a thread issues at once
const MASKED: f32 = -3.0e38;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
//#if KV_INT
@group(0) @binding(2) var<storage, read> kc: array<u32>;
@group(0) @binding(3) var<storage, read> vc: array<u32>;
const HW: u32 = {{KV_HW}}u; // words per head: the scale, then the values (kv_quant.wgsl)

// Four values of an int4 word from bit `sh` (nibbles hold q + 8), times the head's scale.
fn int4s(w: u32, sh: u32, scale: f32) -> vec4<f32> {
  let n = (vec4<u32>(w) >> (vec4<u32>(sh) + vec4<u32>(0u, 4u, 8u, 12u))) & vec4<u32>(15u);
  return (vec4<f32>(n) - vec4<f32>(8.0)) * scale;
}

// The four two's-complement bytes of an int8 word, times the head's scale.
fn int8s(w: u32, scale: f32) -> vec4<f32> {
  let b = bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u);
  return vec4<f32>(b) * scale;
}

// Vec4 i of the cache as [rows, kvHeads, D / 4]: head block i / D4, column i % D4.
fn k4(i: u32) -> vec4<f32> {
  let base = (i / D4) * HW;
  let d = i % D4;
  let scale = bitcast<f32>(kc[base]);
//#if KV_INT4
  return int4s(kc[base + 1u + d / 2u], 16u * (d % 2u), scale);
//#else
  return int8s(kc[base + 1u + d], scale);
//#endif
}

fn v4(i: u32) -> vec4<f32> {
  let base = (i / D4) * HW;
  let d = i % D4;
  let scale = bitcast<f32>(vc[base]);
//#if KV_INT4
  return int4s(vc[base + 1u + d / 2u], 16u * (d % 2u), scale);
//#else
  return int8s(vc[base + 1u + d], scale);
//#endif
}
//#else
//#if KV_F16
@group(0) @binding(2) var<storage, read> kc: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec2<u32>>;

fn k4(i: u32) -> vec4<f32> {
  let w = kc[i];
  return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}

fn v4(i: u32) -> vec4<f32> {
  let w = vc[i];
  return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
//#else
@group(0) @binding(2) var<storage, read> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vc: array<vec4<f32>>;

fn k4(i: u32) -> vec4<f32> {
  return kc[i];
}

fn v4(i: u32) -> vec4<f32> {
  return vc[i];
}
//#endif
//#endif
@group(0) @binding(4) var<storage, read> vis: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read> slots: array<u32>;
@group(0) @binding(6) var<storage, read> positions: array<u32>;
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read_write> part: array<f32>;

//#include kv_ring

// The chunk workgroup column x of a grid `cols` wide takes (the header's Grid), or 0xffffffff
// (no chunk: below chunk 0). T: the pass's rows.
fn chunk_of(x: u32, cols: u32, T: u32) -> u32 {
  let end = slots[T - 1u] / CH + 1u; // one past the pass's last chunk
  if (x + end < cols) {
    return 0xffffffffu;
  }
  return x + end - cols;
}

// The first slot row slot `me` at position `pos` may see: the window's start (0 without one),
// never past the row's own slot. attention_merge.wgsl computes the same.
fn window_start(pos: u32, me: u32) -> u32 {
  if (p.window == 0u || pos < p.window) {
    return 0u;
  }
  return min(pos + 1u - p.window, me);
}

// Whether row slot `me` (with visibility words `seen`, window start `lo`) sees slot s ≤ me: the
// header's rule.
fn sees(s: u32, me: u32, seen: vec2<u32>, lo: u32) -> bool {
  let d = me - s;
  let bit = select(seen.y >> (d - 32u), seen.x >> d, d < 32u) & 1u;
  return (d >= 64u || bit == 1u) && (s >= p.first || s == me) && s >= lo;
}

//#if SERIAL
// Serial form (software adapters; see GpuContext.serial): a workgroup of G threads per (chunk, kv
// head, row), thread g alone scoring the chunk for query head kvh·G + g: scores in a local array
// (keys j = 0, 1, ... of the chunk), its max, then the weights and their sum l in key order, then
// the weighted V one vec4 column at a time, keys in order. No workgroup memory and no barrier.
// Same grid, partials and visibility as the form below (whose sums are ordered differently), so
// attention_merge folds either; the order depends on absolute slots only (batch invariance).
@compute @workgroup_size(G)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) g: u32,
) {
  let kvh = wid.y;
  let r = wid.z;
  let kvHeads = nwg.y;
  let T = nwg.z;
  let c = chunk_of(wid.x, nwg.x, T);
  let seen = vis[r]; // bit d: slot me - d visible
  let me = slots[r];
  let lo = window_start(positions[r], me);
  let first = lo / CH; // the row's first and last chunks
  let last = me / CH;
  if (c > last || c < first) {
    return;
  }
  let qBase = ((r * kvHeads + kvh) * G + g) * D4; // head kvh·G + g of row r
  let c0 = c * CH;
  let slotStride = kvHeads * D4; // vec4s per cache slot
  let j0 = max(lo, c0) - c0; // keys before the window's start are never visible
  let n = min(CH, me + 1u - c0); // nor keys past the row's own slot
  var sc: array<f32, CH>;
  var m = MASKED;
  for (var j = j0; j < n; j++) {
    let s = c0 + j;
    var score = MASKED;
    if (sees(s, me, seen, lo)) {
      let kb = cache_row(s, p.ring) * slotStride + kvh * D4;
      var acc = 0.0;
      for (var i = 0u; i < D4; i++) {
        acc += dot(q[qBase + i], k4(kb + i));
      }
      score = acc * p.scale;
    }
    sc[j] = score;
    m = max(m, score);
  }
  var l = 0.0;
  for (var j = j0; j < n; j++) {
    let w = select(0.0, exp(sc[j] - m), sc[j] > MASKED);
    sc[j] = w;
    l += w;
  }
  let pBase = ((r * kvHeads + kvh) * p.chunks + c % p.chunks) * G * (D + 2u);
  for (var i = 0u; i < D4; i++) {
    var a = vec4<f32>(0.0);
    let vb = kvh * D4 + i;
    for (var j = j0; j < n; j++) {
      a += sc[j] * v4(cache_row(c0 + j, p.ring) * slotStride + vb);
    }
    if (first == last) {
      out[qBase + i] = a / l;
    } else {
      let o = pBase + 4u * (g * D4 + i);
      part[o] = a.x;
      part[o + 1u] = a.y;
      part[o + 2u] = a.z;
      part[o + 3u] = a.w;
    }
  }
  if (first != last) {
    part[pBase + G * D + g] = m;
    part[pBase + G * D + G + g] = l;
  }
}
//#else
var<workgroup> qs: array<vec4<f32>, G * D4>; // the G query heads of this (row, kv head)
var<workgroup> sc: array<f32, G * CH>; // scores, then weights p, then the S parts of acc
var<workgroup> red: array<f32, G * WG>; // per-head tree reductions

// Tree reduction of red[g·WG + t] over t for every head g, max or sum; result in red[g·WG].
fn reduce_heads(t: u32, is_max: bool) {
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (t < s) {
      for (var g = 0u; g < G; g++) {
        let a = red[g * WG + t];
        let b = red[g * WG + t + s];
        red[g * WG + t] = select(a + b, max(a, b), is_max);
      }
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
  let kvh = wid.y;
  let r = wid.z;
  let kvHeads = nwg.y;
  let T = nwg.z;
  let c = chunk_of(wid.x, nwg.x, T);
  let seen = vis[r]; // bit d: slot me - d visible
  let me = slots[r];
  let lo = window_start(positions[r], me);
  let first = lo / CH; // the row's first and last chunks
  let last = me / CH;
  if (c > last || c < first) {
    return; // uniform across the workgroup
  }
  let qBase = (r * kvHeads + kvh) * G * D4; // heads kvh·G .. kvh·G + G - 1 of row r
  for (var i = t; i < G * D4; i += WG) {
    qs[i] = q[qBase + i];
  }
  workgroupBarrier();

  let c0 = c * CH;
  let slotStride = kvHeads * D4; // vec4s per cache slot
  var mloc: array<f32, G>;
  for (var g = 0u; g < G; g++) {
    mloc[g] = MASKED;
  }
  for (var i = 0u; i < KPT; i++) {
    let j = t + i * WG;
    let s = c0 + j;
    let visible = s <= me && sees(s, me, seen, lo);
    var dots: array<f32, G>;
    for (var g = 0u; g < G; g++) {
      dots[g] = 0.0; // a declaration in a loop body is not re-zeroed on every compiler
    }
    if (visible) {
      let kb = cache_row(s, p.ring) * slotStride + kvh * D4;
      for (var d = 0u; d < D4; d++) {
        let kv = k4(kb + d);
        for (var g = 0u; g < G; g++) {
          dots[g] += dot(qs[g * D4 + d], kv);
        }
      }
    }
    for (var g = 0u; g < G; g++) {
      let score = select(MASKED, dots[g] * p.scale, visible);
      sc[g * CH + j] = score;
      mloc[g] = max(mloc[g], score);
    }
  }
  for (var g = 0u; g < G; g++) {
    red[g * WG + t] = mloc[g];
  }
  reduce_heads(t, true);
  var m: array<f32, G>;
  for (var g = 0u; g < G; g++) {
    m[g] = red[g * WG];
  }
  workgroupBarrier(); // every thread has its maxima before red is reused
  var lloc: array<f32, G>;
  for (var i = 0u; i < KPT; i++) {
    let j = t + i * WG;
    for (var g = 0u; g < G; g++) {
      let score = sc[g * CH + j];
      let w = select(0.0, exp(score - m[g]), score > MASKED);
      sc[g * CH + j] = w;
      lloc[g] += w;
    }
  }
  for (var g = 0u; g < G; g++) {
    red[g * WG + t] = lloc[g];
  }
  reduce_heads(t, false); // also orders the weights in sc before the V sums read them
  var l: array<f32, G>;
  for (var g = 0u; g < G; g++) {
    l[g] = red[g * WG];
  }

  // Weighted V: part sp of column col + k · WG (k < CPT) sums keys j = sp, sp + S, ... of the
  // chunk's visible span.
  let col = t % D4;
  let sp = t / D4;
  let n = min(CH, me + 1u - c0); // keys past the row's own slot are never visible
  // Batches of VB · S keys wholly before the window's start hold weights 0 only: skipped.
  let skip = (max(lo, c0) - c0) / (VB * S) * (VB * S);
  var acc: array<vec4<f32>, G * CPT>; // [g, k]
  if (sp < S) {
    for (var k = 0u; k < CPT; k++) {
      let vcol = kvh * D4 + col + k * WG;
      // VB keys' V loads at a time, all issued before the first is used; summed in key order.
      for (var j0 = skip + sp; j0 < n; j0 += VB * S) {
        var vv: array<vec4<f32>, VB>;
        for (var i = 0u; i < VB; i++) {
          vv[i] = v4(cache_row(c0 + min(j0 + i * S, n - 1u), p.ring) * slotStride + vcol);
        }
        for (var i = 0u; i < VB; i++) {
          let j = j0 + i * S;
          if (j < n) {
            for (var g = 0u; g < G; g++) {
              acc[g * CPT + k] += sc[g * CH + j] * vv[i];
            }
          }
        }
      }
    }
  }
  workgroupBarrier(); // all weights read: sc now holds the parts, [sp, g, D] (unless OWN)
  if (!OWN && sp < S) {
    for (var g = 0u; g < G; g++) {
      let o = ((sp * G + g) * D4 + col) * 4u;
      sc[o] = acc[g].x;
      sc[o + 1u] = acc[g].y;
      sc[o + 2u] = acc[g].z;
      sc[o + 3u] = acc[g].w;
    }
  }
  workgroupBarrier();
  let pBase = ((r * kvHeads + kvh) * p.chunks + c % p.chunks) * G * (D + 2u);
  for (var i = t; i < G * D4; i += WG) {
    var a = vec4<f32>(0.0);
    if (OWN) {
      // D4 = CPT · WG: output i (head i / D4, column i % D4 = t + k · WG) is this thread's own.
      a = acc[(i / D4) * CPT + (i % D4) / WG];
    } else {
      for (var s = 0u; s < S; s++) {
        let o = (s * G * D4 + i) * 4u;
        a += vec4<f32>(sc[o], sc[o + 1u], sc[o + 2u], sc[o + 3u]);
      }
    }
    if (first == last) {
      out[qBase + i] = a / l[i / D4];
    } else {
      part[pBase + 4u * i] = a.x;
      part[pBase + 4u * i + 1u] = a.y;
      part[pBase + 4u * i + 2u] = a.z;
      part[pBase + 4u * i + 3u] = a.w;
    }
  }
  if (first != last && t < G) {
    part[pBase + G * D + t] = m[t];
    part[pBase + G * D + G + t] = l[t];
  }
}
//#endif
