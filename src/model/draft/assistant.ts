// Gemma 4's assistant drafter (`Gemma4AssistantForCausalLM`, model_type `gemma4_assistant`;
// llama.cpp's `gemma4-assistant`; google/gemma-4-E2B-it-assistant is 78M parameters): a small
// Gemma 4 text model with no K/V projections of its own, which attends over the TARGET's KV cache.
// Read from transformers' modeling_gemma4_assistant.py and configuration_gemma4_assistant.py (and
// the candidate generator that drives it), checked against llama.cpp's gemma4-assistant.cpp:
//
//   Config. `text_config` is a Gemma4TextConfig whose every layer is KV-shared
//   (num_kv_shared_layers = num_hidden_layers): layers hold q_proj, q_norm, o_proj, the four
//   sandwich norms, a GeGLU MLP and layer_scalar; no k/v projections, no per-layer inputs, no
//   mixture. `backbone_hidden_size` Hb is the target's width, `hidden_size` Ha the assistant's.
//   Inputs. A step drafts the token after x at position P (x not yet run through the target):
//     z = pre_projection · [E_target[x] · √Hb ; h]                    ([Ha, 2·Hb], embedding first)
//   where h is the target's last hidden state after its final norm at position P - 1 (the
//   target's ScaledWordEmbedding scales E; the scale rounded to f32).
//   Layers. Per layer (type sliding or full, as the assistant's layer_types say):
//     q = rope(q_norm(q_proj(input_layernorm(z))), P)   (the layer type's RoPE, Q only)
//     z += post_attention_layernorm(o_proj(attention(q, K_t, V_t)))     (scale 1, GQA)
//     z += post_feedforward_layernorm(down(gelu_tanh(gate(n)) · up(n))), n = pre_feedforward_layernorm(z)
//     z *= layer_scalar
//   with K_t, V_t the target's cache of its last full layer (full layers) or its last sliding
//   layer (sliding layers), each resolved to the layer that holds that cache (a KV-shared target's
//   last unshared layer of the type: Transformers' `shared_kv_states`, llama.cpp's n_layer - 1 and
//   n_layer - 2). The mask is HF's bidirectional one over the target's context (positions
//   0..P-1): every entry on full layers; on sliding layers |q - kv| ≤ sliding_window on the
//   flipped axis, i.e. the sliding_window + 1 newest entries.
//   Head. g = norm(z) (model.norm). Logits over the target's vocabulary: lm_head · g (lm_head tied to
//   the assistant's own embed_tokens [V, Ha]); with `use_ordered_embeddings` the masked embedding:
//   the centroid_intermediate_top_k best of num_centroids centroids (centroids · g, torch.topk) pick
//   their V / num_centroids tokens each (row c of token_ordering viewed [C, V / C]), those tokens
//   score lm_head[id] · g and every other token min(those scores) - 1 (HF's fill, not -∞). No
//   soft-capping.
//   Depth. The step's next hidden is post_projection · g ([Hb, Ha]), fed back as h with the drafted
//   token as x; the position stays P and the attended context stays the target's (HF's generator
//   keeps position_ids = [[L - 1]] for all its rounds; the assistant writes no K/V, so draft
//   entries never see each other). A tree node therefore depends only on its path's tokens and its
//   root: trees need no tree attention.
//
// In weft (AssistantRunner, a ModelRunner over the target's vocabulary that ModelDrafter drives
// as it drives a draft model): the entry at position p takes token x_p and either the target's
// feature at p - 1 (while the target has scored p - 1: its anchor is p) or the output of its
// parent entry, or for a tree root, of the committed entry at p - 1 (the anchor theirs). It keeps
// no KV cache, only each committed entry's output and anchor, so a forward computes just the rows
// it scores, the last one and the rows they chain from. It reads its target through an
// AssistantTarget: the reference runner's cache where it lies, or the GPU runner's cache buffers
// and embedding copied back once per forward (assistant-gpu.ts); the step itself runs on the host.
import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../../formats/errors.js';
import { type ModelFiles, modelFilePath, readJson } from '../../formats/io/files.js';
import { openSafetensors, readTensorF32, type TensorInfo } from '../../formats/safetensors.js';
import type { TensorReader } from '../../formats/weft-checkpoint.js';
import { attend, linear, normWeight, rmsNorm, rope, ropeInverseFrequencies } from '../blocks/ops.js';
import { finalNormName, specFromConfig } from '../families/index.js';
import { deriveSizes, kvSourceLayer, layerAttention, layerSpec, type ModelSpec } from '../spec/spec.js';

