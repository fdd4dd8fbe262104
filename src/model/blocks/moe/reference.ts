// The mixture block's reference forward (its descriptor and tensors in block.ts, its GPU side in
// gpu.ts): the norm, the router's scores and choice (routeRef), each chosen expert's SwiGLU MLP
// weighted by its routing weight, the shared expert gated by its sigmoid, added into the residual
// stream. The routing is kernels/moe's routeRef, the route kernel's reference.
import { geluTanh } from '../../../kernels/elementwise/elementwise.js';
import { routeRef } from '../../../kernels/moe/route-ref.js';
import type { ModelSpec } from '../../spec/spec.js';
import { addInto, linear, normWeight, rmsNorm } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import { type MoeBlock, moeOf } from './block.js';

/** The mixture block's weights for the reference; projections are `[out, in]` as in `nn.Linear`. */
export interface MoeWeights {
  readonly kind: 'moe';
  /** [H] the block's input norm, as it multiplies. */
  readonly norm: Float32Array;
  /** [E, H] */
  readonly router: Float32Array;
  /** [E] the selection bias, when `moe.selectionBias`. */
  readonly bias: Float32Array | undefined;
  /** Per expert: [I, H] gate and up, [H, I] down. */
  readonly gate: readonly Float32Array[];
  readonly up: readonly Float32Array[];
  readonly down: readonly Float32Array[];
  /** The shared expert and its gate [1, H], when `moe.sharedIntermediate`. */
  readonly shared:
    | {
        readonly gate: Float32Array;
        readonly up: Float32Array;
        readonly down: Float32Array;
        readonly router: Float32Array;
      }
    | undefined;
  /** [H] the norm of the block's output before the residual add, when `spec.sandwichNorms`. */
  readonly outNorm: Float32Array | undefined;
  /**
   * [H] the router's input norm as it multiplies (`moe.scaledRouterNorm`: its learned scale times
   * 1/√H, on a weightless norm); undefined: the router reads the experts' normed input.
   */
  readonly routerNorm: Float32Array | undefined;
  /** [E] each expert's scale on its routing weight (`moe.perExpertScale`). */
  readonly expertScale: Float32Array | undefined;
  /** The dense MLP beside the mixture and the norms of the two outputs (`moe.besideDense`). */
  readonly dense:
    | {
        readonly norm: Float32Array;
        readonly gate: Float32Array;
        readonly up: Float32Array;
        readonly down: Float32Array;
        readonly outNorm: Float32Array;
        readonly expertsOutNorm: Float32Array;
      }
    | undefined;
}

/** Reads the block's weights. */
export function readMoe(take: TakeTensor, spec: ModelSpec, block: MoeBlock): MoeWeights {
  const m = moeOf(spec);
  const n = block.names;
  const H = spec.hidden;
  const I = m.intermediate;
  const Is = m.sharedIntermediate;
  return {
    kind: 'moe',
    norm: normWeight(spec, take(n.norm, [H])),
    router: take(n.router, [m.experts, H]),
    bias: m.selectionBias ? take(n.bias, [m.experts]) : undefined,
    gate: n.gate.map((name) => take(name, [I, H])),
    up: n.up.map((name) => take(name, [I, H])),
    down: n.down.map((name) => take(name, [H, I])),
    shared:
      Is === undefined
        ? undefined
        : {
            gate: take(n.sharedGate, [Is, H]),
            up: take(n.sharedUp, [Is, H]),
            down: take(n.sharedDown, [H, Is]),
            router: take(n.sharedRouter, [1, H]),
          },
    outNorm: spec.sandwichNorms ? normWeight(spec, take(n.outNorm, [H])) : undefined,
    routerNorm: m.scaledRouterNorm ? scaledRouterNorm(take(n.routerScale, [H])) : undefined,
    expertScale: m.perExpertScale ? take(n.expertScale, [m.experts]) : undefined,
    dense: m.besideDense
      ? {
          norm: normWeight(spec, take(n.denseNorm, [H])),
          gate: take(n.denseGate, [spec.intermediate, H]),
          up: take(n.denseUp, [spec.intermediate, H]),
          down: take(n.denseDown, [H, spec.intermediate]),
          outNorm: normWeight(spec, take(n.denseOutNorm, [H])),
          expertsOutNorm: normWeight(spec, take(n.expertsOutNorm, [H])),
        }
      : undefined,
  };
}

/**
 * Gemma 4's router input norm as one weight: its learned scale [H] times 1/√H (Transformers
 * multiplies the weightless norm by the scale, then by H^-½; one f32 product here).
 */
function scaledRouterNorm(scale: Float32Array): Float32Array {
  const r = 1 / Math.sqrt(scale.length);
  return scale.map((v) => Math.fround(v * r));
}

