/**
 * The host-neutral core of `weft convert` and `weft export-gguf`: a model's files in, a loadable
 * model's files out, through callbacks, so the same code runs in Node (src/cli/convert.ts writes
 * to disk) and in a page (tests keep the bytes in memory).
 */
import { InvalidInputError } from '../errors.js';
import { ggufTokenizer, tokenizerGgufMetadata } from '../formats/gguf/tokenizer.js';
import type { GgufEntry } from '../formats/gguf/write.js';
import { type ModelFiles, readJson } from '../formats/io/files.js';
import { convert } from '../formats/weft-checkpoint.js';
import { configFromSpec } from '../model/families/index.js';
import { openGgufCheckpoint } from '../model/gguf.js';
import { ggufFileOf, type OpenedModel, openModel, readTokenizerConfig, WEFT_WEIGHTS } from '../model/load.js';
import type { ModelSpec } from '../model/spec/spec.js';
import { mapWeights, readAllF32 } from '../model/weights.js';
import type { Rotation } from '../quant/pack.js';
import { calibrationWindows, collectHessians } from './calibrate.js';
import { exportGguf, type GgufExportType } from './gguf-export.js';
import type { GgufMix } from './gguf-mix.js';

/** Formats `weft convert` writes (the float formats need no converted checkpoint). */
export type ConvertQuant = 'int8' | 'int4' | 'int2';

/** Options of {@link convertModel}. */
export interface ConvertModelOptions {
  readonly quant: ConvertQuant;
  /** Rotation of the `*_proj` linears' inputs (default none). */
  readonly rotate?: Rotation;
  /**
   * Calibrated rounding: text (disjoint from any text the model is evaluated on) run through the
   * f32 model to measure each linear's input statistics; the integer linears then get GPTQ codes
   * instead of round-to-nearest (`packLinear` with a Hessian). `name` is recorded in the output's
   * metadata. The whole f32 model is held in memory while calibrating.
   */
  readonly calibration?: { readonly text: string; readonly name: string };
  /**
   * Called as calibration windows run (`calibrate`, `tensor` empty), then as each tensor is hashed
   * (`checksum`) and then packed and written (`pack`).
   */
  readonly onProgress?: (e: {
    phase: 'calibrate' | 'checksum' | 'pack';
    done: number;
    total: number;
    tensor: string;
  }) => void;
}

/** Where {@link convertModel} puts its output: small files whole, the weights as a stream. */
export interface ConvertSink {
  /** A small file (config.json, tokenizer files), given whole. */
  file(name: string, bytes: Uint8Array): Promise<void>;
  /** The next bytes of {@link WEFT_WEIGHTS}, in order. */
  weights(chunk: Uint8Array): Promise<void>;
}

/** Hugging Face files copied as they are into a converted folder (when the source has them). */
const COPIED = [
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'chat_template.jinja',
];

const json = (v: unknown) => new TextEncoder().encode(`${JSON.stringify(v, null, 2)}\n`);

/**
 * Converts a model (a Hugging Face folder or a GGUF file) to a weft-q folder: the small files
 * (copied, or for GGUF written from its metadata: config.json, tokenizer.json,
 * tokenizer_config.json), then {@link WEFT_WEIGHTS} streamed tensor by tensor. Every matrix the GPU
 * runner multiplies by (embedding, linears, LM head) is packed as `quant` exactly as the runner
 * packs it while loading, so loading the result at that quant copies every matrix and gives the
 * same logits. Returns the weights' metadata.
 */
