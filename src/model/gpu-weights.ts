import { InvalidInputError } from '../errors.js';
import { deriveSizes } from '../formats/spec.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { uploadBuffer } from '../gpu/buffers.js';
import type { GpuContext } from '../gpu/device.js';
import { type GpuMatrix, uploadGatedPair, uploadMatrix } from '../kernels/matmul/matmul.js';
import { concatRows, type QuantizedMatrix } from '../kernels/matmul/quant.js';
import { isRotatedLinear, type Quant, type RotationChoice, rotationFor } from '../quant/pack.js';
import type { OpenedModel } from './load.js';
import { loadsAsStored, placedFormat, placedMatrix, placedPad } from './quantized.js';

/** Largest number of tokens one forward pass takes (prefill chunk or draft tree). */
export const MAX_FORWARD_TOKENS = 64;

/**
 * One decoder layer's weights on the GPU, under the checkpoint's names and shapes. Ip is the MLP
 * width as packed (see {@link placeWeights}): I, or I padded with zero rows of gate/up and zero
 * columns of down.
 */
export interface LayerWeights {
  inputNorm: GPUBuffer; // [H]
  postNorm: GPUBuffer; // [H]
  // q_proj, k_proj and v_proj stacked by rows as one matrix whose output row is q | k | v, where
  // their formats agree and each piece ends on a block (concatRows); else the three matrices.
  qkv: GpuMatrix | readonly [GpuMatrix, GpuMatrix, GpuMatrix]; // [qWidth + 2·kvWidth, H] | [qWidth, H], [kvWidth, H], [kvWidth, H]
  o: GpuMatrix; // [H, qWidth]
  // gate_proj and up_proj as one gated pair (uploadGatedPair: silu(gate·x) * (up·x) in one matmul)
  // where their formats and blocks allow; else the two matrices.
  gateUp: GpuMatrix | readonly [GpuMatrix, GpuMatrix]; // gated [Ip, H] | [Ip, H], [Ip, H]
  down: GpuMatrix; // [H, Ip]
  // The q | k | v bias as one row (the fused kernel adds it), and each bias repeated for
  // MAX_FORWARD_TOKENS rows for the unfused path's in-place adds.
  qkvBias: GPUBuffer | undefined; // [qWidth + 2·kvWidth]
  qBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, qWidth]
  kBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, kvWidth]
  vBias: GPUBuffer | undefined; // [MAX_FORWARD_TOKENS, kvWidth]
  qNorm: GPUBuffer | undefined; // [headDim]
  kNorm: GPUBuffer | undefined; // [headDim]
}

/** The matrices of a layer, each once (stacked or not). */
export function layerMatrices(l: LayerWeights): GpuMatrix[] {
  const list = (m: GpuMatrix | readonly GpuMatrix[]) => ('parts' in m ? [m] : [...m]);
  return [...list(l.qkv), l.o, ...list(l.gateUp), l.down];
}

/** A model's weights, resident on the GPU. */
export interface GpuWeights {
  embed: GpuMatrix; // [V, H]
  layers: LayerWeights[];
  norm: GPUBuffer; // [H]
  lmHead: GpuMatrix; // [V, H], `embed` itself when the embeddings are tied
}

/** Options of {@link placeWeights}. */
export interface PlaceWeightsOptions {
  /** The arithmetic the linears are packed for (its weight format). */
  quant: Quant;
  /** The input rotations the `*_proj` weights are packed for (W·Rᵀ, see `packLinear`), by width. */
  rotate: RotationChoice;
  onProgress?: (e: { phase: 'weights'; done: number; total: number; tensor: string }) => void;
}

/**
 * Places an opened model's weights on the GPU, tensor by tensor: each is read, packed in the
 * format of `o.quant` (or copied when its file stores it packed that way: a weft-q checkpoint,
 * GGUF blocks with a weft layout), uploaded and dropped before the next, in checkpoint order
 * (embedding, each layer, final norm, LM head). Loaded at the file's own packing, each matrix keeps
 * its own stored format where it has one ({@link placedFormat}), so matrices may differ in format.
 * `onProgress` reports every tensor placed.
 */
