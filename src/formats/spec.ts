/**
 * The shape of a decoder-only transformer as weft runs it: everything the forward pass, the KV
 * cache and the loaders need to know, derived once from a checkpoint's config (config.json or GGUF
 * metadata). Families differ only by the switches below (mlx-lm style), not by separate code.
 */
export type ModelFamily = 'llama' | 'mistral' | 'qwen2' | 'qwen3';

/** Llama 3 style RoPE frequency scaling (`rope_scaling.rope_type == "llama3"`). */
export interface Llama3RopeScaling {
  readonly factor: number;
  readonly lowFreqFactor: number;
  readonly highFreqFactor: number;
  readonly originalMaxPositions: number;
}

/** Rotary position embedding settings. */
export interface RopeSpec {
  /** Base of the inverse frequencies (`rope_theta`). */
  readonly theta: number;
  readonly scaling?: Llama3RopeScaling;
  /**
   * Pairing of the rotated dimensions: `'half'` rotates (i, i + d/2) as Hugging Face checkpoints do;
   * `'interleaved'` rotates (2i, 2i + 1) as llama.cpp's llama GGUFs store Q and K.
   */
  readonly layout: 'half' | 'interleaved';
}

/** A model's architecture. Sizes are element counts. */
export interface ModelSpec {
  readonly family: ModelFamily;
  readonly vocabSize: number;
  /** Residual stream width (`hidden_size`). */
  readonly hidden: number;
  /** MLP inner width (`intermediate_size`). */
  readonly intermediate: number;
  readonly layers: number;
  /** Query heads. */
  readonly heads: number;
  /** Key/value heads (GQA when fewer than `heads`). */
  readonly kvHeads: number;
  /** Per-head width; Qwen3 sets it explicitly and it may differ from hidden / heads. */
  readonly headDim: number;
  readonly rmsEps: number;
  readonly rope: RopeSpec;
  /** Longest context the checkpoint was trained for (`max_position_embeddings`). */
  readonly maxPositions: number;
  /** The LM head reuses the embedding table. */
  readonly tiedEmbeddings: boolean;
  /** q/k/v projections have biases (Qwen2). */
  readonly qkvBias: boolean;
  /** RMSNorm on each head of q and k before RoPE (Qwen3). */
  readonly qkNorm: boolean;
  readonly bosId: number | undefined;
  /** Generation stops on any of these. */
  readonly eosIds: readonly number[];
}

/** Sizes derived from a spec, computed here and nowhere else. */
export interface DerivedSizes {
  /** heads * headDim: width of the attention output and of q. */
  readonly qWidth: number;
  /** kvHeads * headDim: width of k and v per token. */
  readonly kvWidth: number;
  /** Query heads per KV head. */
  readonly groupSize: number;
}

/** Derives the sizes every consumer of a {@link ModelSpec} needs. */
export function deriveSizes(spec: ModelSpec): DerivedSizes {
  return {
    qWidth: spec.heads * spec.headDim,
    kvWidth: spec.kvHeads * spec.headDim,
    groupSize: spec.heads / spec.kvHeads,
  };
}
