import { openGgufCheckpoint } from '../formats/gguf.js';
import { ggufTokenizer } from '../formats/gguf-tokenizer.js';
import { checkTensors } from '../formats/layout.js';
import { openSafetensors, openShardedSafetensors } from '../formats/safetensors.js';
import { openWeftCheckpoint, safetensorsReader, type TensorReader } from '../formats/weft-checkpoint.js';
import type { WeightFormat } from '../kernels/matmul/quant.js';
import { loadTokenizer, type WeftTokenizer } from '../tokenizer/tokenizer.js';
import { specFromConfig, withGenerationConfig } from './config.js';
import { type ModelFiles, readJson } from './files.js';
import type { Rotation } from './quantized.js';
import type { ModelSpec } from './spec.js';

/** weft's own quantized checkpoint, next to config.json and the tokenizer files. */
export const WEFT_WEIGHTS = 'model.weft.safetensors';

/** A Hugging Face checkpoint in one file, and the index of a sharded one. */
const SAFETENSORS = 'model.safetensors';
const SHARD_INDEX = 'model.safetensors.index.json';

/** A folder without config.json holding this file is a GGUF model (how the CLI serves one). */
export const GGUF_IN_FOLDER = 'model.gguf';

/** A model's metadata and tokenizer, and its weights opened (not read). */
export interface OpenedModel {
  readonly spec: ModelSpec;
  readonly tokenizer: WeftTokenizer;
  /** Tensors under Hugging Face names and shapes, whatever the file format. */
  readonly weights: TensorReader;
  /** The tokenizer config has a chat template (an instruct model). */
  readonly chat: boolean;
  /**
   * How a weft-q checkpoint stores its linears: loading at this format (and rotation) copies them
   * to the GPU as stored; any other choice re-quantizes from their dequantized values.
   */
  readonly packed?: { readonly format: WeightFormat; readonly rotation: Rotation };
  /** What the weights were read from, for progress and messages. */
  readonly source: 'safetensors' | 'weft-q' | 'gguf';
}

/**
 * Opens a model, reading only headers and small files; tensors are read one at a time by the
 * loader that places them. Every tensor the spec needs is checked up front for presence and shape
 * ({@link checkTensors}), so a broken checkpoint fails here with a `ModelFormatError` naming
 * the file and the tensor, before anything is placed. Three layouts:
 * - a Hugging Face folder: config.json (+ generation_config.json), tokenizer.json
 *   (+ tokenizer_config.json), and model.safetensors or the sharded index;
 * - the same folder with weft's quantized checkpoint {@link WEFT_WEIGHTS} instead of (or besides;
 *   it wins) the safetensors weights, as `weft convert` writes it;
 * - one GGUF file (`files.gguf`, or {@link GGUF_IN_FOLDER} in a folder without config.json): spec,
 *   tokenizer and weights all from the file.
 */
export async function openModel(files: ModelFiles): Promise<OpenedModel> {
  const gguf = await ggufFileOf(files);
  if (gguf !== undefined) return openGgufModel(files, gguf);
  let spec = specFromConfig(await readJson(files, 'config.json'), `${files.name}/config.json`);
  if (await files.exists('generation_config.json')) {
    spec = withGenerationConfig(spec, await readJson(files, 'generation_config.json'));
  }
  const tokenizerConfig = (await files.exists('tokenizer_config.json'))
    ? await readJson(files, 'tokenizer_config.json')
    : {};
  const tokenizer = loadTokenizer(await readJson(files, 'tokenizer.json'), tokenizerConfig, spec.eosIds);
  const chat =
    typeof tokenizerConfig === 'object' && tokenizerConfig !== null && 'chat_template' in tokenizerConfig;
  const where = (file: string) => `${files.name}/${file}`;
  if (await files.exists(WEFT_WEIGHTS)) {
    const weights = await openWeftCheckpoint(await files.open(WEFT_WEIGHTS));
    checkTensors(spec, weights.tensors, where(WEFT_WEIGHTS));
    // Every linear shares one format and rotation (weft convert's --quant and --rotate).
    const linear = Object.entries(weights.schemes).find(([name]) => name.endsWith('_proj.weight'))?.[1];
    const packed = linear && { format: linear.format, rotation: linear.rotation };
    return { spec, tokenizer, weights, chat, source: 'weft-q', ...(packed ? { packed } : {}) };
  }
  if (await files.exists(SHARD_INDEX)) {
    const st = await openShardedSafetensors(
      await readJson(files, SHARD_INDEX),
      (f) => files.open(f),
      where(SHARD_INDEX),
    );
    // A tensor the index does not list is the index's fault; a wrong shape is its shard's.
    checkTensors(spec, st.tensors, where(SHARD_INDEX), (name) => where(st.tensors.get(name)!.source.name));
    return {
      spec,
      tokenizer,
      weights: safetensorsReader(st, where(SHARD_INDEX)),
      chat,
      source: 'safetensors',
    };
  }
  const st = await openSafetensors(await files.open(SAFETENSORS));
  checkTensors(spec, st.tensors, where(SAFETENSORS));
  return { spec, tokenizer, weights: safetensorsReader(st, where(SAFETENSORS)), chat, source: 'safetensors' };
}

/** The GGUF file the model is, when it is one (see {@link openModel}); else undefined. */
export async function ggufFileOf(files: ModelFiles): Promise<string | undefined> {
  if (files.gguf !== undefined) return files.gguf;
  if (await files.exists('config.json')) return undefined;
  return (await files.exists(GGUF_IN_FOLDER)) ? GGUF_IN_FOLDER : undefined;
}

/**
 * A GGUF model: the spec from its metadata, the tokenizer rebuilt from its embedded vocabulary,
 * and its tensors dequantized to f32 as they are read (quantized GGUF types are then packed to
 * the chosen runtime format like any f32 checkpoint).
 */
async function openGgufModel(files: ModelFiles, file: string): Promise<OpenedModel> {
  const ck = await openGgufCheckpoint(await files.open(file));
  const { tokenizerJson, tokenizerConfig } = ggufTokenizer(ck.file);
  const tokenizer = loadTokenizer(tokenizerJson, tokenizerConfig, ck.spec.eosIds, file);
  return {
    spec: ck.spec,
    tokenizer,
    weights: ck,
    chat: 'chat_template' in tokenizerConfig,
    source: 'gguf',
  };
}
