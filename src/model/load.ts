import { ModelFormatError } from '../formats/errors.js';
import { type ModelFiles, modelFilePath, parseJson, readJson } from '../formats/io/files.js';
import {
  openSafetensors,
  openShardedSafetensors,
  type SafetensorsCheckpoint,
} from '../formats/safetensors.js';
import { openWeftCheckpoint, safetensorsReader, type TensorReader } from '../formats/weft-checkpoint.js';
import { isIntFormat, type WeightFormat } from '../quant/formats.js';
import { isLinear } from '../quant/pack.js';
import { loadTokenizer, type WeftTokenizer } from '../tokenizer/tokenizer.js';
import { specFromConfig } from './families/index.js';
import { splitFusedView } from './fused-view.js';
import type { Packing } from './quantized.js';
import { withGenerationConfig } from './spec/generation.js';
import type { ModelSpec } from './spec/spec.js';
import { checkTensors, languageModelTensors } from './tensors.js';

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
   * How a weft-q checkpoint or a quantized GGUF stores its linears: loading at this format (and
   * rotation), the default, copies every matrix stored in a weft layout to the GPU as stored (each
   * in its own format: a GGUF may mix types); any other choice copies only the matrices stored in
   * its format and re-quantizes the rest from their dequantized values. A GGUF's format is its `*_proj` linears' most common type: Q8_0 → int8, Q4_0 → q4_0,
   * Q4_K → int4, and the other block types to their own formats (`storedWeftFormat`: a Q4_K_M
   * file reports int4, its Q6_K matrices placed as q6_k beside them; rotation none); float GGUFs
   * report none.
   */
  readonly packed?: Packing;
  /** What loading left out and the user should hear of (a vision tower): in words, and the tensors' names. */
  readonly warnings?: readonly { readonly message: string; readonly tensors: readonly string[] }[];
  /** What the weights were read from, for progress and messages. */
  readonly format: 'safetensors' | 'weft-q' | 'gguf';
  /**
   * The model's identity for steering files: SHA-256 (lowercase hex) of config.json's text as
   * UTF-8 followed by the first {@link CHECKSUM_WEIGHT_BYTES} bytes of the weights file
   * (`model.safetensors`, or a sharded checkpoint's first shard in sorted order). The header and
   * the first tensors change with any retraining or re-export, and 1 MiB keeps it cheap. A GGUF
   * model hashes the first {@link CHECKSUM_WEIGHT_BYTES} of its file. A folder converted by
   * `weft convert` answers its source's checksum (weft-q metadata `source_model_checksum`), so a
   * direction measured on a model applies to its conversions. Computed on first call from what
   * {@link openModel} already read, then remembered.
   */
  checksum(): Promise<string>;
}

