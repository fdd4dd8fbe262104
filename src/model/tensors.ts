import { ModelFormatError } from '../formats/errors.js';
import { deriveSizes, layerKind, linearSizes, type ModelSpec } from './spec/spec.js';

/**
 * The Hugging Face name and shape of every tensor a spec needs, in checkpoint order. This is the one
 * place the names are written; every reader, `readWeights` and the test generators go through it.
 */
export function weightShapes(spec: ModelSpec): Map<string, readonly number[]> {
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const shapes = new Map<string, readonly number[]>();
  shapes.set('model.embed_tokens.weight', [spec.vocabSize, H]);
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    const linears = linearsByInput(i, spec);
    const norms = normNames(spec, i);
    shapes.set(norms.input, [H]);
    if (layerKind(spec, i) === 'linear') {
      for (const [name, shape] of linearAttentionShapes(spec, i)) shapes.set(name, shape);
    } else if (layerKind(spec, i) === 'conv') {
      for (const [name, shape] of shortConvShapes(spec, i)) shapes.set(name, shape);
    } else {
      const [q, k, v] = linears.qkv;
      // With an output gate, q_proj yields each head's query and then its gate.
      shapes.set(q, [spec.outputGate ? 2 * qWidth : qWidth, H]);
      shapes.set(k, [kvWidth, H]);
      shapes.set(v, [kvWidth, H]);
      if (spec.qkvBias) {
        shapes.set(`${p}.self_attn.q_proj.bias`, [qWidth]);
        shapes.set(`${p}.self_attn.k_proj.bias`, [kvWidth]);
        shapes.set(`${p}.self_attn.v_proj.bias`, [kvWidth]);
      }
      if (spec.qkNorm) {
        shapes.set(norms.q, [spec.headDim]);
        shapes.set(norms.k, [spec.headDim]);
      }
      shapes.set(linears.o[0], [H, qWidth]);
    }
    // Gemma's sandwich: post_attention_layernorm norms the attention output, the MLP has its own.
    if (spec.sandwichNorms) shapes.set(`${p}.post_attention_layernorm.weight`, [H]);
    shapes.set(norms.mlp, [H]);
    const [gate, up] = linears.gateUp;
    shapes.set(gate, [I, H]);
    shapes.set(up, [I, H]);
    shapes.set(linears.down[0], [H, I]);
    if (spec.sandwichNorms) shapes.set(`${p}.post_feedforward_layernorm.weight`, [H]);
  }
  shapes.set(finalNormName(spec), [H]);
  if (!spec.tiedEmbeddings) shapes.set('lm_head.weight', [spec.vocabSize, H]);
  return shapes;
}

/**
 * Layer `layer`'s norms under its family's names: the token mixer's input norm, the MLP's input
 * norm and attention's per-head q and k norms. Most families: `input_layernorm`,
 * `post_attention_layernorm` (Gemma's sandwich: `pre_feedforward_layernorm`, its
 * `post_attention_layernorm` norming the attention output), `self_attn.q_norm` and `k_norm`. LFM2:
 * `operator_norm`, `ffn_norm`, `self_attn.q_layernorm` and `k_layernorm`.
 */
export function normNames(
  spec: Pick<ModelSpec, 'family' | 'sandwichNorms'>,
  layer: number,
): { readonly input: string; readonly mlp: string; readonly q: string; readonly k: string } {
  const p = `model.layers.${layer}`;
  if (spec.family === 'lfm2')
    return {
      input: `${p}.operator_norm.weight`,
      mlp: `${p}.ffn_norm.weight`,
      q: `${p}.self_attn.q_layernorm.weight`,
      k: `${p}.self_attn.k_layernorm.weight`,
    };
  return {
    input: `${p}.input_layernorm.weight`,
    mlp: `${p}.${spec.sandwichNorms ? 'pre_feedforward' : 'post_attention'}_layernorm.weight`,
    q: `${p}.self_attn.q_norm.weight`,
    k: `${p}.self_attn.k_norm.weight`,
  };
}

