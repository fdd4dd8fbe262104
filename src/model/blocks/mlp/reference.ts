// The MLP block's reference forward (its descriptor and tensors in block.ts, its GPU side in
// gpu.ts): a decoder layer's MLP norm, gate | up, the activation and down, added into the residual
// stream.

import { geluTanh } from '../../../kernels/elementwise/elementwise.js';
import { layerSpec, type ModelSpec } from '../../spec/spec.js';
import { addInto, linear, normWeight, rmsNorm } from '../ops.js';
import type { RefPass, TakeTensor } from '../pass.js';
import { type MlpBlock, mlpTensors } from './block.js';

/** The MLP block's weights for the reference; projections are `[out, in]` as in `nn.Linear`. */
export interface MlpWeights {
  readonly kind: 'mlp';
  /** [H] the block's input norm (`post_attention_layernorm`; Gemma's `pre_feedforward_layernorm`) */
  readonly postNorm: Float32Array;
  /** [H] the norm of the block's output before the residual add, when `spec.sandwichNorms`. */
  readonly outNorm: Float32Array | undefined;
  /** [I, H] each */
  readonly gate: Float32Array;
  readonly up: Float32Array;
  /** [H, I] */
  readonly down: Float32Array;
}

/** Reads the block's weights. */
export function readMlp(take: TakeTensor, spec: ModelSpec, block: MlpBlock): MlpWeights {
  const [norm, gate, up, down, out] = mlpTensors(spec, block).map(([name, shape]) => take(name, shape));
  return {
    kind: 'mlp',
    postNorm: normWeight(spec, norm!),
    gate: gate!,
    up: up!,
    down: down!,
    outNorm: out ? normWeight(spec, out) : undefined,
  };
}

/**
 * The block's reference forward: x += down(act(gate(h)) * up(h)), h = rmsnorm(x), act SiLU or
 * GELU-tanh, rounded to f32 as PyTorch rounds it, then the product rounded again; with sandwich
 * norms the output is normed before the add.
 */
export function mlpRef(pass: RefPass, block: MlpBlock, w: MlpWeights): void {
  const { T, x } = pass;
  const spec = layerSpec(pass.spec, block.layer);
  const H = spec.hidden;
  const I = spec.intermediate;
  const n = block.names;
  const h = new Float32Array(T * H); // [T, H]
  const gate = new Float32Array(T * I); // [T, I]
  const up = new Float32Array(T * I); // [T, I]
  const proj = new Float32Array(T * H); // [T, H]
  rmsNorm(x, H, w.postNorm, spec.rmsEps, h);
  const hm = pass.input(h, H, [n.gate, n.up]);
  linear(hm, H, w.gate, I, undefined, gate);
  linear(hm, H, w.up, I, undefined, up);
  const act = block.activation === 'gelu_tanh' ? geluTanh : (g: number) => g / (1 + Math.exp(-g));
  for (let i = 0; i < gate.length; i++) gate[i] = Math.fround(act(gate[i]!)) * up[i]!;
  linear(pass.input(gate, I, [n.down]), I, w.down, H, undefined, proj);
  if (w.outNorm) rmsNorm(proj, H, w.outNorm, spec.rmsEps, proj); // Gemma: normed before the add
  addInto(x, proj);
}