/** config.json `model_type` of an assistant checkpoint. */
export const ASSISTANT_MODEL_TYPE = 'gemma4_assistant';

/** The masked-embedding head (`use_ordered_embeddings`). */
export interface MaskedEmbedding {
  /** [C, Ha] */
  readonly centroids: Float32Array;
  /** [V] token ids, row c of the [C, V / C] view the tokens of centroid c. */
  readonly ordering: Int32Array;
  /** centroid_intermediate_top_k */
  readonly topK: number;
}

/** One assistant layer's weights ([out, in] as nn.Linear), norms as multipliers. */
export interface AssistantLayer {
  readonly inputNorm: Float32Array; // [Ha]
  readonly q: Float32Array; // [heads · D, Ha]
  readonly qNorm: Float32Array; // [D]
  readonly o: Float32Array; // [Ha, heads · D]
  readonly postAttnNorm: Float32Array; // [Ha]
  readonly preFfNorm: Float32Array; // [Ha]
  readonly gate: Float32Array; // [I, Ha]
  readonly up: Float32Array; // [I, Ha]
  readonly down: Float32Array; // [Ha, I]
  readonly postFfNorm: Float32Array; // [Ha]
  readonly scalar: number;
}

/** An assistant checkpoint with what it reads of its target. */
export interface Assistant {
  readonly name: string;
  /** The assistant's layers as a Gemma 4 text spec (no sharing: its K/V come from the target). */
  readonly spec: ModelSpec;
  /** Hb: the target's hidden size. */
  readonly backbone: number;
  readonly layers: readonly AssistantLayer[];
  readonly pre: Float32Array; // [Ha, 2 · Hb]
  readonly post: Float32Array; // [Hb, Ha]
  readonly norm: Float32Array; // [Ha]
  /** The LM head: the assistant's embed_tokens [V, Ha]. */
  readonly lm: Float32Array;
  readonly masked: MaskedEmbedding | undefined;
  /** The target's final norm [Hb] (its embedding table is the target runner's: TargetContext). */
  readonly targetNorm: Float32Array;
  /** Per assistant layer, the target layer whose cache it attends over. */
  readonly sources: readonly number[];
}

/** True when `files` hold a Gemma 4 assistant (config.json's model_type is {@link ASSISTANT_MODEL_TYPE}). */
export async function isAssistant(files: ModelFiles): Promise<boolean> {
  if (files.gguf || !(await files.exists('config.json'))) return false;
  const config = await readJson(files, 'config.json');
  return typeof config === 'object' && config !== null && 'model_type' in config
    ? config.model_type === ASSISTANT_MODEL_TYPE
    : false;
}

/**
 * The assistant `files` hold, opened for `target` ({@link openAssistant}), when they are one or
 * `named` says they must be; undefined otherwise (they are another kind of draft).
 */
export async function assistantIn(
  files: ModelFiles,
  target: { readonly spec: ModelSpec; readonly weights: TensorReader },
  named: boolean,
): Promise<Assistant | undefined> {
  return named || (await isAssistant(files)) ? openAssistant(files, target) : undefined;
}

/** The parsed config: the layers' spec and the head's switches. */
export interface AssistantConfig {
  readonly spec: ModelSpec;
  readonly backbone: number;
  readonly masked: { readonly centroids: number; readonly topK: number } | undefined;
}

/**
 * Parses an assistant's config.json (`file` names it in errors): its text_config read as a Gemma 4
 * text config with its sharing and per-layer inputs taken off (the assistant's K/V are the
 * target's), refusing what Gemma4AssistantConfig refuses.
 */
