import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../../formats/errors.js';
import { type ModelFiles, modelFilePath, readJson } from '../../formats/io/files.js';
import {
  openSafetensors,
  readTensorBytes,
  readTensorF32,
  type TensorInfo,
} from '../../formats/safetensors.js';
import type { TensorReader } from '../../formats/weft-checkpoint.js';
import { sampleRef } from '../../kernels/sample/gumbel.js';
import type { Children } from '../../kernels/sample/topk.js';
import { addInto, attend, linear, rmsNorm, rope, ropeInverseFrequencies } from '../blocks/ops.js';
import { finalNormName, PLAIN_DECODER } from '../families/index.js';
import { ReferenceKvCache, rankScoredRows, scoredRows } from '../reference/reference.js';
import type { ForwardInput, ModelRunner, RankSpec, SamplerSpec } from '../runner.js';
import type { ModelSpec } from '../spec/spec.js';
import { chainParents, draftTree, pathTo } from '../tree.js';

// A draft head (EAGLE-style; issue 24): one decoder layer that reads the target's own hidden state
// and drafts the next tokens through the target's own LM head, so it drafts at the cost of a small
// fraction of a target pass. The architecture, exactly as tools/train/train_head.py trains it:
//
//   Features. f_i is the target's residual stream at position i after its last block, before its
//   final norm (ModelRunner.features).
//   Entries. The head keeps a KV cache of entries; the entry at position p ≥ 1 takes a feature and
//   the token x at p: the target's f_{p-1} while the target has scored position p - 1 (the context),
//   else the output g of its parent entry (the draft tree below the context). It computes
//     z = W_fc · [rmsnorm(E[x]; w_norm_embed) ; rmsnorm(f; w_norm_hidden)]       (E: the target's
//                                                                                 embedding table)
//     h = z + o_proj(attention(rmsnorm(z; w_input)))            (RoPE at p; the target's head shape)
//     g = h + down(silu(gate(rmsnorm(h; w_post))) · up(rmsnorm(h; w_post)))
//   and its logits over a draft vocabulary d2t (the training split's most frequent target ids):
//     logits[d2t[j]] = E_lm[d2t[j]] · rmsnorm(g; the target's final norm weight), -∞ elsewhere,
//   which score the token at p + 1. An entry sees the earlier entries visible to it (the context's
//   and its tree ancestors') and itself, never the entry at position 0 (no feature precedes it).
//   Depth by depth. A tree node's input is its parent's output, so a forward runs its rows in waves:
//   the rows whose feature is known first, then their children, and so on.

/** config.json `model_type` of a draft head checkpoint. */
const HEAD_MODEL_TYPE = 'weft_draft_head';

/** A draft head's shape, from its config.json. */
export interface HeadSpec {
  /** Width of the head's stream: the target's hidden size. */
  readonly hidden: number;
  readonly intermediate: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly rmsEps: number;
  readonly ropeTheta: number;
  /** Tokens the head can draft (its rows of the target's LM head). */
  readonly draftVocab: number;
  /** The target it was trained for: hidden size, vocabulary and layers. */
  readonly target: { readonly hidden: number; readonly vocabSize: number; readonly layers: number };
}

/** The head's own weights (f32), HF layout [out, in]. */
export interface HeadWeights {
  readonly fc: Float32Array; // [H, 2H]
  readonly normEmbed: Float32Array; // [H]
  readonly normHidden: Float32Array; // [H]
  readonly inputNorm: Float32Array; // [H]
  readonly q: Float32Array; // [heads · headDim, H]
  readonly k: Float32Array; // [kvHeads · headDim, H]
  readonly v: Float32Array; // [kvHeads · headDim, H]
  readonly o: Float32Array; // [H, heads · headDim]
  readonly postNorm: Float32Array; // [H]
  readonly gate: Float32Array; // [I, H]
  readonly up: Float32Array; // [I, H]
  readonly down: Float32Array; // [H, I]
  /** [Vd] draft row j → target token id, strictly increasing. */
  readonly d2t: Int32Array;
}

