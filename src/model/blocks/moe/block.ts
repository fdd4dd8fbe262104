// The mixture-of-experts block's descriptor: which layer, its activation, and its tensors'
// checkpoint names, one name per expert (a family whose checkpoints fuse the experts into one
// tensor presents them as these parts: see Family.fused). Its shapes are here too.
import type { ModelSpec } from '../../spec/spec.js';
import { namer, type Renames, type TensorShapes } from '../names.js';

/**
 * The MLP of one mixture layer: its norm, the router, the chosen experts' gate | up, activation and
 * down summed by their routing weights, a shared expert where the spec has one, and the residual add.
 */
export interface MoeBlock {
  readonly kind: 'moe';
  readonly layer: number;
  /** silu(gate) · up in every expert (GeGLU: gelu_tanh). */
  readonly activation: 'silu' | 'gelu_tanh';
  readonly names: MoeNames;
}

/** The checkpoint names of a mixture block's tensors. */
export interface MoeNames {
  /** [H] the block's input norm. */
  readonly norm: string;
  /** [E, H] the router. */
  readonly router: string;
  /** [E] the selection bias (`spec.moe.selectionBias`). */
  readonly bias: string;
  /** Per expert: [I, H] gate and up, [H, I] down (I = `spec.moe.intermediate`). */
  readonly gate: readonly string[];
  readonly up: readonly string[];
  readonly down: readonly string[];
  /** The shared expert's [Is, H] gate and up, [H, Is] down, and its gate [1, H] (`spec.moe.sharedIntermediate`). */
  readonly sharedGate: string;
  readonly sharedUp: string;
  readonly sharedDown: string;
  readonly sharedRouter: string;
  /** [H] the norm of the block's output before the residual add, when `spec.sandwichNorms`. */
  readonly outNorm: string;
  /** [H] the router's learned input scale (`moe.scaledRouterNorm`); [E] the experts' scales (`moe.perExpertScale`). */
  readonly routerScale: string;
  readonly expertScale: string;
  /**
   * The dense MLP beside the mixture (`moe.besideDense`): its input norm [H], gate and up [I, H],
   * down [H, I] (I = `spec.intermediate`), and the norms of its output and of the experts' sum [H].
   */
  readonly denseNorm: string;
  readonly denseGate: string;
  readonly denseUp: string;
  readonly denseDown: string;
  readonly denseOutNorm: string;
  readonly expertsOutNorm: string;
}

/** The names a family may rename: suffixes under the layer's prefix, `{e}` standing for the expert. */
export interface MoeSuffixes {
  readonly norm: string;
  readonly router: string;
  readonly bias: string;
  readonly gate: string;
  readonly up: string;
  readonly down: string;
  readonly sharedGate: string;
  readonly sharedUp: string;
  readonly sharedDown: string;
  readonly sharedRouter: string;
  readonly outNorm: string;
  readonly routerScale: string;
  readonly expertScale: string;
  readonly denseNorm: string;
  readonly denseGate: string;
  readonly denseUp: string;
  readonly denseDown: string;
  readonly denseOutNorm: string;
  readonly expertsOutNorm: string;
}

/** Hugging Face's Qwen3-MoE / Qwen3.5-MoE naming (per expert, as Qwen3-MoE's published files hold them). */
const QWEN_MOE: MoeSuffixes = {
  norm: 'post_attention_layernorm.weight',
  router: 'mlp.gate.weight',
  bias: 'mlp.expert_bias',
  gate: 'mlp.experts.{e}.gate_proj.weight',
  up: 'mlp.experts.{e}.up_proj.weight',
  down: 'mlp.experts.{e}.down_proj.weight',
  sharedGate: 'mlp.shared_expert.gate_proj.weight',
  sharedUp: 'mlp.shared_expert.up_proj.weight',
  sharedDown: 'mlp.shared_expert.down_proj.weight',
  sharedRouter: 'mlp.shared_expert_gate.weight',
  outNorm: 'post_feedforward_layernorm.weight',
  // Gemma 4's, the family that introduced them.
  routerScale: 'router.scale',
  expertScale: 'router.per_expert_scale',
  denseNorm: 'pre_feedforward_layernorm.weight',
  denseGate: 'mlp.gate_proj.weight',
  denseUp: 'mlp.up_proj.weight',
  denseDown: 'mlp.down_proj.weight',
  denseOutNorm: 'post_feedforward_layernorm_1.weight',
  expertsOutNorm: 'post_feedforward_layernorm_2.weight',
};