export function assistantConfig(json: unknown, file: string): AssistantConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw new ModelFormatError(file, 'config', json, 'must be a JSON object');
  const c = json as Record<string, unknown>;
  if (c.model_type !== ASSISTANT_MODEL_TYPE)
    throw new ModelFormatError(file, 'model_type', c.model_type, `must be "${ASSISTANT_MODEL_TYPE}"`);
  const text = c.text_config;
  if (typeof text !== 'object' || text === null || Array.isArray(text))
    throw new ModelFormatError(file, 'text_config', text, 'must be an object (a Gemma 4 text config)');
  const t = text as Record<string, unknown>;
  for (const [key, want] of [
    ['hidden_size_per_layer_input', 0],
    ['vocab_size_per_layer_input', 0],
    ['enable_moe_block', false],
    ['use_double_wide_mlp', false],
  ] as const)
    if (t[key] !== undefined && t[key] !== want)
      throw new ModelFormatError(file, `text_config.${key}`, t[key], `must be ${want} in an assistant`);
  const layers = t.num_hidden_layers;
  if (
    t.num_kv_shared_layers !== undefined &&
    t.num_kv_shared_layers !== 0 &&
    t.num_kv_shared_layers !== layers
  )
    throw new ModelFormatError(
      file,
      'text_config.num_kv_shared_layers',
      t.num_kv_shared_layers,
      `every layer of an assistant is KV-shared (num_hidden_layers = ${String(layers)})`,
    );
  const spec = specFromConfig(
    {
      ...t,
      model_type: 'gemma4_text',
      num_kv_shared_layers: 0,
      hidden_size_per_layer_input: 0,
      final_logit_softcapping: null,
    },
    file,
  );
  const int = (key: string, fallback: number): number => {
    const v = c[key] ?? fallback;
    if (!Number.isInteger(v) || (v as number) < 1)
      throw new ModelFormatError(file, key, v, 'must be a positive integer');
    return v as number;
  };
  const backbone = int('backbone_hidden_size', 1536);
  if (c.use_ordered_embeddings !== true) return { spec, backbone, masked: undefined };
  const centroids = int('num_centroids', 2048);
  const topK = int('centroid_intermediate_top_k', 32);
  if (spec.vocabSize % centroids !== 0)
    throw new ModelFormatError(
      file,
      'num_centroids',
      centroids,
      `must divide vocab_size (${spec.vocabSize})`,
    );
  if (topK > centroids)
    throw new ModelFormatError(
      file,
      'centroid_intermediate_top_k',
      topK,
      `exceeds num_centroids (${centroids})`,
    );
  return { spec, backbone, masked: { centroids, topK } };
}

/** Every tensor an assistant checkpoint holds, with its shape. */
export function assistantShapes(a: AssistantConfig): [string, number[]][] {
  const s = a.spec;
  const Ha = s.hidden;
  const out: [string, number[]][] = [
    ['model.embed_tokens.weight', [s.vocabSize, Ha]],
    ['pre_projection.weight', [Ha, 2 * a.backbone]],
    ['post_projection.weight', [a.backbone, Ha]],
  ];
  for (let l = 0; l < s.layers; l++) {
    const ls = layerSpec(s, l);
    const qw = ls.heads * ls.headDim;
    const p = `model.layers.${l}`;
    out.push(
      [`${p}.input_layernorm.weight`, [Ha]],
      [`${p}.self_attn.q_proj.weight`, [qw, Ha]],
      [`${p}.self_attn.q_norm.weight`, [ls.headDim]],
      [`${p}.self_attn.o_proj.weight`, [Ha, qw]],
      [`${p}.post_attention_layernorm.weight`, [Ha]],
      [`${p}.pre_feedforward_layernorm.weight`, [Ha]],
      [`${p}.mlp.gate_proj.weight`, [ls.intermediate, Ha]],
      [`${p}.mlp.up_proj.weight`, [ls.intermediate, Ha]],
      [`${p}.mlp.down_proj.weight`, [Ha, ls.intermediate]],
      [`${p}.post_feedforward_layernorm.weight`, [Ha]],
      [`${p}.layer_scalar`, [1]],
    );
  }
  out.push(['model.norm.weight', [Ha]]);
  if (a.masked) {
    out.push(['masked_embedding.centroids.weight', [a.masked.centroids, Ha]]);
    out.push(['masked_embedding.token_ordering', [s.vocabSize]]);
  }
  return out;
}

/**
 * The target layer each assistant layer attends over: the cache of the target's last layer of
 * its type (full or sliding), resolved to the layer that holds it. Throws InvalidInputError, with
 * the shapes, when the target is not a Gemma 4 or its cache's heads differ from the assistant's.
 */
