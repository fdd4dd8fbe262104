import { InvalidInputError } from '../errors.js';
import { weightShapes } from '../formats/layout.js';
import type { ModelSpec } from '../formats/spec.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';

/** A dense f32 tensor, row-major: the last dimension is contiguous. */
export interface Tensor {
  readonly shape: readonly number[];
  readonly data: Float32Array;
}

/**
 * Where a forward pass gets its weights: named f32 tensors under the checkpoint's own Hugging Face
 * names (`model.layers.0.self_attn.q_proj.weight`, ...). A loader (safetensors, GGUF after its
 * renames) or a test implements it; `get` throws {@link InvalidInputError} for an unknown name.
 */
export interface WeightSource {
  get(name: string): Tensor;
}

/**
 * Wraps a plain record of tensors as a {@link WeightSource}, for tests and small tools. A missing
 * name throws {@link InvalidInputError} naming it.
 */
export function mapWeights(record: Readonly<Record<string, Tensor>>): WeightSource {
  return {
    get(name: string): Tensor {
      const tensor = Object.hasOwn(record, name) ? record[name] : undefined;
      if (tensor === undefined) throw new InvalidInputError(`weights: missing tensor ${name}`);
      return tensor;
    },
  };
}

/**
 * Reads every tensor of a checkpoint as f32 in Hugging Face layout (for the CPU reference; small
 * models only): safetensors values as stored, GGUF blocks dequantized, weft-q matrices as the
 * values they multiply by (dequantized, un-rotated, unpadded).
 */
export async function readAllF32(weights: TensorReader): Promise<Record<string, Tensor>> {
  const out: Record<string, Tensor> = {};
  for (const [name, info] of weights.tensors)
    out[name] = { shape: info.shape, data: await weights.readF32(name) };
  return out;
}

/** One decoder layer's weights; projections are `[out, in]` as in PyTorch's `nn.Linear`. */
export interface LayerWeights {
  /** [H] */
  readonly inputNorm: Float32Array;
  /** [qWidth, H] */
  readonly q: Float32Array;
  /** [kvWidth, H] */
  readonly k: Float32Array;
  /** [kvWidth, H] */
  readonly v: Float32Array;
  /** [H, qWidth] */
  readonly o: Float32Array;
  /** [qWidth], [kvWidth], [kvWidth] when `spec.qkvBias`. */
  readonly qBias: Float32Array | undefined;
  readonly kBias: Float32Array | undefined;
  readonly vBias: Float32Array | undefined;
  /** [headDim] each, when `spec.qkNorm`. */
  readonly qNorm: Float32Array | undefined;
  readonly kNorm: Float32Array | undefined;
  /** [H] */
  readonly postNorm: Float32Array;
  /** [I, H] */
  readonly gate: Float32Array;
  /** [I, H] */
  readonly up: Float32Array;
  /** [H, I] */
  readonly down: Float32Array;
}

/** All of a model's weights, checked against its spec. */
export interface ModelWeights {
  /** [V, H] */
  readonly embed: Float32Array;
  readonly layers: readonly LayerWeights[];
  /** [H] */
  readonly norm: Float32Array;
  /** [V, H]; the same array as `embed` when `spec.tiedEmbeddings`. */
  readonly lmHead: Float32Array;
}

/**
 * Reads and checks every tensor a spec needs from a source. Throws {@link InvalidInputError} naming
 * the tensor when it is missing, when its shape differs from the spec, or when its data length does
 * not match its shape. With `spec.tiedEmbeddings` the LM head is the embedding table.
 */
export function readWeights(spec: ModelSpec, source: WeightSource): ModelWeights {
  const shapes = weightShapes(spec);
  const take = (name: string): Float32Array => {
    const want = shapes.get(name);
    if (want === undefined) throw new InvalidInputError(`weights: ${name} is not used by this spec`);
    return checkedTensor(source, name, want);
  };
  const takeIf = (on: boolean, name: string): Float32Array | undefined => (on ? take(name) : undefined);
  const layers: LayerWeights[] = [];
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    layers.push({
      inputNorm: take(`${p}.input_layernorm.weight`),
      q: take(`${p}.self_attn.q_proj.weight`),
      k: take(`${p}.self_attn.k_proj.weight`),
      v: take(`${p}.self_attn.v_proj.weight`),
      o: take(`${p}.self_attn.o_proj.weight`),
      qBias: takeIf(spec.qkvBias, `${p}.self_attn.q_proj.bias`),
      kBias: takeIf(spec.qkvBias, `${p}.self_attn.k_proj.bias`),
      vBias: takeIf(spec.qkvBias, `${p}.self_attn.v_proj.bias`),
      qNorm: takeIf(spec.qkNorm, `${p}.self_attn.q_norm.weight`),
      kNorm: takeIf(spec.qkNorm, `${p}.self_attn.k_norm.weight`),
      postNorm: take(`${p}.post_attention_layernorm.weight`),
      gate: take(`${p}.mlp.gate_proj.weight`),
      up: take(`${p}.mlp.up_proj.weight`),
      down: take(`${p}.mlp.down_proj.weight`),
    });
  }
  const embed = take('model.embed_tokens.weight');
  return {
    embed,
    layers,
    norm: take('model.norm.weight'),
    lmHead: spec.tiedEmbeddings ? embed : take('lm_head.weight'),
  };
}

/** Gets one tensor and checks its shape and data length, naming the tensor in any error. */
function checkedTensor(source: WeightSource, name: string, want: readonly number[]): Float32Array {
  const tensor = source.get(name);
  const same = tensor.shape.length === want.length && tensor.shape.every((d, i) => d === want[i]);
  if (!same)
    throw new InvalidInputError(
      `weights: ${name} has shape [${tensor.shape.join(', ')}], expected [${want.join(', ')}]`,
    );
  const count = want.reduce((a, b) => a * b, 1);
  if (tensor.data.length !== count)
    throw new InvalidInputError(
      `weights: ${name} has ${tensor.data.length} values for shape [${want.join(', ')}] (${count})`,
    );
  return tensor.data;
}
