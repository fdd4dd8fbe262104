// deltanet_rule: the gated delta rule and the gated RMSNorm of a Gated DeltaNet layer over a pass
// of T rows (Hugging Face's torch_recurrent_gated_delta_rule, then Qwen3_5RMSNormGated). Per row
// and value head h, with key head kh = h / groups: q̂ = q · rsqrt(Σq² + 1e-6) · scale,
// k̂ = k · rsqrt(Σk² + 1e-6), β = sigmoid(b), decay = exp(-exp(A_log) · softplus(a + dt_bias));
// S ← S · decay; δ = (v - Sᵀk̂) · β; S ← S + k̂ δᵀ; o = Sᵀq̂;
// y = w · (o · rsqrt(mean(o²) + eps)) · silu(z).
//
// Bindings (group 0): 0 uniform Params { channels C, row P, keyWidth, valueWidth, valueHeads Hv,
//   groups = Hv / Hk, maxRows, scale = 1/√DK, eps } (static: written once);
//   1 proj: array<f32> [T, P], each row [qkv (C) | z (Hv · DV) | b (Hv) | a (Hv)];
//   2 conv: array<f32> [T, C], the conv output u (q at column kh · DK, k at keyWidth + kh · DK,
//   v at 2 · keyWidth + h · DV); 3 positions: array<u32> [T] (only positions[0] read: 0 starts a
//   new sequence, S taken as zeros); 4 count: array<u32> [1], T; 5 a_log, 6 dt_bias: array<f32>
//   [Hv]; 7 norm_weight: array<f32> [DV]; 8 state_in: array<f32> [Hv, DK, DV] (S, v fastest; read
//   unless fresh); 9 out: array<f32> [T, Hv · DV] (written); 10 state_out: as state_in, written
//   after row T - 1 (another buffer: an uncommitted pass leaves the committed state as it was).
// Threads: one workgroup of WG (the power of two ≥ DV) per value head h. Thread t < DV keeps column
//   S[:, t] in a private array for the whole pass and walks the rows in order; per row the
//   workgroup stages q and k (thread t loads elements t, t + WG, ...), reduces Σq², Σk² and, for
//   the norm, Σo² with wg_sum. A row's operations never depend on T, so a pass of T rows is
//   bit-identical to T passes of one row.
//   With TREE (a draft tree in depth-first order): binding 10 is instead vis: array<u32> [T, 2] (no
//   state_out), each row's visible
//   slots (visWords of attention_split: bit d of row r set iff row r - d is r or an ancestor); one
//   workgroup per (value head, row r) runs r's ancestors then r from state_in, with the same
//   operations as the chain of r's path run alone (so bit-identical to it), and writes row r's
//   output only; state_out is not written (a commit runs the accepted path as a chain).
// Preconditions: DK, DV ≤ 256; T = min(count[0], maxRows); with TREE, T ≤ 64.

{{PARAMS}}

const WG: u32 = {{WG}}u;
const DK: u32 = {{DK}}u;
const DV: u32 = {{DV}}u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> proj: array<f32>;
@group(0) @binding(2) var<storage, read> conv: array<f32>;
@group(0) @binding(3) var<storage, read> positions: array<u32>;
@group(0) @binding(4) var<storage, read> count: array<u32>;
@group(0) @binding(5) var<storage, read> a_log: array<f32>;
@group(0) @binding(6) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(7) var<storage, read> norm_weight: array<f32>;
@group(0) @binding(8) var<storage, read> state_in: array<f32>;
@group(0) @binding(9) var<storage, read_write> out: array<f32>;
//#if TREE
@group(0) @binding(10) var<storage, read> vis: array<u32>;

// Whether row r sees the row d before it (its ancestor, or itself at d = 0).
fn visible(r: u32, d: u32) -> bool {
  return ((vis[2u * r + (d >> 5u)] >> (d & 31u)) & 1u) != 0u;
}
//#else
@group(0) @binding(10) var<storage, read_write> state_out: array<f32>;
//#endif

//#include reduce