export function assistantSources(assistant: ModelSpec, target: ModelSpec, name: string): number[] {
  if (!target.fullAttention || target.slidingWindow === undefined || !target.layerScalar)
    throw new InvalidInputError(
      `draft assistant ${name}: the target is not a Gemma 4 model (no sliding and full layers of its own shapes)`,
    );
  const lastOf = (sliding: boolean): number => {
    for (let l = target.layers - 1; l >= 0; l--)
      if ((layerAttention(target, l).window !== undefined) === sliding) return kvSourceLayer(target, l);
    throw new InvalidInputError(
      `draft assistant ${name}: the target has no ${sliding ? 'sliding' : 'full'} attention layer`,
    );
  };
  return Array.from({ length: assistant.layers }, (_, l) => {
    const sliding = layerAttention(assistant, l).window !== undefined;
    const source = lastOf(sliding);
    const mine = layerSpec(assistant, l);
    const theirs = layerSpec(target, source);
    if (mine.headDim !== theirs.headDim || mine.kvHeads !== theirs.kvHeads || mine.heads % theirs.kvHeads)
      throw new InvalidInputError(
        `draft assistant ${name}: layer ${l} (${sliding ? 'sliding' : 'full'}) has heads of ${mine.headDim} over ${mine.kvHeads} KV heads, the target's layer ${source} ${theirs.headDim} over ${theirs.kvHeads}`,
      );
    return source;
  });
}

/**
 * Opens an assistant (config.json and model.safetensors in `files`) for `target`, checking that
 * they belong together (widths, vocabulary, attention shapes), and reads what it needs of the
 * target: its final norm (its embedding table is read from the target runner's, not copied). Errors
 * name the file, the field and the value.
 */
export async function openAssistant(
  files: ModelFiles,
  target: { readonly spec: ModelSpec; readonly weights: TensorReader },
): Promise<Assistant> {
  const configFile = modelFilePath(files.name, 'config.json');
  const config = assistantConfig(await readJson(files, 'config.json'), configFile);
  const t = target.spec;
  if (config.backbone !== t.hidden)
    throw new ModelFormatError(
      configFile,
      'backbone_hidden_size',
      config.backbone,
      `the target's hidden size is ${t.hidden}`,
    );
  if (config.spec.vocabSize !== t.vocabSize)
    throw new ModelFormatError(
      configFile,
      'text_config.vocab_size',
      config.spec.vocabSize,
      `the target's is ${t.vocabSize}`,
    );
  const sources = assistantSources(config.spec, t, files.name);
  const source = await files.open('model.safetensors');
  const checkpoint = await openSafetensors(source);
  const shapes = new Map(assistantShapes(config));
  const info = (name: string): TensorInfo => {
    const tensor = checkpoint.tensors.get(name);
    if (!tensor) throw new ModelFormatError(source.name, name, undefined, 'missing');
    const want = shapes.get(name)!;
    if (tensor.shape.length !== want.length || tensor.shape.some((d, i) => d !== want[i]))
      throw new ModelFormatError(source.name, `${name}.shape`, tensor.shape, `expected [${want.join(', ')}]`);
    return tensor;
  };
  const f32 = async (name: string): Promise<Float32Array> => {
    const tensor = info(name);
    if (tensor.dtype !== 'F16' && tensor.dtype !== 'BF16' && tensor.dtype !== 'F32')
      throw new ModelFormatError(source.name, `${name}.dtype`, tensor.dtype, 'must be F16, BF16 or F32');
    return readTensorF32(tensor);
  };
  const s = config.spec;
  const norm = async (name: string) => normWeight(s, await f32(name));
  const layers: AssistantLayer[] = [];
  for (let l = 0; l < s.layers; l++) {
    const p = `model.layers.${l}`;
    layers.push({
      inputNorm: await norm(`${p}.input_layernorm.weight`),
      q: await f32(`${p}.self_attn.q_proj.weight`),
      qNorm: await norm(`${p}.self_attn.q_norm.weight`),
      o: await f32(`${p}.self_attn.o_proj.weight`),
      postAttnNorm: await norm(`${p}.post_attention_layernorm.weight`),
      preFfNorm: await norm(`${p}.pre_feedforward_layernorm.weight`),
      gate: await f32(`${p}.mlp.gate_proj.weight`),
      up: await f32(`${p}.mlp.up_proj.weight`),
      down: await f32(`${p}.mlp.down_proj.weight`),
      postFfNorm: await norm(`${p}.post_feedforward_layernorm.weight`),
      scalar: (await f32(`${p}.layer_scalar`))[0]!,
    });
  }
  let masked: MaskedEmbedding | undefined;
  if (config.masked) {
    const name = 'masked_embedding.token_ordering';
    const ordering = await readIds(info(name), source.name, name);
    ordering.forEach((id, i) => {
      if (id < 0 || id >= s.vocabSize)
        throw new ModelFormatError(source.name, `${name}[${i}]`, id, `not a token id in [0, ${s.vocabSize})`);
    });
    masked = {
      centroids: await f32('masked_embedding.centroids.weight'),
      ordering,
      topK: config.masked.topK,
    };
  }
  return {
    name: files.name,
    spec: s,
    backbone: config.backbone,
    layers,
    pre: await f32('pre_projection.weight'),
    post: await f32('post_projection.weight'),
    norm: await norm('model.norm.weight'),
    lm: await f32('model.embed_tokens.weight'),
    masked,
    targetNorm: normWeight(t, await target.weights.readF32(finalNormName(t))),
    sources,
  };
}