/** A head with the target weights it reads: everything a {@link HeadRunner} needs. */
export interface DraftHead {
  readonly name: string;
  readonly spec: HeadSpec;
  readonly weights: HeadWeights;
  /** The target's embedding table [V, H] (the head embeds any context token). */
  readonly embed: Float32Array;
  /** The target's final norm weight [H]. */
  readonly norm: Float32Array;
  /** The target's LM head rows of the draft vocabulary [Vd, H]. */
  readonly lmRows: Float32Array;
  /**
   * A checkpoint's own multi-token-prediction layer (Qwen3.5's `mtp.*`, see model/mtp.ts) instead
   * of the EAGLE layer above: its input reads the target's hidden state after the target's final
   * norm (`featureNorm`), and `body` runs its decoder layer on the fc output x [R, H] in place.
   */
  readonly mtp?: {
    readonly featureNorm: Float32Array;
    body(
      x: Float32Array,
      positions: readonly number[],
      slots: readonly number[],
      attended: readonly (readonly number[])[],
      cache: ReferenceKvCache,
    ): void;
  };
}

/** True when `files` hold a draft head (config.json's `model_type` is {@link HEAD_MODEL_TYPE}). */
export async function isDraftHead(files: ModelFiles): Promise<boolean> {
  if (files.gguf || !(await files.exists('config.json'))) return false;
  const config = await readJson(files, 'config.json');
  return (
    typeof config === 'object' &&
    config !== null &&
    (config as Record<string, unknown>).model_type === HEAD_MODEL_TYPE
  );
}

/** Parses a head's config.json (`file` names it in errors). */
export function headSpecFromConfig(config: unknown, file: string): HeadSpec {
  if (typeof config !== 'object' || config === null || Array.isArray(config))
    throw new ModelFormatError(file, 'config', config, 'must be a JSON object');
  const c = config as Record<string, unknown>;
  if (c.model_type !== HEAD_MODEL_TYPE)
    throw new ModelFormatError(file, 'model_type', c.model_type, `must be "${HEAD_MODEL_TYPE}"`);
  const int = (o: Record<string, unknown>, field: string, prefix = ''): number => {
    const v = o[field];
    if (!Number.isInteger(v) || (v as number) < 1)
      throw new ModelFormatError(file, prefix + field, v, 'must be a positive integer');
    return v as number;
  };
  const positive = (field: string, fallback: number): number => {
    const v = c[field] ?? fallback;
    if (typeof v !== 'number' || !(v > 0))
      throw new ModelFormatError(file, field, v, 'must be a positive number');
    return v;
  };
  const t = c.target;
  if (typeof t !== 'object' || t === null || Array.isArray(t))
    throw new ModelFormatError(
      file,
      'target',
      t,
      'must be an object (hidden_size, vocab_size, num_hidden_layers)',
    );
  const target = t as Record<string, unknown>;
  const spec: HeadSpec = {
    hidden: int(c, 'hidden_size'),
    intermediate: int(c, 'intermediate_size'),
    heads: int(c, 'num_attention_heads'),
    kvHeads: int(c, 'num_key_value_heads'),
    headDim: int(c, 'head_dim'),
    rmsEps: positive('rms_norm_eps', 1e-6),
    ropeTheta: positive('rope_theta', 10000),
    draftVocab: int(c, 'draft_vocab_size'),
    target: {
      hidden: int(target, 'hidden_size', 'target.'),
      vocabSize: int(target, 'vocab_size', 'target.'),
      layers: int(target, 'num_hidden_layers', 'target.'),
    },
  };
  if (spec.heads % spec.kvHeads !== 0)
    throw new ModelFormatError(
      file,
      'num_key_value_heads',
      spec.kvHeads,
      `must divide num_attention_heads (${spec.heads})`,
    );
  if (spec.headDim % 2 !== 0)
    throw new ModelFormatError(file, 'head_dim', spec.headDim, 'must be even (RoPE)');
  if (spec.hidden !== spec.target.hidden)
    throw new ModelFormatError(
      file,
      'hidden_size',
      spec.hidden,
      `must equal target.hidden_size (${spec.target.hidden})`,
    );
  if (spec.draftVocab > spec.target.vocabSize)
    throw new ModelFormatError(
      file,
      'draft_vocab_size',
      spec.draftVocab,
      `exceeds target.vocab_size (${spec.target.vocabSize})`,
    );
  return spec;
}