export async function convertModel(
  files: ModelFiles,
  options: ConvertModelOptions,
  sink: ConvertSink,
): Promise<Record<string, string>> {
  const opened = await openModel(files);
  if (opened.format === 'weft-q')
    throw new InvalidInputError(`convert: ${files.name} is already a weft-q checkpoint (${WEFT_WEIGHTS})`);
  const gguf = await ggufFileOf(files);
  if (gguf !== undefined) {
    const ck = await openGgufCheckpoint(await files.open(gguf));
    const { tokenizerJson, tokenizerConfig } = ggufTokenizer(ck.file);
    await sink.file('config.json', json(configFromSpec(ck.spec)));
    await sink.file('tokenizer.json', json(tokenizerJson));
    await sink.file('tokenizer_config.json', json(tokenizerConfig));
  } else {
    for (const name of COPIED)
      if (await files.exists(name)) await sink.file(name, new TextEncoder().encode(await files.text(name)));
  }
  const total = opened.weights.tensors.size;
  let hashed = 0;
  let packed = 0;
  // Progress rides on the reads: the checksum reads every tensor once, then packing reads each again.
  const reader = {
    tensors: opened.weights.tensors,
    readF32: (name: string) => {
      const phase = hashed < total ? 'checksum' : 'pack';
      const done = phase === 'checksum' ? ++hashed : ++packed;
      options.onProgress?.({ phase, done, total, tensor: name });
      return opened.weights.readF32(name);
    },
  };
  const rotate = options.rotate ?? 'none';
  const calibrated =
    options.calibration && (await calibrate(opened, options.calibration.text, rotate, options));
  return convert(reader, (chunk) => sink.weights(chunk), {
    quant: options.quant,
    // The runner gathers the embedding from a table in the chosen format too.
    embeddings: options.quant,
    rotate,
    sourceModel: await opened.checksum(),
    ...(calibrated && options.calibration
      ? {
          hessians: calibrated.hessians,
          calibration: { text: options.calibration.name, tokens: calibrated.tokens },
        }
      : {}),
  });
}

/**
 * The Hessians of every `*_proj` linear of `opened` on `text` (windows of 256 tokens after BOS,
 * as the held-out evaluation cuts its text), in the basis `rotate` packs them in.
 */
async function calibrate(
  opened: OpenedModel,
  text: string,
  rotate: Rotation,
  options: Pick<ConvertModelOptions, 'onProgress'>,
  command = 'convert',
): Promise<{ hessians: Map<string, Float64Array>; tokens: number; windows: number }> {
  const bos = opened.spec.bosId;
  if (bos === undefined)
    throw new InvalidInputError(
      `${command} --calibrate: the model has no BOS id to start calibration windows with`,
    );
  const windows = calibrationWindows(opened.tokenizer, text, bos);
  if (windows.length === 0 || text.trim() === '')
    throw new InvalidInputError(`${command} --calibrate: the calibration text is empty`);
  const source = mapWeights(await readAllF32(opened.weights));
  const hessians = collectHessians(opened.spec, source, windows, {
    rotate,
    onWindow: (done, total) => options.onProgress?.({ phase: 'calibrate', done, total, tensor: '' }),
  });
  return { hessians, tokens: windows.reduce((n, w) => n + w.length, 0), windows: windows.length };
}

/**
 * GGUF types `weft export-gguf` writes (2-D weights; vectors stay F32): one type for every weight,
 * or a K-quant mix with llama-quantize's per-tensor recipe (`mixTypes`).
 */
export const EXPORT_TYPES: readonly (GgufExportType | GgufMix)[] = [
  'F32',
  'F16',
  'Q8_0',
  'Q4_0',
  'Q4_1',
  'Q5_0',
  'Q5_1',
  'Q4_K',
  'Q5_K',
  'Q6_K',
  'Q2_K',
  'Q3_K',
  'IQ4_NL',
  'IQ4_XS',
  'IQ3_XXS',
  'IQ3_S',
  'IQ2_XXS',
  'IQ2_XS',
  'IQ2_S',
  'Q4_K_M',
  'Q5_K_M',
  'Q3_K_M',
];

/**
 * The `tokenizer.ggml.*` metadata of a Hugging Face tokenizer (`tokenizerGgufMetadata`) for a
 * model of `spec`, with BOS and the stop ids from the spec where the tokenizer config does not
 * name them. GGUF keeps up to three stop ids (EOS, end of turn, end of message): the tokenizer's
 * EOS first, then the configs' (generation_config.json adds end-of-turn ids there).
 */
