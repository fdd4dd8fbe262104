// The MLP block (blocks.ts): a decoder layer's post-attention norm, gate | up, the activation and
// down, added into the residual stream. Its tensors and reference forward here; its GPU side in
// mlp-gpu.ts.
import { linearsByInput } from '../../formats/layout.js';
import type { ModelSpec } from '../../formats/spec.js';
import { addInto, linear, normWeight, rmsNorm } from '../ops.js';
import type { MlpBlock } from './blocks.js';
import { layerPrefix } from './blocks.js';
import type { RefPass, TakeTensor } from './pass.js';

/** The MLP block's weights for the reference; projections are `[out, in]` as in `nn.Linear`. */
export interface MlpWeights {
  readonly kind: 'mlp';
  /** [H] */
  readonly postNorm: Float32Array;
  /** [I, H] each */
  readonly gate: Float32Array;
  readonly up: Float32Array;
  /** [H, I] */
  readonly down: Float32Array;
}

/** The block's tensors under the checkpoint's names, with their shapes. */
export function mlpTensors(spec: ModelSpec, block: MlpBlock): [string, number[]][] {
  const H = spec.hidden;
  const I = spec.intermediate;
  const names = linearsByInput(block.layer);
  return [
    [`${layerPrefix(block.layer)}.post_attention_layernorm.weight`, [H]],
    [names.gateUp[0], [I, H]],
    [names.gateUp[1], [I, H]],
    [names.down[0], [H, I]],
  ];
}

/** Reads the block's weights. */
export function readMlp(take: TakeTensor, spec: ModelSpec, block: MlpBlock): MlpWeights {
  const [norm, gate, up, down] = mlpTensors(spec, block).map(([name, shape]) => take(name, shape));
  return { kind: 'mlp', postNorm: normWeight(spec, norm!), gate: gate!, up: up!, down: down! };
}

/**
 * The block's reference forward: x += down(silu(gate(h)) * up(h)), h = rmsnorm(x); SiLU in f32 as
 * PyTorch rounds it, then the product rounded again.
 */
export function mlpRef(pass: RefPass, block: MlpBlock, w: MlpWeights): void {
  const { spec, T, x } = pass;
  const H = spec.hidden;
  const I = spec.intermediate;
  const names = linearsByInput(block.layer);
  const h = new Float32Array(T * H); // [T, H]
  const gate = new Float32Array(T * I); // [T, I]
  const up = new Float32Array(T * I); // [T, I]
  const proj = new Float32Array(T * H); // [T, H]
  rmsNorm(x, H, w.postNorm, spec.rmsEps, h);
  const hm = pass.input(h, H, names.gateUp);
  linear(hm, H, w.gate, I, undefined, gate);
  linear(hm, H, w.up, I, undefined, up);
  for (let i = 0; i < gate.length; i++) {
    const g = gate[i]!;
    gate[i] = Math.fround(g / (1 + Math.exp(-g))) * up[i]!;
  }
  linear(pass.input(gate, I, names.down), I, w.down, H, undefined, proj);
  addInto(x, proj);
}