/** Tensor names and shapes of a head checkpoint (d2t included). */
export function headShapes(s: HeadSpec): Map<string, number[]> {
  const H = s.hidden;
  const qw = s.heads * s.headDim;
  const kvw = s.kvHeads * s.headDim;
  const I = s.intermediate;
  return new Map([
    ['fc.weight', [H, 2 * H]],
    ['norm_embed.weight', [H]],
    ['norm_hidden.weight', [H]],
    ['layer.input_layernorm.weight', [H]],
    ['layer.self_attn.q_proj.weight', [qw, H]],
    ['layer.self_attn.k_proj.weight', [kvw, H]],
    ['layer.self_attn.v_proj.weight', [kvw, H]],
    ['layer.self_attn.o_proj.weight', [H, qw]],
    ['layer.post_attention_layernorm.weight', [H]],
    ['layer.mlp.gate_proj.weight', [I, H]],
    ['layer.mlp.up_proj.weight', [I, H]],
    ['layer.mlp.down_proj.weight', [H, I]],
    ['d2t', [s.draftVocab]],
  ]);
}

/**
 * The head as a one-layer model over the target's vocabulary (what its runners report as `spec`):
 * a plain decoder layer under Llama's names (the head's own architecture, whatever the target's
 * family: none of a target's per-layer inputs, shared KV, sandwich norms or soft-capping), the
 * head's layer shape, RoPE without scaling, no biases, no QK-norm, its own LM head.
 */
export function headModelSpec(s: HeadSpec, target: ModelSpec): ModelSpec {
  return {
    family: PLAIN_DECODER,
    vocabSize: target.vocabSize,
    maxPositions: target.maxPositions,
    bosId: target.bosId,
    eosIds: target.eosIds,
    hidden: s.hidden,
    intermediate: s.intermediate,
    layers: 1,
    heads: s.heads,
    kvHeads: s.kvHeads,
    headDim: s.headDim,
    rmsEps: s.rmsEps,
    rope: { theta: s.ropeTheta, layout: 'half' },
    qkvBias: false,
    qkNorm: false,
    tiedEmbeddings: false,
  };
}

/** Parameters one draft depth reads per row: the head's matrices and its LM rows. */
function headParamsPerPass(s: HeadSpec): number {
  const H = s.hidden;
  const attn = H * (2 * s.heads * s.headDim + 2 * s.kvHeads * s.headDim);
  return 2 * H * H + attn + 3 * H * s.intermediate + s.draftVocab * H;
}

/**
 * Opens a draft head (config.json and model.safetensors in `files`) for a target whose spec and
 * tensors are given, checking that they belong together, and reads what it needs of the target:
 * the embedding table, the final norm and the LM head's rows of the draft vocabulary. Errors name
 * the file, the field and the value.
 */