var<workgroup> wq: array<f32, DK>; // q̂ of the current row
var<workgroup> wk: array<f32, DK>; // k̂ of the current row

fn silu(y: f32) -> f32 {
  return y / (1.0 + exp(-y));
}

// torch's F.softplus (threshold 20), with log1p(e) as log(u) · e / (u - 1), u = 1 + e (exact
// where u rounds to 1, so a very negative x keeps its tiny gate).
fn softplus(x: f32) -> f32 {
  if (x > 20.0) {
    return x;
  }
  let e = exp(x);
  let u = 1.0 + e;
  if (u == 1.0) {
    return e;
  }
  return log(u) * e / (u - 1.0);
}

// Row r of the pass through value head h's state s (thread t's column S[:, t] when own), from the
// conv output u and the projection row; writes the row's gated-norm output when emit. Called by the
// whole workgroup in uniform control flow (its reductions hold barriers).
fn step(r: u32, h: u32, t: u32, s: ptr<function, array<f32, DK>>, emit: bool) {
  let kh = h / p.groups;
  let own = t < DV;
  let u = r * p.channels;
  let pr = r * p.row;
  let zAt = p.channels; // z, b, a columns of a proj row
  let bAt = zAt + p.valueWidth;
  let aAt = bAt + p.valueHeads;
  var sq = 0.0;
  var sk = 0.0;
  for (var i = t; i < DK; i += WG) {
    let q = conv[u + kh * DK + i];
    let k = conv[u + p.keyWidth + kh * DK + i];
    wq[i] = q;
    wk[i] = k;
    sq += q * q;
    sk += k * k;
  }
  let invQ = inverseSqrt(wg_sum(sq, t) + 1e-6);
  let invK = inverseSqrt(wg_sum(sk, t) + 1e-6);
  for (var i = t; i < DK; i += WG) {
    wq[i] = wq[i] * invQ * p.scale;
    wk[i] = wk[i] * invK;
  }
  workgroupBarrier();
  let beta = 1.0 / (1.0 + exp(-proj[pr + bAt + h]));
  let decay = exp(-exp(a_log[h]) * softplus(proj[pr + aAt + h] + dt_bias[h]));
  var o = 0.0;
  if (own) {
    var kv = 0.0;
    for (var k = 0u; k < DK; k++) {
      (*s)[k] = (*s)[k] * decay;
      kv += (*s)[k] * wk[k];
    }
    let delta = (conv[u + 2u * p.keyWidth + h * DV + t] - kv) * beta;
    for (var k = 0u; k < DK; k++) {
      (*s)[k] += wk[k] * delta;
      o += (*s)[k] * wq[k];
    }
  }
  // wg_sum's barriers also keep wq, wk until every thread has used them.
  let inv = inverseSqrt(wg_sum(o * o, t) / f32(DV) + p.eps);
  if (own && emit) {
    let z = proj[pr + zAt + h * DV + t];
    out[r * p.valueWidth + h * DV + t] = norm_weight[t] * (o * inv) * silu(z);
  }
}

@compute @workgroup_size(WG)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(local_invocation_index) t: u32,
) {
  let h = wid.x;
  let rows = min(count[0], p.maxRows);
  let own = t < DV; // thread t keeps column t of S_h
  let sAt = h * DK * DV + t; // S_h[k, t] at sAt + k · DV
  var s: array<f32, DK>;
  if (own && positions[0] != 0u) {
    for (var k = 0u; k < DK; k++) {
      s[k] = state_in[sAt + k * DV];
    }
  }
//#if TREE
  let r = wid.y;
  if (r >= rows) {
    return;
  }
  for (var j = 0u; j <= r; j++) {
    if (visible(r, r - j)) {
      step(j, h, t, &s, j == r);
    }
  }
//#else
  for (var r = 0u; r < rows; r++) {
    step(r, h, t, &s, true);
  }
  if (own) {
    for (var k = 0u; k < DK; k++) {
      state_out[sAt + k * DV] = s[k];
    }
  }
//#endif
}