/** The final norm's name: `model.norm` (LFM2: `model.embedding_norm`, applied after the last layer). */
export function finalNormName(spec: Pick<ModelSpec, 'family'>): string {
  return spec.family === 'lfm2' ? 'model.embedding_norm.weight' : 'model.norm.weight';
}

/**
 * An LFM2 short-convolution layer's tensors (`conv.*`), in forward order: in_proj [3H, H] (its
 * output rows B | C | x), the depthwise convolution [H, 1, kernel] and out_proj [H, H], each with a
 * bias when `shortConv.bias`.
 */
export function shortConvShapes(spec: ModelSpec, layer: number): [string, number[]][] {
  const sc = spec.shortConv;
  if (!sc) throw new ModelFormatError('(spec)', 'shortConv', undefined, 'a conv layer needs its sizes');
  const H = spec.hidden;
  const p = `model.layers.${layer}.conv`;
  const [inProj] = shortConvInputs(layer);
  const bias = (name: string, n: number): [string, number[]][] => (sc.bias ? [[name, [n]]] : []);
  return [
    [inProj, [3 * H, H]],
    ...bias(`${p}.in_proj.bias`, 3 * H),
    [`${p}.conv.weight`, [H, 1, sc.kernel]],
    ...bias(`${p}.conv.bias`, H),
    [`${p}.out_proj.weight`, [H, H]],
    ...bias(`${p}.out_proj.bias`, H),
  ];
}

/** The linear that reads a short-convolution layer's normed input: in_proj. */
export function shortConvInputs(layer: number): readonly [string] {
  return [`model.layers.${layer}.conv.in_proj.weight`];
}

/**
 * A Gated DeltaNet layer's tensors (Qwen3.5's `linear_attn`), in checkpoint order: the projections
 * of its input (q | k | v, the output gate z, the write strength b, the decay input a), the depthwise
 * convolution over q | k | v [channels, 1, kernel], the decay's `dt_bias` and `A_log`, the gated
 * norm over each value head, and out_proj.
 */
export function linearAttentionShapes(spec: ModelSpec, layer: number): [string, number[]][] {
  const la = spec.linearAttention;
  if (!la)
    throw new ModelFormatError('(spec)', 'linearAttention', undefined, 'a linear layer needs its sizes');
  const { valueWidth, convChannels } = linearSizes(spec);
  const H = spec.hidden;
  const [qkv, z, b, a] = linearAttentionInputs(layer);
  const p = `model.layers.${layer}.linear_attn`;
  return [
    [qkv, [convChannels, H]],
    [z, [valueWidth, H]],
    [b, [la.valueHeads, H]],
    [a, [la.valueHeads, H]],
    [`${p}.conv1d.weight`, [convChannels, 1, la.convKernel]],
    [`${p}.dt_bias`, [la.valueHeads]],
    [`${p}.A_log`, [la.valueHeads]],
    [`${p}.norm.weight`, [la.valueDim]],
    [`${p}.out_proj.weight`, [H, valueWidth]],
  ];
}

/** The linears that read a Gated DeltaNet layer's normed input: in_proj_qkv, _z, _b and _a. */
export function linearAttentionInputs(layer: number): readonly [string, string, string, string] {
  const p = `model.layers.${layer}.linear_attn`;
  return [
    `${p}.in_proj_qkv.weight`,
    `${p}.in_proj_z.weight`,
    `${p}.in_proj_b.weight`,
    `${p}.in_proj_a.weight`,
  ];
}

/**
 * The names of layer `layer`'s linear weights, grouped by the input they multiply: q, k and v read
 * the attention's normed hidden state, o the attention output, gate and up the MLP's normed hidden
 * state, down the gated product. Calibration (`collectHessians`) keys its statistics by these.
 * `spec` picks its family's names (LFM2: `self_attn.out_proj`, `feed_forward.w1` gate, `w3` up,
 * `w2` down); without it, the names every other family shares.
 */