/**
 * One SwiGLU (or GeGLU) MLP over rows `h` [R, H]: down(act(gate · h) · (up · h)) [R, H], f32-rounded.
 * `names` (the shared expert's) pass its inputs through `pass.input` as a dense linear's; a routed
 * expert's matmuls read the rows as they are (no W8A8 rounding, no statistics).
 */
function expertRef(
  pass: RefPass,
  h: Float32Array,
  w: { readonly gate: Float32Array; readonly up: Float32Array; readonly down: Float32Array },
  I: number,
  activation: MoeBlock['activation'],
  names?: readonly [string, string, string],
): Float32Array {
  const H = pass.spec.hidden;
  const R = h.length / H;
  const g = new Float32Array(R * I);
  const u = new Float32Array(R * I);
  const hm = names ? pass.input(h, H, [names[0], names[1]]) : h;
  linear(hm, H, w.gate, I, undefined, g);
  linear(hm, H, w.up, I, undefined, u);
  const act = activation === 'gelu_tanh' ? geluTanh : (v: number) => v / (1 + Math.exp(-v));
  for (let i = 0; i < g.length; i++) g[i] = Math.fround(act(g[i]!)) * u[i]!;
  const out = new Float32Array(R * H);
  linear(names ? pass.input(g, I, [names[2]]) : g, I, w.down, H, undefined, out);
  return out;
}

/**
 * The block's reference forward: h = rmsnorm(x); each row's chosen experts run on it (each expert
 * once, over the rows that chose it) and their outputs are summed by routing weight in the row's
 * choice order (f64); the shared expert's output times sigmoid(shared gate · h) is added; then
 * (sandwich norms) normed, and added into x.
 */
export function moeRef(pass: RefPass, block: MoeBlock, w: MoeWeights): void {
  const { spec, T, x } = pass;
  const m = moeOf(spec);
  const H = spec.hidden;
  const E = m.experts;
  const k = m.topK;
  const n = block.names;
  const h = new Float32Array(T * H);
  rmsNorm(x, H, w.norm, spec.rmsEps, h);
  // Gemma 4's router reads x through its own (scaled) norm; the others the experts' input.
  const hr = w.routerNorm ? new Float32Array(T * H) : h;
  if (w.routerNorm) rmsNorm(x, H, w.routerNorm, spec.rmsEps, hr);
  const logits = new Float32Array(T * E);
  linear(hr, H, w.router, E, undefined, logits);
  const route = routeRef(logits, m, w.bias, w.expertScale);
  // Each expert's rows, run together; its outputs kept per (row, choice).
  const outs: Float32Array[] = new Array(T * k);
  for (let e = 0; e < E; e++) {
    const slots: number[] = [];
    for (let s = 0; s < T * k; s++) if (route.experts[s] === e) slots.push(s);
    if (slots.length === 0) continue;
    const he = new Float32Array(slots.length * H);
    slots.forEach((s, r) => {
      const t = Math.floor(s / k);
      he.set(h.subarray(t * H, (t + 1) * H), r * H);
    });
    const y = expertRef(
      pass,
      he,
      { gate: w.gate[e]!, up: w.up[e]!, down: w.down[e]! },
      m.intermediate,
      block.activation,
    );
    slots.forEach((s, r) => {
      outs[s] = y.subarray(r * H, (r + 1) * H);
    });
  }
  const sum = new Float32Array(T * H);
  const shared = w.shared
    ? {
        out: expertRef(pass, h, w.shared, m.sharedIntermediate!, block.activation, [
          n.sharedGate,
          n.sharedUp,
          n.sharedDown,
        ]),
        gate: (() => {
          const g = new Float32Array(T);
          linear(h, H, w.shared.router, 1, undefined, g);
          return g.map((v) => 1 / (1 + Math.exp(-v)));
        })(),
      }
    : undefined;
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < H; i++) {
      let acc = 0;
      for (let j = 0; j < k; j++) acc += route.weights[t * k + j]! * outs[t * k + j]![i]!;
      if (shared) acc += shared.gate[t]! * shared.out[t * H + i]!;
      sum[t * H + i] = acc;
    }
  }
  if (w.dense) {
    // Gemma 4: norm(norm1(dense MLP(norm(x))) + norm2(experts)), then the residual add.
    const d = w.dense;
    const hd = new Float32Array(T * H);
    rmsNorm(x, H, d.norm, spec.rmsEps, hd);
    const names = [n.denseGate, n.denseUp, n.denseDown] as const;
    const dense = expertRef(pass, hd, d, spec.intermediate, block.activation, names);
    rmsNorm(dense, H, d.outNorm, spec.rmsEps, dense);
    rmsNorm(sum, H, d.expertsOutNorm, spec.rmsEps, sum);
    addInto(sum, dense);
  }
  if (w.outNorm) rmsNorm(sum, H, w.outNorm, spec.rmsEps, sum);
  addInto(x, sum);
}
