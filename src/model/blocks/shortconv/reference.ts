// The short-convolution block's reference forward (its descriptor and tensors in block.ts, its GPU
// side in gpu.ts): LFM2's gated short convolution, its token mixer beside attention. Its input
// norm, in_proj to B | C | x, B · x, a causal depthwise convolution over it, C times that and
// out_proj, added into the residual stream. Its state (the last kernel - 1 rows of B · x) is kept
// with the Gated DeltaNet's (../recurrent-state.ts), so a tree row starts from its parent's window
// and a commit keeps a path's.
//
// Per token t and channel c, as Hugging Face's `Lfm2ShortConv.slow_forward` computes it in f32:
//   B | C | x = in_proj(h_t)                                 (rows [0, H), [H, 2H), [2H, 3H) of 3H)
//   u_t = B ⊙ x
//   conv_t[c] = Σ_{j<K} w[c, j] · u_{t-(K-1)+j}[c]  (+ bias[c])  (u before the sequence: zeros)
//   y_t = C ⊙ conv_t,   x += out_proj(y_t)

import type { ModelSpec } from '../../spec/spec.js';
import { addInto, linear, normWeight, rmsNorm } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import { type ShortConvBlock, shortConvTensors } from './block.js';

/** The block's weights for the reference; projections are `[out, in]` as in `nn.Linear`. */
export interface ShortConvWeights {
  readonly kind: 'shortconv';
  /** [H] `operator_norm` */
  readonly inputNorm: Float32Array;
  /** [3H, H]: the rows of B, then C, then x. */
  readonly inProj: Float32Array;
  /** [H, kernel] the depthwise convolution (the checkpoint's [H, 1, kernel]), oldest tap first. */
  readonly conv: Float32Array;
  /** [H, H] */
  readonly out: Float32Array;
  /** [3H], [H], [H] when `shortConv.bias`. */
  readonly inBias: Float32Array | undefined;
  readonly convBias: Float32Array | undefined;
  readonly outBias: Float32Array | undefined;
}

/** Reads the block's weights. */
export function readShortConv(take: TakeTensor, spec: ModelSpec, block: ShortConvBlock): ShortConvWeights {
  const shapes = new Map(shortConvTensors(spec, block));
  const n = block.names;
  const get = (name: string) => take(name, shapes.get(name)!);
  const bias = (name: string) => (spec.shortConv!.bias ? get(name) : undefined);
  return {
    kind: 'shortconv',
    inputNorm: normWeight(spec, get(n.norm)),
    inProj: get(n.inProj),
    conv: get(n.conv),
    out: get(n.out),
    inBias: bias(n.inBias),
    convBias: bias(n.convBias),
    outBias: bias(n.outBias),
  };
}

/**
 * One token through the gate and the convolution, from `window` [K - 1, H] (the previous rows of
 * B · x, oldest first; advanced in place): `bcx` [3H] is its in_proj output, `y` [H] receives
 * C ⊙ conv(B ⊙ x). The convolution's sum runs in f64 and is rounded to f32 once, as each result
 * of PyTorch's f32 ops is.
 */
function step(
  w: ShortConvWeights,
  K: number,
  window: Float32Array,
  bcx: Float32Array,
  y: Float32Array,
): void {
  const H = y.length;
  const u = new Float32Array(H); // [H] B ⊙ x, rounded to f32
  for (let c = 0; c < H; c++) u[c] = bcx[c]! * bcx[2 * H + c]!;
  for (let c = 0; c < H; c++) {
    let acc = 0;
    for (let j = 0; j < K - 1; j++) acc += w.conv[c * K + j]! * window[j * H + c]!;
    acc += w.conv[c * K + K - 1]! * u[c]!;
    // The bias is added to the f32 sum, as in `linear`.
    const conv = w.convBias ? Math.fround(acc) + w.convBias[c]! : acc;
    y[c] = bcx[H + c]! * Math.fround(conv);
  }
  window.copyWithin(0, H);
  window.set(u, (K - 2) * H);
}

/**
 * The block's reference forward over the pass's rows, in order: each row's window is its parent's
 * (the committed one for a root; zeros on an empty cache) advanced by its own B · x, which its
 * children and a commit then start from.
 */
export function shortConvRef(pass: RefPass, block: ShortConvBlock, w: ShortConvWeights): void {
  const { spec, T, x } = pass;
  const H = spec.hidden;
  const K = spec.shortConv!.kernel;
  const h = new Float32Array(T * H); // [T, H] the normed input
  const bcx = new Float32Array(T * 3 * H); // [T, 3H] B | C | x
  const y = new Float32Array(T * H); // [T, H] C ⊙ conv(B ⊙ x)
  const proj = new Float32Array(T * H); // [T, H] the block's output before the residual add
  rmsNorm(x, H, w.inputNorm, spec.rmsEps, h);
  const n = block.names;
  linear(pass.input(h, H, [n.inProj]), H, w.inProj, 3 * H, w.inBias, bcx);
  const zeros = () => ({ conv: new Float32Array((K - 1) * H), S: new Float32Array(0) });
  const states = pass.recurrent.beginRows(block.layer);
  for (let t = 0; t < T; t++) {
    const state = pass.recurrent.before(block.layer, pass.parents[t]!, pass.positions[t] === 0, zeros);
    step(w, K, state.conv, bcx.subarray(t * 3 * H, (t + 1) * 3 * H), y.subarray(t * H, (t + 1) * H));
    states.push(state);
  }
  linear(pass.input(y, H, [n.out]), H, w.out, H, w.outBias, proj);
  addInto(x, proj);
}