export async function openDraftHead(
  files: ModelFiles,
  target: { readonly spec: ModelSpec; readonly weights: TensorReader },
): Promise<DraftHead> {
  const configFile = modelFilePath(files.name, 'config.json');
  const spec = headSpecFromConfig(await readJson(files, 'config.json'), configFile);
  const t = target.spec;
  for (const [field, mine, theirs] of [
    ['target.hidden_size', spec.target.hidden, t.hidden],
    ['target.vocab_size', spec.target.vocabSize, t.vocabSize],
    ['target.num_hidden_layers', spec.target.layers, t.layers],
  ] as const)
    if (mine !== theirs)
      throw new ModelFormatError(
        configFile,
        field,
        mine,
        `the head was trained for another target (this one has ${theirs})`,
      );
  const source = await files.open('model.safetensors');
  const checkpoint = await openSafetensors(source);
  const shapes = headShapes(spec);
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
  const d2tInfo = info('d2t');
  if (d2tInfo.dtype !== 'I32')
    throw new ModelFormatError(source.name, 'd2t.dtype', d2tInfo.dtype, 'must be I32');
  const bytes = await readTensorBytes(d2tInfo);
  const d2t = new Int32Array(bytes.slice().buffer, 0, spec.draftVocab);
  d2t.forEach((id, j) => {
    if (id < 0 || id >= t.vocabSize || (j > 0 && id <= d2t[j - 1]!))
      throw new ModelFormatError(
        source.name,
        `d2t[${j}]`,
        id,
        `draft ids must be strictly increasing target ids in [0, ${t.vocabSize})`,
      );
  });
  const weights: HeadWeights = {
    fc: await f32('fc.weight'),
    normEmbed: await f32('norm_embed.weight'),
    normHidden: await f32('norm_hidden.weight'),
    inputNorm: await f32('layer.input_layernorm.weight'),
    q: await f32('layer.self_attn.q_proj.weight'),
    k: await f32('layer.self_attn.k_proj.weight'),
    v: await f32('layer.self_attn.v_proj.weight'),
    o: await f32('layer.self_attn.o_proj.weight'),
    postNorm: await f32('layer.post_attention_layernorm.weight'),
    gate: await f32('layer.mlp.gate_proj.weight'),
    up: await f32('layer.mlp.up_proj.weight'),
    down: await f32('layer.mlp.down_proj.weight'),
    d2t,
  };
  const embed = await target.weights.readF32('model.embed_tokens.weight');
  const lm = t.tiedEmbeddings ? embed : await target.weights.readF32('lm_head.weight');
  const H = spec.hidden;
  const lmRows = new Float32Array(spec.draftVocab * H);
  d2t.forEach((id, j) => {
    lmRows.set(lm.subarray(id * H, (id + 1) * H), j * H);
  });
  return {
    name: files.name,
    spec,
    weights,
    embed,
    norm: await target.weights.readF32(finalNormName(target.spec)),
    lmRows,
  };
}

/**
 * A draft head as a {@link ModelRunner} over the target's vocabulary, on the CPU (plain TS, f32
 * values with f64 sums, as the reference forward): what {@link ModelDrafter} drives to grow trees
 * and keep the head's cache in step with the context. It reads the target's features through
 * `target.features` (see the architecture above), so the target must keep them.
 */
export class HeadRunner implements ModelRunner {
  readonly spec: ModelSpec;
  readonly capacity: number;
  /** The head's one-layer KV cache. */
  private readonly cache: ReferenceKvCache;
  /** [capacity, H] the output feature g of the entry at each slot, committed with the cache. */
  private readonly outputs: Float32Array;
  private readonly invFreq: Float32Array;
  private lastTokens = 0;
  /** Logits [R, V] of the rows the last forward scored (-∞ outside the draft vocabulary). */
  private scored: Float32Array = new Float32Array(0);

  constructor(
    readonly head: DraftHead,
    private readonly target: ModelRunner,
    capacity = target.capacity,
  ) {
    if (!target.features)
      throw new InvalidInputError(`draft head ${head.name}: the target runner does not keep its features`);
    const s = head.spec;
    this.spec = headModelSpec(s, target.spec);
    this.capacity = capacity;
    this.cache = new ReferenceKvCache(1, s.kvHeads * s.headDim, capacity);
    this.outputs = new Float32Array(capacity * s.hidden);
    this.invFreq = ropeInverseFrequencies(this.spec.rope, s.headDim);
  }

  get kvLength(): number {
    return this.cache.length;
  }

