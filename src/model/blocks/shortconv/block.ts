// The short-convolution block's descriptor: which layer, and its tensors' checkpoint names (LFM2's
// `conv.*` unless a family renames them). Its shapes are here too, the one place they are written.
import type { ModelSpec } from '../../spec/spec.js';
import { namer, type Renames, type TensorShapes } from '../names.js';

/**
 * LFM2's gated short convolution of one decoder layer: its input norm, in_proj to B | C | x, a
 * causal depthwise convolution over B · x, C · conv, out_proj and the residual add. Its state is
 * the layer's last `kernel - 1` rows of B · x.
 */
export interface ShortConvBlock {
  readonly kind: 'shortconv';
  readonly layer: number;
  readonly names: ShortConvNames;
}

/** The checkpoint names of a short-convolution block's tensors. */
export interface ShortConvNames {
  /** [H] the input norm. */
  readonly norm: string;
  /** [3H, H]: the rows of B, then C, then x; its bias [3H] when `shortConv.bias`. */
  readonly inProj: string;
  readonly inBias: string;
  /** [H, 1, kernel] the depthwise convolution; its bias [H]. */
  readonly conv: string;
  readonly convBias: string;
  /** [H, H]; its bias [H]. */
  readonly out: string;
  readonly outBias: string;
}

/** LFM2's naming, suffixes under the layer's prefix. */
const LFM2: ShortConvNames = {
  norm: 'operator_norm.weight',
  inProj: 'conv.in_proj.weight',
  inBias: 'conv.in_proj.bias',
  conv: 'conv.conv.weight',
  convBias: 'conv.conv.bias',
  out: 'conv.out_proj.weight',
  outBias: 'conv.out_proj.bias',
};

/** A short-convolution block of layer `layer`, its tensors under `prefix` (LFM2's names unless renamed). */
export function shortConvBlock(
  layer: number,
  prefix = `model.layers.${layer}`,
  renames: Renames<ShortConvNames> = {},
): ShortConvBlock {
  const name = namer(prefix, LFM2, renames);
  return {
    kind: 'shortconv',
    layer,
    names: {
      norm: name('norm'),
      inProj: name('inProj'),
      inBias: name('inBias'),
      conv: name('conv'),
      convBias: name('convBias'),
      out: name('out'),
      outBias: name('outBias'),
    },
  };
}

/** The block's tensors that the spec says exist, with their shapes, in checkpoint order. */
export function shortConvTensors(spec: ModelSpec, block: ShortConvBlock): TensorShapes {
  const sc = spec.shortConv;
  if (!sc) throw new Error(`shortConvTensors: the ${spec.family} spec has no short-convolution sizes`);
  const n = block.names;
  const H = spec.hidden;
  const bias = (name: string, size: number) => (sc.bias ? ([[name, [size]]] as const) : []);
  return [
    [n.norm, [H]],
    [n.inProj, [3 * H, H]],
    ...bias(n.inBias, 3 * H),
    [n.conv, [H, 1, sc.kernel]],
    ...bias(n.convBias, H),
    [n.out, [H, H]],
    ...bias(n.outBias, H),
  ];
}