export function linearsByInput(
  layer: number,
  spec?: Pick<ModelSpec, 'family'>,
): {
  readonly qkv: readonly [string, string, string];
  readonly o: readonly [string];
  readonly gateUp: readonly [string, string];
  readonly down: readonly [string];
} {
  const p = `model.layers.${layer}`;
  const qkv = [
    `${p}.self_attn.q_proj.weight`,
    `${p}.self_attn.k_proj.weight`,
    `${p}.self_attn.v_proj.weight`,
  ] as const;
  if (spec?.family === 'lfm2')
    return {
      qkv,
      o: [`${p}.self_attn.out_proj.weight`],
      gateUp: [`${p}.feed_forward.w1.weight`, `${p}.feed_forward.w3.weight`],
      down: [`${p}.feed_forward.w2.weight`],
    };
  return {
    qkv,
    o: [`${p}.self_attn.o_proj.weight`],
    gateUp: [`${p}.mlp.gate_proj.weight`, `${p}.mlp.up_proj.weight`],
    down: [`${p}.mlp.down_proj.weight`],
  };
}

/**
 * Checks that a checkpoint's tensors (name → shape) cover {@link weightShapes} with the right
 * shapes. Extra tensors (e.g. a redundant `lm_head.weight` in a tied checkpoint, rotary caches)
 * are allowed. Throws {@link ModelFormatError} naming the tensor, the shapes and a file: `file`
 * (the checkpoint, or a sharded one's index) for a missing tensor, `fileOf(tensor)` (the shard
 * holding it; `file` by default) for a wrong shape.
 */
export function checkTensors(
  spec: ModelSpec,
  tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>,
  file: string,
  fileOf: (tensor: string) => string = () => file,
): void {
  for (const [name, shape] of weightShapes(spec)) {
    const found = tensors.get(name);
    if (found === undefined) {
      throw new ModelFormatError(
        file,
        name,
        undefined,
        `missing tensor (expected shape [${shape.join(', ')}])`,
      );
    }
    if (found.shape.length !== shape.length || found.shape.some((d, i) => d !== shape[i])) {
      throw new ModelFormatError(
        fileOf(name),
        name,
        found.shape,
        `wrong shape, expected [${shape.join(', ')}]`,
      );
    }
  }
}

/** What {@link languageModelTensors} left out of a vision-language checkpoint, by part. */
export interface SkippedParts {
  /** The vision tower and projector (Qwen3.5's `model.visual.*`, Gemma 3's `vision_tower.*`, …). */
  readonly vision: number;
  /** The prefixes they stood under, each as `prefix*`. */
  readonly visionParts: readonly string[];
  /** `mtp.*`: the multi-token-prediction layer (kept). */
  readonly mtp: number;
}

/** Where vision-language checkpoints keep their vision side (left out of a text engine). */
const VISION_PARTS = [
  'model.visual.', // Qwen3.5
  'vision_tower.', // Gemma 3 as published
  'multi_modal_projector.',
  'model.vision_tower.', // Gemma 3 as Transformers 5 saves it
  'model.multi_modal_projector.',
];

/**
 * A vision-language checkpoint's language model under the names a text-only one uses: Qwen3.5's
 * published checkpoints (and Gemma 3's as Transformers 5 saves them) keep it under
 * `model.language_model.*`, Gemma 3's published ones under `language_model.model.*` (either
 * renamed to `model.*`), beside the vision tower and projector (left out and counted) and Qwen3.5's
 * MTP layer `mtp.*` (kept under its names, and counted). A checkpoint with neither prefix is
 * returned as it is.
 */
export function languageModelTensors<T>(tensors: ReadonlyMap<string, T>): {
  tensors: ReadonlyMap<string, T>;
  skipped: SkippedParts | undefined;
} {
  const names = [...tensors.keys()];
  const inner = ['model.language_model.', 'language_model.model.'].find((p) =>
    names.some((n) => n.startsWith(p)),
  );
  if (inner === undefined) return { tensors, skipped: undefined };
  const out = new Map<string, T>();
  let vision = 0;
  let mtp = 0;
  const parts = new Set<string>();
  for (const [name, t] of tensors) {
    const part = VISION_PARTS.find((p) => name.startsWith(p));
    if (name.startsWith(inner)) out.set(`model.${name.slice(inner.length)}`, t);
    else if (name === 'language_model.lm_head.weight') out.set('lm_head.weight', t);
    else if (part !== undefined) {
      vision++;
      parts.add(`${part}*`);
    } else {
      if (name.startsWith('mtp.')) mtp++;
      out.set(name, t); // lm_head.weight when untied, and the MTP layer (kept for draft: 'mtp')
    }
  }
  return { tensors: out, skipped: { vision, mtp, visionParts: [...parts] } };
}

