// The MLP block on the GPU (blocks.ts, mlp.ts): its weights as placed, its linears and its encode.

import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { linearsByInput } from '../../tensors.js';
import type { MlpBlock } from '../blocks.js';
import { layerPrefix } from '../blocks.js';
import { encodeResidual, normedInput, rotatedInput } from '../encode.js';
import type { GpuPass, KernelBuilder, Linear, Placer } from '../gpu.js';
import { mlpNormName } from './reference.js';

/**
 * The MLP block's weights on the GPU. Ip is the MLP width as packed (see `placeWeights`): I, or I
 * padded with zero rows of gate/up and zero columns of down.
 */
export interface MlpGpuWeights {
  readonly kind: 'mlp';
  readonly activation: MlpBlock['activation'];
  readonly postNorm: GPUBuffer; // [H] the input norm (post_attention_layernorm, Gemma's pre_feedforward_layernorm)
  readonly outNorm: GPUBuffer | undefined; // [H] Gemma's norm of the block's output
  // gate_proj and up_proj as one gated pair (uploadGatedPair: silu(gate·x) * (up·x) in one matmul)
  // where their formats and blocks allow; else the two matrices.
  readonly gateUp: GpuMatrix | readonly [GpuMatrix, GpuMatrix]; // gated [Ip, H] | [Ip, H], [Ip, H]
  readonly down: GpuMatrix; // [H, Ip]
}

/** The MLP block's linears, bound to its matrices. */
export interface MlpKernels {
  readonly kind: 'mlp';
  // Gated pair: [T, H] → [T, Ip] silu(gate) * up; else gate and up: → [T, Ip] each
  readonly gateUp: Linear | readonly [Linear, Linear];
  readonly down: Linear; // [T, Ip] → [T, H] (added into x when fused.add)
}

/** Places the block's tensors. */
export async function placeMlp(placer: Placer, block: MlpBlock): Promise<MlpGpuWeights> {
  const { spec } = placer;
  const H = spec.hidden;
  const I = spec.intermediate;
  const linears = linearsByInput(block.layer, spec);
  const [gate, up] = linears.gateUp;
  const p = layerPrefix(block.layer);
  return {
    kind: 'mlp',
    activation: block.activation,
    postNorm: await placer.norm(mlpNormName(spec, block.layer), H),
    outNorm: spec.sandwichNorms ? await placer.norm(`${p}.post_feedforward_layernorm.weight`, H) : undefined,
    // Labelled as the gate's module, e.g. `mlp.gate_up_proj.weight` (LFM2: `feed_forward.gate_up_proj.weight`).
    gateUp: await placer.paired(
      gate.replace(/[^.]+\.weight$/, 'gate_up_proj.weight'),
      [gate, I, H],
      [up, I, H],
    ),
    down: await placer.matrix(linears.down[0], H, I),
  };
}

/** The block's matrices, each once (paired or not). */
export function mlpMatrices(w: MlpGpuWeights): GpuMatrix[] {
  return [...('parts' in w.gateUp ? [w.gateUp] : w.gateUp), w.down];
}

/** The block's linears: a gated pair takes the post-attention norm and the SiLU gate. */
export function mlpKernels(kb: KernelBuilder, w: MlpGpuWeights): MlpKernels {
  return {
    kind: 'mlp',
    gateUp:
      'parts' in w.gateUp
        ? kb.linear(w.gateUp, {
            ...kb.norm(w.postNorm),
            epilogue: w.activation === 'gelu_tanh' ? 'gelu' : 'silu',
          })
        : [kb.linear(w.gateUp[0]), kb.linear(w.gateUp[1])],
    // With a norm of its output (Gemma), down stores and the norm-add kernel adds.
    down: kb.linear(w.down, w.outNorm ? {} : { epilogue: 'add' }),
  };
}

/**
 * Encodes the block: silu(gate) * up from one gated matmul (the post-attention norm folded in), or
 * each step; then x += down(act).
 */
export function encodeMlp(p: GpuPass, w: MlpGpuWeights, k: MlpKernels): void {
  const { a, T } = p;
  p.section('mlp');
  if ('encode' in k.gateUp) {
    k.gateUp.encode(p.pass, k.gateUp.fused.norm ? a.x : normedInput(p, w.postNorm), a.act, T);
  } else {
    const hm = normedInput(p, w.postNorm);
    k.gateUp[0].encode(p.pass, hm, a.gate, T);
    k.gateUp[1].encode(p.pass, hm, a.up, T);
    p.k.silu.encode(p.pass, [a.gate, a.up], a.act, T);
  }
  p.section('down');
  encodeResidual(p, k.down, rotatedInput(p, p.k.rot?.mlp, a.act), w.outNorm);
}