  /** Parameters one draft depth reads per row (f32 here). */
  get weightBytesPerPass(): number {
    return headParamsPerPass(this.head.spec) * 4;
  }

  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    if (input.masks) throw new InvalidInputError('draft head: constrained rows are not supported');
    const { tokens } = input;
    const parents = input.parents ?? chainParents(tokens.length);
    const T = tokens.length;
    const V = this.spec.vocabSize;
    if (T < 1 || parents.length !== T)
      throw new InvalidInputError(
        `forward: tokens ${T}, parents ${parents.length}: need equal, non-zero lengths`,
      );
    tokens.forEach((t, i) => {
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new InvalidInputError(`forward: tokens[${i}] = ${t} not in [0, ${V})`);
    });
    const tree = draftTree(parents);
    const start = this.cache.length;
    const positions = tree.depth.map((d) => start + d);
    const slots = tokens.map((_, i) => start + i);
    this.cache.checkSlots(slots, 'forward');
    const H = this.head.spec.hidden;
    // Features: the target's while it has scored the position before, else the parent's output.
    const known = this.target.kvLength;
    const fromTarget = positions.map((p) => p >= 1 && p - 1 < known);
    const needed = positions.filter((_, i) => fromTarget[i]).map((p) => p - 1);
    const lo = Math.min(...needed);
    const targetRows =
      needed.length > 0 ? await this.target.features!(lo, Math.max(...needed) + 1) : new Float32Array(0);
    const wave: number[] = [];
    parents.forEach((p, i) => {
      wave.push(fromTarget[i] || p < 0 ? 0 : wave[p]! + 1);
    });
    const g = new Float32Array(T * H);
    // Every row sees the committed entries but the one at position 0, then its path in this forward.
    const prefix = Array.from({ length: Math.max(0, start - 1) }, (_, s) => s + 1);
    for (let w = 0; w <= Math.max(...wave); w++) {
      const rowsOf = tokens.map((_, i) => i).filter((i) => wave[i] === w);
      const features = new Float32Array(rowsOf.length * H);
      rowsOf.forEach((i, r) => {
        const p = positions[i]!;
        if (fromTarget[i]) features.set(targetRows.subarray((p - 1 - lo) * H, (p - lo) * H), r * H);
        else if (parents[i]! >= 0) features.set(g.subarray(parents[i]! * H, (parents[i]! + 1) * H), r * H);
        else if (p >= 1) features.set(this.outputs.subarray((p - 1) * H, p * H), r * H);
        // Position 0 has no feature: zeros (its entry is never attended to).
      });
      const out = this.layer(
        rowsOf.map((i) => tokens[i]!),
        features,
        rowsOf.map((i) => positions[i]!),
        rowsOf.map((i) => slots[i]!),
        rowsOf.map((i) =>
          prefix.concat(pathTo(tree, i).map((j) => slots[j]!)).filter((s) => s !== 0 || s === slots[i]),
        ),
      );
      rowsOf.forEach((i, r) => {
        g.set(out.subarray(r * H, (r + 1) * H), i * H);
      });
    }
    slots.forEach((s, i) => {
      this.outputs.set(g.subarray(i * H, (i + 1) * H), s * H);
    });
    this.lastTokens = T;
    const picked = rows === 'last' ? [T - 1] : tokens.map((_, i) => i);
    this.scored = this.logitsOf(g, picked);
    return Int32Array.from(picked, (i, r) =>
      sampleRef(this.scored.subarray(r * V, (r + 1) * V), sampler.seed, start + tree.depth[i]! + 1, sampler),
    );
  }

  /**
   * The head's layer over rows whose inputs are ready: their tokens, features [R, H], positions,
   * cache slots (their K/V rows are written there) and the slots each attends to. Returns g [R, H].
   */
  private layer(
    tokens: readonly number[],
    features: Float32Array,
    positions: readonly number[],
    slots: readonly number[],
    attended: readonly (readonly number[])[],
  ): Float32Array {
    const { head, spec, cache } = this;
    const w = head.weights;
    const s = head.spec;
    const R = tokens.length;
    const H = s.hidden;
    const I = s.intermediate;
    const qw = s.heads * s.headDim;
    const kvw = s.kvHeads * s.headDim;
    const e = new Float32Array(R * H);
    tokens.forEach((t, r) => {
      e.set(head.embed.subarray(t * H, (t + 1) * H), r * H);
    });
    rmsNorm(e, H, w.normEmbed, s.rmsEps, e);
    const f = new Float32Array(features);
    if (head.mtp) rmsNorm(f, H, head.mtp.featureNorm, s.rmsEps, f); // the target's output, normed
    rmsNorm(f, H, w.normHidden, s.rmsEps, f);
    const cat = new Float32Array(R * 2 * H);
    for (let r = 0; r < R; r++) {
      cat.set(e.subarray(r * H, (r + 1) * H), r * 2 * H);
      cat.set(f.subarray(r * H, (r + 1) * H), r * 2 * H + H);
    }
    const x = new Float32Array(R * H);
    linear(cat, 2 * H, w.fc, H, undefined, x);
    if (head.mtp) {
      head.mtp.body(x, positions, slots, attended, cache);
      return x;
    }
    const h = new Float32Array(R * H);
    rmsNorm(x, H, w.inputNorm, s.rmsEps, h);
    const q = new Float32Array(R * qw);
    const k = new Float32Array(R * kvw);
    const v = new Float32Array(R * kvw);
    linear(h, H, w.q, qw, undefined, q);
    linear(h, H, w.k, kvw, undefined, k);
    linear(h, H, w.v, kvw, undefined, v);
    rope(q, s.heads, s.headDim, positions, this.invFreq, 'half');
    rope(k, s.kvHeads, s.headDim, positions, this.invFreq, 'half');
    const keys = cache.keys[0]!;
    const values = cache.values[0]!;
    slots.forEach((slot, r) => {
      keys.set(k.subarray(r * kvw, (r + 1) * kvw), slot * kvw);
      values.set(v.subarray(r * kvw, (r + 1) * kvw), slot * kvw);
    });
    const attn = new Float32Array(R * qw);
    for (let r = 0; r < R; r++)
      attend(spec, q.subarray(r * qw, (r + 1) * qw), keys, values, attended[r]!, attn, r * qw);
    const proj = new Float32Array(R * H);
    linear(attn, qw, w.o, H, undefined, proj);
    addInto(x, proj);
    rmsNorm(x, H, w.postNorm, s.rmsEps, h);
    const gate = new Float32Array(R * I);
    const up = new Float32Array(R * I);
    linear(h, H, w.gate, I, undefined, gate);
    linear(h, H, w.up, I, undefined, up);
    for (let i = 0; i < gate.length; i++) {
      const a = gate[i]!;
      gate[i] = Math.fround(a / (1 + Math.exp(-a))) * up[i]!;
    }
    linear(gate, I, w.down, H, undefined, proj);
    addInto(x, proj);
    return x;
  }

  /** Logits [rows.length, V] of rows of g: the draft vocabulary's, -∞ at every other id. */
  private logitsOf(g: Float32Array, rows: readonly number[]): Float32Array {
    const { head } = this;
    const H = head.spec.hidden;
    const Vd = head.spec.draftVocab;
    const V = this.spec.vocabSize;
    const x = new Float32Array(rows.length * H);
    rows.forEach((i, r) => {
      x.set(g.subarray(i * H, (i + 1) * H), r * H);
    });
    rmsNorm(x, H, head.norm, head.spec.rmsEps, x);
    const small = new Float32Array(rows.length * Vd);
    linear(x, H, head.lmRows, Vd, undefined, small);
    const out = new Float32Array(rows.length * V).fill(Number.NEGATIVE_INFINITY);
    for (let r = 0; r < rows.length; r++)
      head.weights.d2t.forEach((id, j) => {
        out[r * V + id] = small[r * Vd + j]!;
      });
    return out;
  }

  async lastLogits(rows?: readonly number[]): Promise<Float32Array> {
    return scoredRows(this.scored, this.spec.vocabSize, rows);
  }

  async lastChildren(
    rows: readonly number[],
    positions: readonly number[],
    sampler: RankSpec,
    k: number,
  ): Promise<Children> {
    return rankScoredRows(this.scored, this.spec.vocabSize, rows, positions, sampler, k);
  }

  commit(path: readonly number[]): void {
    for (const i of path)
      if (!Number.isInteger(i) || i < 0 || i >= this.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.lastTokens} tokens)`,
        );
    const start = this.cache.length;
    const H = this.head.spec.hidden;
    const rows = path.map((i) => this.outputs.slice((start + i) * H, (start + i + 1) * H));
    this.cache.commitPath(path.map((i) => start + i));
    rows.forEach((row, d) => {
      this.outputs.set(row, (start + d) * H);
    });
    this.lastTokens = 0;
  }

  trim(length: number): void {
    this.cache.trim(Math.min(length, this.cache.length));
    this.lastTokens = 0;
  }

  /** Nothing to free: the head's arrays go with it, and the target is not the head's to dispose. */
  dispose(): void {}
}