export async function placeWeights(
  ctx: GpuContext,
  opened: OpenedModel,
  o: PlaceWeightsOptions,
): Promise<GpuWeights> {
  const { spec, weights } = opened;
  const asStored = loadsAsStored(opened.packed, o.quant, o.rotate);
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const V = spec.vocabSize;
  const D = spec.headDim;
  const total = weights.tensors.size;
  let done = 0;
  const step = (name: string) => o.onProgress?.({ phase: 'weights', done: ++done, total, tensor: name });
  // The matmul reads K in blocks of 16, and a rotation needs a Hadamard size. An MLP width that is
  // neither (the demo draft's 344) is padded with zero rows of gate/up and zero columns of down
  // (placedPad): silu(0) * 0 = 0, so exact. The residual and attention widths must already be both.
  // Each matrix is in the format placedFormat chooses; one stored exactly so is copied, anything
  // else is packed here (placedMatrix).
  const packed = async (name: string, rows: number, cols: number): Promise<QuantizedMatrix> => {
    checkTensor(weights, name, [rows, cols]);
    const r = isRotatedLinear(name) ? rotationFor(o.rotate, cols) : 'none';
    const pad = placedPad(spec, name, rows, cols, o.rotate);
    const format = placedFormat(weights, name, o.quant, asStored);
    const m = await placedMatrix(weights, name, rows, cols, pad, format, r);
    step(name);
    return m;
  };
  const matrix = async (name: string, rows: number, cols: number): Promise<GpuMatrix> =>
    uploadMatrix(ctx, await packed(name, rows, cols), name);
  // Stacked or paired where the formats and blocks allow (concatRows and uploadGatedPair check and
  // throw InvalidInputError otherwise), else uploaded one by one.
  const stacked = (p: string, q: QuantizedMatrix, k: QuantizedMatrix, v: QuantizedMatrix) => {
    try {
      return uploadMatrix(ctx, concatRows([q, k, v]), `${p}.self_attn.qkv_proj.weight`);
    } catch (e) {
      if (!(e instanceof InvalidInputError)) throw e;
      const names = ['q', 'k', 'v'].map((x) => `${p}.self_attn.${x}_proj.weight`);
      return [
        uploadMatrix(ctx, q, names[0]!),
        uploadMatrix(ctx, k, names[1]!),
        uploadMatrix(ctx, v, names[2]!),
      ] as const;
    }
  };
  // W8A8 multiplies int8 activations and has no gated variant: its gate and up stay two matrices.
  const paired = (p: string, gate: QuantizedMatrix, up: QuantizedMatrix) => {
    try {
      if (o.quant === 'w8a8') throw new InvalidInputError('w8a8: no gated pair');
      return uploadGatedPair(ctx, gate, up, `${p}.mlp.gate_up_proj.weight`);
    } catch (e) {
      if (!(e instanceof InvalidInputError)) throw e;
      return [
        uploadMatrix(ctx, gate, `${p}.mlp.gate_proj.weight`),
        uploadMatrix(ctx, up, `${p}.mlp.up_proj.weight`),
      ] as const;
    }
  };
  const row = async (p: string, n: number): Promise<GPUBuffer> => {
    const parts = await Promise.all(
      ['q', 'k', 'v'].map((x) => weights.readF32(`${p}.self_attn.${x}_proj.bias`)),
    );
    const out = new Float32Array(n);
    let at = 0;
    for (const b of parts) {
      out.set(b, at);
      at += b.length;
    }
    return uploadBuffer(ctx, out, `${p}.self_attn.qkv_proj.bias`);
  };
  const vector = async (name: string, n: number, repeat = 1): Promise<GPUBuffer> => {
    checkTensor(weights, name, [n]);
    const v = await weights.readF32(name);
    step(name);
    return uploadBuffer(ctx, repeat > 1 ? repeatRows(v, repeat) : v, name);
  };

  const embed = await matrix('model.embed_tokens.weight', V, H);
  const layers: LayerWeights[] = [];
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    const maxT = MAX_FORWARD_TOKENS;
    layers.push({
      inputNorm: await vector(`${p}.input_layernorm.weight`, H),
      postNorm: await vector(`${p}.post_attention_layernorm.weight`, H),
      qkv: stacked(
        p,
        await packed(`${p}.self_attn.q_proj.weight`, qWidth, H),
        await packed(`${p}.self_attn.k_proj.weight`, kvWidth, H),
        await packed(`${p}.self_attn.v_proj.weight`, kvWidth, H),
      ),
      o: await matrix(`${p}.self_attn.o_proj.weight`, H, qWidth),
      gateUp: paired(
        p,
        await packed(`${p}.mlp.gate_proj.weight`, I, H),
        await packed(`${p}.mlp.up_proj.weight`, I, H),
      ),
      down: await matrix(`${p}.mlp.down_proj.weight`, H, I),
      qkvBias: spec.qkvBias ? await row(p, qWidth + 2 * kvWidth) : undefined,
      qBias: spec.qkvBias ? await vector(`${p}.self_attn.q_proj.bias`, qWidth, maxT) : undefined,
      kBias: spec.qkvBias ? await vector(`${p}.self_attn.k_proj.bias`, kvWidth, maxT) : undefined,
      vBias: spec.qkvBias ? await vector(`${p}.self_attn.v_proj.bias`, kvWidth, maxT) : undefined,
      qNorm: spec.qkNorm ? await vector(`${p}.self_attn.q_norm.weight`, D) : undefined,
      kNorm: spec.qkNorm ? await vector(`${p}.self_attn.k_norm.weight`, D) : undefined,
    });
  }
  const norm = await vector('model.norm.weight', H);
  const lmHead = spec.tiedEmbeddings ? embed : await matrix('lm_head.weight', V, H);
  return { embed, layers, norm, lmHead };
}

/** Destroys every buffer of `w` (a tied LM head once). */
export function destroyWeights(w: GpuWeights): void {
  const matrices = new Set([w.embed, w.lmHead]);
  w.norm.destroy();
  for (const l of w.layers) {
    for (const m of layerMatrices(l)) matrices.add(m);
    for (const b of [l.inputNorm, l.postNorm, l.qkvBias, l.qBias, l.kBias, l.vBias, l.qNorm, l.kNorm])
      b?.destroy();
  }
  for (const m of matrices) m.destroy();
}

/** Checks that a tensor exists with `shape` (its Hugging Face shape, whatever the file format). */
function checkTensor(weights: TensorReader, name: string, shape: readonly number[]): void {
  const info = weights.tensors.get(name);
  if (!info) throw new InvalidInputError(`model weights: missing tensor ${name}`);
  if (info.shape.length !== shape.length || info.shape.some((d, i) => d !== shape[i]))
    throw new InvalidInputError(`model weights: ${name} has shape [${info.shape}], expected [${shape}]`);
}

/** Repeats a bias vector for every row a forward pass can hold. */
function repeatRows(v: Float32Array, rows: number): Float32Array {
  const out = new Float32Array(v.length * rows);
  for (let r = 0; r < rows; r++) out.set(v, r * v.length);
  return out;
}