/** A fused projection of a checkpoint and the row ranges of it that stand for plain linears. */
export interface FusedProjection {
  /** The checkpoint's name, e.g. `model.layers.0.self_attn.qkv_proj.weight`. */
  readonly name: string;
  /** Its shape [rows, H]: the parts' rows, stacked in order. */
  readonly shape: readonly [number, number];
  /** Each part's plain name ({@link linearsByInput}) and its rows [row0, row0 + rows). */
  readonly parts: readonly { readonly name: string; readonly row0: number; readonly rows: number }[];
}

/**
 * Layer `layer`'s fused projections as Phi-3 checkpoints store them (`Phi3Attention`, `Phi3MLP`):
 * `self_attn.qkv_proj` [qWidth + 2 · kvWidth, H] (the query rows, then the keys', then the
 * values') and `mlp.gate_up_proj` [2I, H] (the gate rows, then the up rows: `chunk(2)`). Every other
 * family stores its linears apart: none. `splitFusedView` serves the parts under their plain names.
 */
export function fusedProjections(spec: ModelSpec, layer: number): FusedProjection[] {
  if (spec.family !== 'phi3' || layerKind(spec, layer) !== 'attention') return [];
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const p = `model.layers.${layer}`;
  const { qkv, gateUp } = linearsByInput(layer, spec);
  return [
    {
      name: `${p}.self_attn.qkv_proj.weight`,
      shape: [qWidth + 2 * kvWidth, H],
      parts: [
        { name: qkv[0], row0: 0, rows: qWidth },
        { name: qkv[1], row0: qWidth, rows: kvWidth },
        { name: qkv[2], row0: qWidth + kvWidth, rows: kvWidth },
      ],
    },
    {
      name: `${p}.mlp.gate_up_proj.weight`,
      shape: [2 * I, H],
      parts: [
        { name: gateUp[0], row0: 0, rows: I },
        { name: gateUp[1], row0: I, rows: I },
      ],
    },
  ];
}

/**
 * The two parts of an output-gated q_proj `[2 · qWidth, H]` (Qwen3.5), under names of their own:
 * its query rows and its gate rows, each `[qWidth, H]` in head order. Per head, q_proj holds
 * headDim query rows then headDim gate rows; `outputGateView` serves the parts from a checkpoint.
 */
export function outputGateParts(qProj: string): readonly [string, string] {
  const stem = qProj.replace(/q_proj\.weight$/, '');
  return [`${stem}q_query_proj.weight`, `${stem}q_gate_proj.weight`];
}

/**
 * The tensors of a Qwen3.5 checkpoint's multi-token-prediction layer (`mtp.*`), in checkpoint
 * order: the norms of the next token's embedding and of the target's hidden state, their joint
 * projection `fc` [H, 2H], one full-attention decoder layer (as the model's attention layers: an
 * output-gated q_proj, QK-norm) with its MLP, and its final norm. It reads the target's embedding
 * table and LM head.
 */
export function mtpShapes(spec: ModelSpec): [string, number[]][] {
  const H = spec.hidden;
  // The layer's tensors are those of the model's layer 0 as an attention layer, under mtp.layers.0.
  const layer = weightShapes({ ...spec, layers: 1, layerKinds: ['attention'] });
  const decoder = [...layer]
    .filter(([name]) => name.startsWith('model.layers.0.'))
    .map(([name, shape]): [string, number[]] => [name.replace(/^model\./, 'mtp.'), [...shape]]);
  return [
    ['mtp.pre_fc_norm_embedding.weight', [H]],
    ['mtp.pre_fc_norm_hidden.weight', [H]],
    ['mtp.fc.weight', [H, 2 * H]],
    ...decoder,
    ['mtp.norm.weight', [H]],
  ];
}