/** How many bytes of the weights file {@link OpenedModel.checksum} hashes. */
const CHECKSUM_WEIGHT_BYTES = 1 << 20;

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
  const configText = await files.text('config.json');
  let spec = specFromConfig(
    parseJson(files, 'config.json', configText),
    modelFilePath(files.name, 'config.json'),
  );
  if (await files.exists('generation_config.json')) {
    spec = withGenerationConfig(spec, await readJson(files, 'generation_config.json'));
  }
  const tokenizerConfig = await readTokenizerConfig(files);
  const tokenizer = loadTokenizer(await readJson(files, 'tokenizer.json'), tokenizerConfig, spec.eosIds);
  const chat =
    typeof tokenizerConfig === 'object' && tokenizerConfig !== null && 'chat_template' in tokenizerConfig;
  const where = (file: string) => modelFilePath(files.name, file);
  if (await files.exists(WEFT_WEIGHTS)) {
    const weights = await openWeftCheckpoint(await files.open(WEFT_WEIGHTS));
    checkTensors(spec, weights.tensors, where(WEFT_WEIGHTS));
    // Every linear shares one format and rotation (weft convert's --quant and --rotate).
    const linear = Object.entries(weights.schemes).find(([name]) => isLinear(name))?.[1];
    const packed = linear && { format: linear.format, rotation: linear.rotation };
    const recorded = weights.metadata.source_model_checksum;
    const checksum = once(() =>
      recorded !== undefined ? Promise.resolve(recorded) : configAndHead(files, configText, WEFT_WEIGHTS),
    );
    return { spec, tokenizer, weights, chat, format: 'weft-q', checksum, packed };
  }
  if (await files.exists(SHARD_INDEX)) {
    const index = await readJson(files, SHARD_INDEX);
    const { st, warnings } = languageModel(
      await openShardedSafetensors(index, (f) => files.open(f), where(SHARD_INDEX)),
    );
    // A tensor the index does not list is the index's fault; a wrong shape is its shard's.
    const shardOf = (name: string) => where(st.tensors.get(name)?.bytes.name ?? SHARD_INDEX);
    const weights = splitFusedView(safetensorsReader(st, where(SHARD_INDEX)), spec, shardOf);
    checkTensors(spec, weights.tensors, where(SHARD_INDEX), shardOf);
    return {
      spec,
      tokenizer,
      weights,
      chat,
      format: 'safetensors',
      warnings,
      checksum: once(() => configAndHead(files, configText, firstShard(index, where(SHARD_INDEX)))),
    };
  }
  const { st, warnings } = languageModel(await openSafetensors(await files.open(SAFETENSORS)));
  // Phi-3's fused qkv_proj and gate_up_proj read as the plain linears (splitFusedView).
  const weights = splitFusedView(safetensorsReader(st, where(SAFETENSORS)), spec, () => where(SAFETENSORS));
  checkTensors(spec, weights.tensors, where(SAFETENSORS));
  return {
    spec,
    tokenizer,
    weights,
    chat,
    format: 'safetensors',
    warnings,
    checksum: once(() => configAndHead(files, configText, SAFETENSORS)),
  };
}

/**
 * tokenizer_config.json (or `{}`), with the chat template of `chat_template.jinja` where the config
 * has none: recent Hugging Face repositories (Qwen3.5's among them) keep the template in that file.
 */
export async function readTokenizerConfig(files: ModelFiles): Promise<unknown> {
  const config = (await files.exists('tokenizer_config.json'))
    ? await readJson(files, 'tokenizer_config.json')
    : {};
  const hasTemplate = typeof config === 'object' && config !== null && 'chat_template' in config;
  if (hasTemplate || !(await files.exists(CHAT_TEMPLATE_FILE))) return config;
  return {
    ...(typeof config === 'object' && config !== null ? config : {}),
    chat_template: await files.text(CHAT_TEMPLATE_FILE),
  };
}

/** Where recent Hugging Face repositories keep the chat template (beside tokenizer_config.json). */
export const CHAT_TEMPLATE_FILE = 'chat_template.jinja';

/**
 * A vision-language checkpoint's language model (see `languageModelTensors`), with a warning that
 * names what was left out.
 */
function languageModel(ck: SafetensorsCheckpoint): {
  st: SafetensorsCheckpoint;
  warnings: { message: string; tensors: string[] }[];
} {
  const { tensors, skipped } = languageModelTensors(ck.tensors);
  if (!skipped) return { st: ck, warnings: [] };
  const warnings =
    skipped.vision > 0
      ? [
          {
            message: `the ${skipped.visionParts.some((p) => p.includes('audio')) ? 'vision and audio towers' : 'vision tower'} (${skipped.vision} tensors) not loaded: weft runs the language model`,
            tensors: [...skipped.visionParts],
          },
        ]
      : [];
  return { st: { ...ck, tensors }, warnings };
}

/**
 * The checksum of a model given only its files: opens it ({@link openModel}, headers only) and
 * asks {@link OpenedModel.checksum}. For callers that hold an opened model, ask it directly.
 */
export async function modelChecksum(files: ModelFiles): Promise<string> {
  return (await openModel(files)).checksum();
}