export function ggufTokenizerEntries(
  tokenizerJson: unknown,
  tokenizerConfig: unknown,
  spec: Pick<ModelSpec, 'vocabSize' | 'bosId' | 'eosIds'>,
  file = 'tokenizer.json',
): [string, GgufEntry][] {
  const extra = tokenizerGgufMetadata(tokenizerJson, tokenizerConfig, spec.vocabSize, file);
  const has = (key: string) => extra.some(([k]) => k === key);
  if (!has('tokenizer.ggml.bos_token_id') && spec.bosId !== undefined)
    extra.push(['tokenizer.ggml.bos_token_id', { type: 'u32', value: spec.bosId }]);
  const slots = ['tokenizer.ggml.eos_token_id', 'tokenizer.ggml.eot_token_id', 'tokenizer.ggml.eom_token_id'];
  const given = extra.find(([k]) => k === slots[0])?.[1];
  const stops = [...new Set([...(given?.type === 'u32' ? [given.value] : []), ...spec.eosIds])];
  for (const [i, key] of slots.entries()) {
    const id = stops[i];
    if (id !== undefined && !has(key)) extra.push([key, { type: 'u32', value: id }]);
  }
  return extra;
}

/** Options of {@link exportModelGguf}. */
export interface ExportModelGgufOptions {
  /**
   * Calibration text (disjoint from any text the model is evaluated on), run through the f32 model
   * as `weft convert --calibrate` runs it: each weight's importance, the energy Σ x_k² of each of
   * its input columns (the diagonal of the Hessian `collectHessians` measures, llama.cpp's imatrix
   * up to a constant), weighs the squared error of the Q2_K, Q3_K and i-quant encoders. `name` is
   * written as `quantize.imatrix.file`, as llama-quantize writes its imatrix file's.
   */
  readonly calibration?: { readonly text: string; readonly name: string };
  /** Called as calibration windows run. */
  readonly onProgress?: ConvertModelOptions['onProgress'];
}

/**
 * The importance of each calibrated weight (by checkpoint name): the diagonal of its Hessian
 * [n, n] (n its input width padded to 16), its first `cols` entries. Weights without a Hessian (the
 * embedding of an untied head, conv and norm weights) get none.
 */
function importanceOf(
  hessians: ReadonlyMap<string, Float64Array>,
  shapes: ReadonlyMap<string, { readonly shape: readonly number[] }>,
): (hfName: string) => Float32Array | undefined {
  return (hfName) => {
    const h = hessians.get(hfName);
    const cols = shapes.get(hfName)?.shape[1];
    if (h === undefined || cols === undefined) return undefined;
    const n = Math.round(Math.sqrt(h.length));
    return Float32Array.from({ length: cols }, (_, k) => h[k * n + k]!);
  };
}

/**
 * A Hugging Face folder (safetensors) as one GGUF file in memory: weights through `exportGguf` as
 * `type` (or `type(hfName)`, a mix of one's own; with importance from `options.calibration`, when
 * given), the tokenizer as
 * `tokenizer.ggml.*` metadata, and BOS/EOS from the config where the tokenizer config does not name
 * them. Holds every tensor in memory (small models).
 */
export async function exportModelGguf(
  files: ModelFiles,
  type: GgufExportType | GgufMix | ((hfName: string) => GgufExportType),
  options: ExportModelGgufOptions = {},
): Promise<Uint8Array> {
  const opened = await openModel(files);
  if (opened.format !== 'safetensors')
    throw new InvalidInputError(`export-gguf: ${files.name} is ${opened.format}; give a Hugging Face folder`);
  const tokenizerConfig = await readTokenizerConfig(files);
  const extra = ggufTokenizerEntries(
    await readJson(files, 'tokenizer.json'),
    tokenizerConfig,
    opened.spec,
    `${files.name}/tokenizer.json`,
  );
  const tensors = [];
  for (const [name, { shape }] of opened.weights.tensors)
    tensors.push({ name, shape, data: await opened.weights.readF32(name) });
  const calibration = options.calibration;
  if (calibration === undefined) return exportGguf(opened.spec, tensors, type, extra);
  const calibrated = await calibrate(opened, calibration.text, 'none', options, 'export-gguf');
  // llama-quantize's record of its imatrix: the file, how many weights it covered, and how many
  // chunks (here windows) it ran.
  extra.push(
    ['quantize.imatrix.file', { type: 'string', value: calibration.name }],
    ['quantize.imatrix.entries_count', { type: 'u32', value: calibrated.hessians.size }],
    ['quantize.imatrix.chunks_count', { type: 'u32', value: calibrated.windows }],
  );
  return exportGguf(opened.spec, tensors, type, extra, {
    importance: importanceOf(calibrated.hessians, opened.weights.tensors),
  });
}
