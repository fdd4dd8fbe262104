// The Gated DeltaNet block's descriptor: which layer, and its tensors' checkpoint names (Qwen3.5's
// `linear_attn.*` unless a family renames them). Its shapes are here too, the one place they are
// written.
import { deltaNetWidths, type ModelSpec } from '../../spec/spec.js';
import { namer, type Renames, type TensorShapes } from '../names.js';

/**
 * Gated DeltaNet linear attention of one decoder layer (Qwen3.5's `linear_attention` layers): its
 * input norm, the projections, the causal convolution, the gated delta rule, the gated norm,
 * out_proj and the residual add. Its state is the layer's convolution window and recurrent state.
 */
export interface DeltaNetBlock {
  readonly kind: 'deltanet';
  readonly layer: number;
  readonly names: DeltaNetNames;
}

/** The checkpoint names of a DeltaNet block's tensors. */
export interface DeltaNetNames {
  /** [H] the input norm. */
  readonly norm: string;
  /** The projections of the normed input: [convChannels, H] (q | k | v), [valueWidth, H] (the gate z), [valueHeads, H] (b, a). */
  readonly qkv: string;
  readonly z: string;
  readonly b: string;
  readonly a: string;
  /** [convChannels, 1, convKernel] the depthwise convolution over q | k | v. */
  readonly conv: string;
  /** [valueHeads] each: the decay's bias and log rate. */
  readonly dtBias: string;
  readonly aLog: string;
  /** [valueDim] the gated norm's weight (plain, not zero-centred). */
  readonly gatedNorm: string;
  /** [H, valueWidth] */
  readonly out: string;
}

/** Qwen3.5's naming, suffixes under the layer's prefix. */
const QWEN35: DeltaNetNames = {
  norm: 'input_layernorm.weight',
  qkv: 'linear_attn.in_proj_qkv.weight',
  z: 'linear_attn.in_proj_z.weight',
  b: 'linear_attn.in_proj_b.weight',
  a: 'linear_attn.in_proj_a.weight',
  conv: 'linear_attn.conv1d.weight',
  dtBias: 'linear_attn.dt_bias',
  aLog: 'linear_attn.A_log',
  gatedNorm: 'linear_attn.norm.weight',
  out: 'linear_attn.out_proj.weight',
};

/** A DeltaNet block of layer `layer`, its tensors under `prefix` (Qwen3.5's names unless renamed). */
export function deltaNetBlock(
  layer: number,
  prefix = `model.layers.${layer}`,
  renames: Renames<DeltaNetNames> = {},
): DeltaNetBlock {
  const name = namer(prefix, QWEN35, renames);
  return {
    kind: 'deltanet',
    layer,
    names: {
      norm: name('norm'),
      qkv: name('qkv'),
      z: name('z'),
      b: name('b'),
      a: name('a'),
      conv: name('conv'),
      dtBias: name('dtBias'),
      aLog: name('aLog'),
      gatedNorm: name('gatedNorm'),
      out: name('out'),
    },
  };
}

/** The block's tensors with their shapes, in checkpoint order. */
export function deltaNetTensors(spec: ModelSpec, block: DeltaNetBlock): TensorShapes {
  const dn = spec.deltaNet;
  if (!dn) throw new Error(`deltaNetTensors: the ${spec.family} spec has no DeltaNet sizes`);
  const n = block.names;
  const { valueWidth, convChannels } = deltaNetWidths(spec);
  const H = spec.hidden;
  return [
    [n.norm, [H]],
    [n.qkv, [convChannels, H]],
    [n.z, [valueWidth, H]],
    [n.b, [dn.valueHeads, H]],
    [n.a, [dn.valueHeads, H]],
    [n.conv, [convChannels, 1, dn.convKernel]],
    [n.dtBias, [dn.valueHeads]],
    [n.aLog, [dn.valueHeads]],
    [n.gatedNorm, [dn.valueDim]],
    [n.out, [H, valueWidth]],
  ];
}