/** `f` run at most once; later calls share its promise. */
function once(f: () => Promise<string>): () => Promise<string> {
  let p: Promise<string> | undefined;
  return () => {
    p ??= f();
    return p;
  };
}

/** The first shard a sharded checkpoint's index names, in sorted order. */
function firstShard(index: unknown, file: string): string {
  const map =
    typeof index === 'object' && index !== null && 'weight_map' in index ? index.weight_map : undefined;
  const shards =
    typeof map === 'object' && map !== null
      ? Object.values(map).filter((v): v is string => typeof v === 'string')
      : [];
  const first = shards.sort()[0];
  if (!first) throw new ModelFormatError(file, 'weight_map', map, 'names no shard');
  return first;
}

/** SHA-256 of config.json's text followed by the head of `weightsFile`. */
async function configAndHead(files: ModelFiles, configText: string, weightsFile: string): Promise<string> {
  const config = new TextEncoder().encode(configText);
  const weights = await head(files, weightsFile);
  const all = new Uint8Array(config.byteLength + weights.byteLength);
  all.set(config);
  all.set(weights, config.byteLength);
  return sha256Hex(all);
}

/** The first {@link CHECKSUM_WEIGHT_BYTES} bytes of a model file. */
async function head(files: ModelFiles, file: string): Promise<Uint8Array> {
  const src = await files.open(file);
  return src.read(0, Math.min(src.size, CHECKSUM_WEIGHT_BYTES));
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes.slice()));
  return Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** The GGUF file the model is, when it is one (see {@link openModel}); else undefined. */
export async function ggufFileOf(files: ModelFiles): Promise<string | undefined> {
  if (files.gguf !== undefined) return files.gguf;
  if (await files.exists('config.json')) return undefined;
  return (await files.exists(GGUF_IN_FOLDER)) ? GGUF_IN_FOLDER : undefined;
}

/**
 * A GGUF model: the spec from its metadata, the tokenizer rebuilt from its embedded vocabulary,
 * and its tensors read as stored where a weft layout holds their blocks (`readPacked`), else
 * dequantized to f32 and packed to the chosen runtime format like any f32 checkpoint. `packed`
 * names the format of its linears ({@link OpenedModel.packed}). The GGUF reader and its block
 * decoders load with the first GGUF file: a bundle (the engine worker) keeps them in a chunk of
 * their own, which an app that loads safetensors or weft folders never fetches.
 */
async function openGgufModel(files: ModelFiles, file: string): Promise<OpenedModel> {
  const [{ openGgufCheckpoint }, { ggufTokenizer }] = await Promise.all([
    import('./gguf.js'),
    import('../formats/gguf/tokenizer.js'),
  ]);
  const ck = await openGgufCheckpoint(await files.open(file));
  const { tokenizerJson, tokenizerConfig } = ggufTokenizer(ck.file);
  const tokenizer = loadTokenizer(tokenizerJson, tokenizerConfig, ck.spec.eosIds, file);
  const format = commonFormat(
    [...ck.tensors.keys()].filter((n) => isLinear(n)),
    ck,
  );
  return {
    spec: ck.spec,
    tokenizer,
    // A family's fused projections (Phi-3's) read as the plain linears (splitFusedView).
    weights: splitFusedView(ck, ck.spec, () => file),
    chat: 'chat_template' in tokenizerConfig,
    format: 'gguf',
    checksum: once(async () => sha256Hex(await head(files, file))),
    ...(format !== undefined && isIntFormat(format) ? { packed: { format, rotation: 'none' } } : {}),
  };
}

/** The stored format most of `names` have (the first to reach the count on a tie), if any. */
function commonFormat(names: readonly string[], weights: TensorReader): WeightFormat | undefined {
  const counts = new Map<WeightFormat, number>();
  let best: WeightFormat | undefined;
  for (const name of names) {
    const f = weights.storedFormat?.(name);
    if (f === undefined) continue;
    counts.set(f, (counts.get(f) ?? 0) + 1);
    if (best === undefined || counts.get(f)! > counts.get(best)!) best = f;
  }
  return best;
}