/** An integer tensor (I64, as torch saves a long buffer, or I32) as Int32Array. */
async function readIds(info: TensorInfo, file: string, name: string): Promise<Int32Array> {
  if (info.dtype !== 'I64' && info.dtype !== 'I32')
    throw new ModelFormatError(file, `${name}.dtype`, info.dtype, 'must be I64 or I32');
  return Int32Array.from(await readTensorF32(info));
}

/**
 * What an assistant step reads of its target's KV cache: per target layer it attends over, keys
 * (after RoPE) and values [≥ P, kvHeads · headDim] by slot (absolute position), valid at the slots
 * a row reads (see {@link assistantSlots}); other layers' entries are not read.
 */
export interface TargetKv {
  readonly keys: readonly Float32Array[];
  readonly values: readonly Float32Array[];
}

/**
 * What an AssistantRunner (assistant-runner.ts) reads of its target runner, once per forward: its committed
 * length, its features (the residual stream before its final norm), its embedding rows and the
 * K/V rows of the layers the assistant attends over.
 */
export interface AssistantTarget {
  readonly spec: ModelSpec;
  readonly kvLength: number;
  /** Committed features [to - from, Hb] (ModelRunner.features). */
  features(from: number, to: number): Promise<Float32Array>;
  /** E_target[id] · √Hb [n, Hb] of `ids`, as the target's embedding stage scales it. */
  embedRows(ids: readonly number[]): Promise<Float32Array>;
  /** Per layer of `ranges` (layer → [from, to) of committed slots), its K and V valid there. */
  kvRows(ranges: ReadonlyMap<number, readonly [number, number]>): Promise<TargetKv>;
  /** Frees what it made to read the target (not the target). */
  dispose(): void;
}

/**
 * The target slots a row anchored at P reads on an assistant layer of sliding window `window`
 * (undefined: a full layer): the whole context 0..P-1, or its window + 1 newest entries (HF's
 * flipped mask), as [from, P).
 */
export function assistantSlots(window: number | undefined, P: number): [number, number] {
  return [window === undefined ? 0 : Math.max(0, P - 1 - window), P];
}

/**
 * One assistant step over R rows (plain TS, f32 values with f64 sums, as the reference forward):
 * their target embeddings E_target[x] · √Hb [R, Hb], their input hiddens h [R, Hb] (already normed
 * where they are the target's), their anchor positions P (RoPE, and the context 0..P-1 they attend).
 * Returns the logits [R, V] and the next hiddens [R, Hb] (post_projection of the normed output).
 */
