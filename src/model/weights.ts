import { InvalidInputError } from '../errors.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { referenceBlock } from './blocks/index.js';
import type { RefBlock } from './blocks/kind.js';
import { normWeight } from './blocks/ops.js';
import { finalNormName, modelBlocks } from './families/index.js';
import type { ModelSpec } from './spec/spec.js';

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
export interface NamedTensors {
  get(name: string): Tensor;
}

/**
 * Wraps a plain record of tensors as a {@link NamedTensors}, for tests and small tools. A missing
 * name throws {@link InvalidInputError} naming it.
 */
export function mapWeights(record: Readonly<Record<string, Tensor>>): NamedTensors {
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

/** All of a model's weights, checked against its spec. */
export interface ModelWeights {
  /** [V, H] */
  readonly embed: Float32Array;
  /** Each block's reference forward over its weights, in forward order (`modelBlocks`). */
  readonly blocks: readonly RefBlock[];
  /** [H] */
  readonly norm: Float32Array;
  /** [V, H]; the same array as `embed` when `spec.tiedEmbeddings`. */
  readonly lmHead: Float32Array;
}

/**
 * Reads and checks every tensor a spec needs from a source, block by block. Throws
 * {@link InvalidInputError} naming the tensor when it is missing, when its shape differs from the
 * spec, or when its data length does not match its shape. With `spec.tiedEmbeddings` the LM head is
 * the embedding table.
 */
export function readWeights(spec: ModelSpec, source: NamedTensors): ModelWeights {
  const take = (name: string, shape: readonly number[]) => checkedTensor(source, name, shape);
  const H = spec.hidden;
  const embed = take('model.embed_tokens.weight', [spec.vocabSize, H]);
  return {
    embed,
    blocks: modelBlocks(spec).map((b) => referenceBlock(take, spec, b)),
    norm: normWeight(spec, take(finalNormName(spec), [H])),
    lmHead: spec.tiedEmbeddings ? embed : take('lm_head.weight', [spec.vocabSize, H]),
  };
}

/** Gets one tensor and checks its shape and data length, naming the tensor in any error. */
function checkedTensor(source: NamedTensors, name: string, want: readonly number[]): Float32Array {
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