/** A mixture block of layer `layer` with `experts` experts, its tensors under `prefix` (Qwen's names unless renamed). */
export function moeBlock(
  layer: number,
  experts: number,
  activation: MoeBlock['activation'],
  prefix = `model.layers.${layer}`,
  renames: Renames<MoeSuffixes> = {},
): MoeBlock {
  const name = namer(prefix, QWEN_MOE, renames);
  const each = (key: 'gate' | 'up' | 'down') =>
    Array.from({ length: experts }, (_, e) => name(key).replace('{e}', String(e)));
  return {
    kind: 'moe',
    layer,
    activation,
    names: {
      norm: name('norm'),
      router: name('router'),
      bias: name('bias'),
      gate: each('gate'),
      up: each('up'),
      down: each('down'),
      sharedGate: name('sharedGate'),
      sharedUp: name('sharedUp'),
      sharedDown: name('sharedDown'),
      sharedRouter: name('sharedRouter'),
      outNorm: name('outNorm'),
      routerScale: name('routerScale'),
      expertScale: name('expertScale'),
      denseNorm: name('denseNorm'),
      denseGate: name('denseGate'),
      denseUp: name('denseUp'),
      denseDown: name('denseDown'),
      denseOutNorm: name('denseOutNorm'),
      expertsOutNorm: name('expertsOutNorm'),
    },
  };
}

/** The spec's mixture, which a mixture block needs. */
export function moeOf(spec: ModelSpec): NonNullable<ModelSpec['moe']> {
  if (!spec.moe) throw new Error(`moe: the ${spec.family} spec has no mixture layers`);
  return spec.moe;
}

/** The block's tensors that the spec says exist, with their shapes, in checkpoint order. */
export function moeTensors(spec: ModelSpec, block: MoeBlock): TensorShapes {
  const n = block.names;
  const m = moeOf(spec);
  const H = spec.hidden;
  const I = m.intermediate;
  const Is = m.sharedIntermediate;
  const experts = n.gate.flatMap((_, e) => [
    [n.gate[e]!, [I, H]] as const,
    [n.up[e]!, [I, H]] as const,
    [n.down[e]!, [H, I]] as const,
  ]);
  return [
    [n.norm, [H]],
    [n.router, [m.experts, H]],
    ...(m.selectionBias ? ([[n.bias, [m.experts]]] as const) : []),
    ...experts,
    ...(Is === undefined
      ? []
      : ([
          [n.sharedGate, [Is, H]],
          [n.sharedUp, [Is, H]],
          [n.sharedDown, [H, Is]],
          [n.sharedRouter, [1, H]],
        ] as const)),
    ...(spec.sandwichNorms ? ([[n.outNorm, [H]]] as const) : []),
    ...(m.scaledRouterNorm ? ([[n.routerScale, [H]]] as const) : []),
    ...(m.perExpertScale ? ([[n.expertScale, [m.experts]]] as const) : []),
    ...(m.besideDense
      ? ([
          [n.denseNorm, [H]],
          [n.denseGate, [spec.intermediate, H]],
          [n.denseUp, [spec.intermediate, H]],
          [n.denseDown, [H, spec.intermediate]],
          [n.denseOutNorm, [H]],
          [n.expertsOutNorm, [H]],
        ] as const)
      : []),
  ];
}
