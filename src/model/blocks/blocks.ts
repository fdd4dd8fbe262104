// A model's forward as a list of blocks, built from its config by its family's description (mlx-lm's
// per-family module over shared layers, llama.cpp's graph builders over shared helpers). The GPU
// runner encodes the list and the reference runner runs it, so the two cannot drift apart in
// structure. Each block kind lives in its own file (attention.ts, mlp.ts) with everything it owns:
// its tensors, its reference forward, its placement on the GPU, its kernels, its encode and its state
// (the attention block's KV cache). A new architecture adds a kind there and a family here.
import { layerKind, type ModelFamily, type ModelSpec } from '../spec/spec.js';

/**
 * Self-attention of one decoder layer: its input norm, q | k | v (with the family's bias or QK-norm),
 * RoPE and the KV cache write, attention over the cache (causal, or a draft tree's ancestors), o,
 * and the residual add. Its state is the layer's KV cache.
 */
export interface AttentionBlock {
  readonly kind: 'attention';
  readonly layer: number;
}

/** The gated MLP of one decoder layer: its norm, gate | up, the activation, down and the residual add. */
export interface MlpBlock {
  readonly kind: 'mlp';
  readonly layer: number;
  /** silu(gate) · up (Llama, Qwen), or gelu_tanh(gate) · up (Gemma's GeGLU). */
  readonly activation: 'silu' | 'gelu_tanh';
}

/**
 * Gated DeltaNet linear attention of one decoder layer (Qwen3.5): its input norm, the projections,
 * the causal convolution, the gated delta rule, the gated norm, out_proj and the residual add. Its
 * state is the layer's convolution window and recurrent state (linear.ts).
 */
export interface LinearAttentionBlock {
  readonly kind: 'linear';
  readonly layer: number;
}

/**
 * LFM2's gated short convolution of one decoder layer: its input norm (`operator_norm`), in_proj to
 * B | C | x, a causal depthwise convolution over B · x, C · conv, out_proj and the residual add. Its
 * state is the layer's last `kernel - 1` rows of B · x (shortconv.ts).
 */
export interface ShortConvBlock {
  readonly kind: 'conv';
  readonly layer: number;
}

/** One block of a model's forward. */
export type Block = AttentionBlock | LinearAttentionBlock | ShortConvBlock | MlpBlock;

/** A family's description: its blocks in forward order, built from the spec. */
export type FamilyBlocks = (spec: ModelSpec) => Block[];

/**
 * Llama, Mistral, Qwen2, Qwen3 and Qwen3.5: per layer, its token mixer (attention, or Qwen3.5's
 * Gated DeltaNet where `spec.layerKinds` says so) then a SiLU-gated MLP. What else sets them apart
 * (q/k/v bias, QK-norm, an output gate, partial rotary, zero-centred norms, tied head, RoPE
 * scaling) are switches of the spec the blocks read.
 */
const decoderLayers: FamilyBlocks = (spec) =>
  Array.from({ length: spec.layers }, (_, layer): Block[] => [
    { kind: layerKind(spec, layer), layer },
    { kind: 'mlp', layer, activation: spec.activation ?? 'silu' },
  ]).flat();

/** Every family's description. */
export const FAMILIES: Readonly<Record<ModelFamily, FamilyBlocks>> = {
  llama: decoderLayers,
  mistral: decoderLayers,
  qwen2: decoderLayers,
  qwen3: decoderLayers,
  qwen3_5: decoderLayers,
  // Gemma 3: the same two blocks per layer; its sandwich norms, GeGLU, sliding windows and scaled
  // embedding are switches of the spec.
  gemma3: decoderLayers,
  // SmolLM3: a Llama whose `noRopeLayers` skip RoPE.
  smollm3: decoderLayers,
  // LFM2: per layer a short convolution or attention (with QK-norm), then a SiLU-gated MLP, under
  // LFM2's own tensor names.
  lfm2: decoderLayers,
  // Phi-3: a Llama whose fused qkv_proj and gate_up_proj the loader splits (`splitFusedView`),
  // with partial rotary and LongRoPE as switches of the spec.
  phi3: decoderLayers,
  // Ministral 3: a Llama whose YaRN RoPE and query temperature are switches of the spec.
  ministral3: decoderLayers,
};

/** The blocks of a model's forward, in order. */
export function modelBlocks(spec: ModelSpec): Block[] {
  return FAMILIES[spec.family](spec);
}

/** The checkpoint name prefix of a layer's tensors. */
export function layerPrefix(layer: number): string {
  return `model.layers.${layer}`;
}

/** Whether `blocks[i]` is the first (or the last) block of its layer: where steering reads and writes. */
export function layerEdges(blocks: readonly Block[], i: number): { first: boolean; last: boolean } {
  const layer = blocks[i]!.layer;
  return { first: blocks[i - 1]?.layer !== layer, last: blocks[i + 1]?.layer !== layer };
}
