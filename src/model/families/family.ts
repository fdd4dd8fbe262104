// What a model family is: everything true of one architecture, in one file per family (mlx-lm's
// `models/<family>.py`, llama.cpp's `src/models/<arch>.cpp`), collected in one table (index.ts).
// The rest of weft asks the table and never branches on a family's name.
import type { GgufFile } from '../../formats/gguf/header.js';
import type { GgufEntry } from '../../formats/gguf/write.js';
import type { Block } from '../blocks/blocks.js';
import type { Fields } from '../spec/fields.js';
import type { ModelSpec } from '../spec/spec.js';

/** Reads a config.json's language model (`text`; the file's top level is `root`) as a spec. */
export type ConfigReader = (text: Fields, root: Fields) => ModelSpec;

/** Renames between GGUF and Hugging Face names: [GGUF name, Hugging Face name]. */
export type NamePairs = readonly (readonly [string, string])[];

/** GGUF metadata entries, in the order written. */
export type GgufEntries = (readonly [string, GgufEntry])[];

/**
 * How llama.cpp's converter stores a tensor's values, relative to its Hugging Face values viewed
 * as rows × cols (the first dimension by the rest; a vector is a column): rows and columns moved
 * by permutations, then each value mapped on its own. Absent parts are identities.
 */
export interface StoredForm {
  /** The Hugging Face row of each stored row. */
  readonly hfRow?: (row: number) => number;
  /** The Hugging Face column of each stored column. */
  readonly hfCol?: (col: number) => number;
  /** A stored value's Hugging Face value, and {@link toStored} the way back. */
  readonly toHf?: (x: number) => number;
  readonly toStored?: (x: number) => number;
}

/**
 * A fused projection of a checkpoint and the row ranges of it that stand for plain linears: a
 * matrix [rows, C] (Phi-3's qkv_proj), or a stack of experts [E, R, C] (a mixture's `gate_up_proj`,
 * a GGUF's `ffn_gate_exps`) whose rows are those of its [E · R, C] view.
 */
export interface FusedProjection {
  /** The checkpoint's name, e.g. `model.layers.0.self_attn.qkv_proj.weight`. */
  readonly name: string;
  /** Its shape, [rows, C] or [E, R, C]: the parts' rows, stacked in order. */
  readonly shape: readonly [number, number] | readonly [number, number, number];
  /** Each part's plain name (the block's) and its rows [row0, row0 + rows) (of the [E · R, C] view). */
  readonly parts: readonly { readonly name: string; readonly row0: number; readonly rows: number }[];
  /**
   * Where weft writes it fused (`fuseProjections`): into checkpoints (as the published files hold
   * it), into GGUF files (as llama.cpp's converter writes it), or never (a layout read only, such as
   * Transformers 5's fused experts of a family published per expert); absent, both.
   */
  readonly written?: 'checkpoint' | 'gguf' | 'never';
}

/** A family's GGUF side: llama.cpp's architecture, both ways. */
export interface GgufFamily {
  /** llama.cpp's `general.architecture` for the family (what the exporter writes). */
  readonly arch: string;
  /**
   * Whether a file of {@link arch} reads as this family; false where another family owns the
   * architecture (Mistral's GGUFs are Llama's, and read back as Llama).
   */
  readonly reads: boolean;
  /** The spec of a file of this architecture, from its metadata (and tensors where they hold some). */
  spec(g: GgufFile): Promise<ModelSpec>;
  /**
   * The `<arch>.*` metadata of a spec, in the order llama.cpp's converter writes it. Throws
   * InvalidInputError for a spec llama.cpp's loader would run differently from weft.
   */
  metadata(spec: ModelSpec): GgufEntries;
  /** Tensor renames: whole names, and per-layer suffixes (after `blk.N.` and `model.layers.N.`). */
  readonly names: { readonly global: NamePairs; readonly layer: NamePairs };
  /**
   * Hugging Face name suffixes of depthwise convolutions [C, 1, K] that llama.cpp's converter
   * squeezes to `ne` [K, C].
   */
  readonly squeezed: readonly string[];
  /** How llama.cpp's converter stores the values of tensor `hfName` (Hugging Face shape `shape`). */
  storedForm(spec: ModelSpec, hfName: string, shape: readonly number[]): StoredForm;
  /**
   * The F32 vectors llama.cpp's converter generates with no Hugging Face tensor behind them
   * (`generate_extra_tensors`), as [GGUF name, values]: Gemma 4's `rope_freqs.weight`. Absent: none
   * beyond the RoPE factors the exporter writes for a spec's scaling.
   */
  extraTensors?(spec: ModelSpec): readonly (readonly [string, Float32Array])[];
}

/** Everything true of one model family. */
export interface Family {
  /**
   * The config.json `model_type`s the family reads, each with its reader (a vision-language
   * wrapper's reader finds the language model in `text_config`: {@link wrapped}).
   */
  readonly configTypes: Readonly<Record<string, ConfigReader>>;
  /**
   * A config.json that reads back as `spec` (the inverse of the readers for what weft reads):
   * written for a model converted from GGUF, whose metadata has no config.json.
   */
  config(spec: ModelSpec): Record<string, unknown>;
  /** The model's forward as blocks in order, under the checkpoint's names. */
  blocks(spec: ModelSpec): Block[];
  /** The checkpoint name of the final norm's weight. */
  readonly finalNorm: string;
  /**
   * Layer `layer`'s fused projections as the family's checkpoints store them (Phi-3's qkv_proj and
   * gate_up_proj): read as their parts, written fused. None for a family that stores them apart.
   */
  fused(spec: ModelSpec, layer: number): FusedProjection[];
  readonly gguf: GgufFamily;
}