export function assistantStep(
  a: Assistant,
  kv: TargetKv,
  embedded: Float32Array,
  hidden: Float32Array,
  anchors: readonly number[],
): { logits: Float32Array; next: Float32Array } {
  const s = a.spec;
  const R = anchors.length;
  const Hb = a.backbone;
  const Ha = s.hidden;
  const V = s.vocabSize;
  // [R, 2·Hb]: the target's scaled embedding, then the hidden.
  const cat = new Float32Array(R * 2 * Hb);
  for (let r = 0; r < R; r++) {
    cat.set(embedded.subarray(r * Hb, (r + 1) * Hb), r * 2 * Hb);
    cat.set(hidden.subarray(r * Hb, (r + 1) * Hb), r * 2 * Hb + Hb);
  }
  const z = new Float32Array(R * Ha); // [R, Ha] the residual stream
  linear(cat, 2 * Hb, a.pre, Ha, undefined, z);
  const n = new Float32Array(R * Ha);
  const proj = new Float32Array(R * Ha);
  a.layers.forEach((w, l) => {
    const ls = layerSpec(s, l);
    const { qWidth } = deriveSizes(ls);
    const { window, rope: ropeSpec } = layerAttention(s, l);
    const I = ls.intermediate;
    rmsNorm(z, Ha, w.inputNorm, s.rmsEps, n);
    const q = new Float32Array(R * qWidth); // [R, heads, D]
    linear(n, Ha, w.q, qWidth, undefined, q);
    rmsNorm(q, ls.headDim, w.qNorm, s.rmsEps, q);
    if (ropeSpec)
      rope(q, ls.heads, ls.headDim, anchors, ropeInverseFrequencies(ropeSpec, ls.headDim), ropeSpec.layout);
    const src = a.sources[l]!;
    const keys = kv.keys[src]!;
    const values = kv.values[src]!;
    const attn = new Float32Array(R * qWidth);
    for (let r = 0; r < R; r++) {
      const [from, P] = assistantSlots(window, anchors[r]!);
      const slots = Array.from({ length: P - from }, (_, j) => from + j);
      attend(ls, q.subarray(r * qWidth, (r + 1) * qWidth), keys, values, slots, attn, r * qWidth);
    }
    linear(attn, qWidth, w.o, Ha, undefined, proj);
    rmsNorm(proj, Ha, w.postAttnNorm, s.rmsEps, proj);
    for (let i = 0; i < z.length; i++) z[i] = Math.fround(z[i]! + proj[i]!);
    rmsNorm(z, Ha, w.preFfNorm, s.rmsEps, n);
    const gate = new Float32Array(R * I);
    const up = new Float32Array(R * I);
    linear(n, Ha, w.gate, I, undefined, gate);
    linear(n, Ha, w.up, I, undefined, up);
    for (let i = 0; i < gate.length; i++) gate[i] = Math.fround(geluTanh(gate[i]!) * up[i]!);
    linear(gate, I, w.down, Ha, undefined, proj);
    rmsNorm(proj, Ha, w.postFfNorm, s.rmsEps, proj);
    for (let i = 0; i < z.length; i++) z[i] = Math.fround((z[i]! + proj[i]!) * w.scalar);
  });
  rmsNorm(z, Ha, a.norm, s.rmsEps, n);
  const next = new Float32Array(R * Hb);
  linear(n, Ha, a.post, Hb, undefined, next);
  const logits = new Float32Array(R * V);
  for (let r = 0; r < R; r++)
    headLogits(a, n.subarray(r * Ha, (r + 1) * Ha), logits.subarray(r * V, (r + 1) * V));
  return { logits, next };
}

/** gelu_pytorch_tanh in f32. */
function geluTanh(v: number): number {
  return Math.fround(0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v * v * v))));
}

/** The head's logits [V] of one normed output g [Ha]: the whole LM head, or the masked embedding. */
function headLogits(a: Assistant, g: Float32Array, out: Float32Array): void {
  const Ha = a.spec.hidden;
  const V = a.spec.vocabSize;
  const dotRow = (table: Float32Array, row: number): number => {
    let sum = 0;
    for (let i = 0; i < Ha; i++) sum += table[row * Ha + i]! * g[i]!;
    return Math.fround(sum);
  };
  const m = a.masked;
  if (!m) {
    for (let v = 0; v < V; v++) out[v] = dotRow(a.lm, v);
    return;
  }
  const C = m.centroids.length / Ha;
  const per = V / C;
  // torch.topk over the centroid logits: the k largest (ties to the lower index).
  const scores = Array.from({ length: C }, (_, c) => dotRow(m.centroids, c));
  const best = scores
    .map((v, c) => [v, c] as const)
    .sort((x, y) => y[0] - x[0] || x[1] - y[1])
    .slice(0, m.topK);
  const ids: number[] = [];
  for (const [, c] of best) for (let j = 0; j < per; j++) ids.push(m.ordering[c * per + j]!);
  const picked = ids.map((id) => dotRow(a.lm, id));
  out.fill(Math.fround(Math.min(...picked) - 1));
  ids.forEach((id, j) => {
    out[id] = picked[j]!;
  });
}
