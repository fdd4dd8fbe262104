import { InvalidInputError } from '../errors.js';
import { deriveSizes } from '../formats/spec.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { createBuffer, uploadBuffer, writeBuffer } from '../gpu/buffers.js';
import type { GpuContext } from '../gpu/device.js';
import { allocateMatrix, type GpuMatrix } from '../kernels/matmul/matmul.js';
import {
  dataWords,
  type QuantizedMatrix,
  scaleWords,
  sliceRows,
  splitAlign,
  type WeightFormat,
} from '../quant/formats.js';
import {
  isRotatedLinear,
  type Quant,
  type Rotation,
  type RotationChoice,
  rotationFor,
} from '../quant/pack.js';
import type { OpenedModel } from './load.js';
import { loadsAsStored, placedFormat, placedPad, placedSlices } from './quantized.js';

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
  /** Matrices another model owns (a draft head reads its target's embedding): never destroyed here. */
  borrowed?: readonly GpuMatrix[];
  /**
   * The most CPU memory placing held at once for one tensor, bytes: a slice's f32 rows (and their
   * padded or rotated copy) plus its packed words, or a vector and its repeated rows.
   */
  peakTransientBytes: number;
}

/** A weights progress event: the tensor just placed, and the peak transient bytes so far. */
export interface PlaceProgress {
  phase: 'weights';
  done: number;
  total: number;
  tensor: string;
  peakTransientBytes: number;
}

/** Options of {@link placeWeights}. */
export interface PlaceWeightsOptions {
  /** The arithmetic the linears are packed for (its weight format). */
  quant: Quant;
  /** The input rotations the `*_proj` weights are packed for (W·Rᵀ, see `packLinear`), by width. */
  rotate: RotationChoice;
  onProgress?: (e: PlaceProgress) => void;
  /** Elements of f32 packed at once (default `PACK_SLICE_ELEMENTS`; tests force many slices). */
  sliceElements?: number;
  /**
   * An embedding table already on the device (another model's, borrowed: a draft head embeds its
   * target's tokens) instead of `model.embed_tokens.weight`.
   */
  embed?: GpuMatrix;
  /** Rows of `lm_head.weight` (default the vocabulary: a draft head scores a draft vocabulary). */
  lmRows?: number;
  /**
   * Allocate every buffer and read no tensor (only the names and shapes of `weights.tensors`): the
   * model's launch plan without its weights, as bench/occupancy.ts records a real-size model's
   * dispatches. The buffers stay zero.
   */
  allocateOnly?: boolean;
}

/**
 * How one checkpoint matrix [rows, cols] is placed: padded to `pad` (placedPad), in `format`
 * (placedFormat), its input rotated by `rotation`.
 */
export interface MatrixPlacement {
  readonly name: string;
  readonly rows: number;
  readonly cols: number;
  readonly pad: { readonly rows: number; readonly cols: number };
  readonly format: WeightFormat;
  readonly rotation: Rotation;
}

/**
 * Allocates the GPU matrix that `pieces` are placed into, empty ({@link fillPiece} writes them):
 * one piece as it is; several stacked by rows (q | k | v: output rows piece 0 | piece 1 | …, as
 * `concatRows` stacks them); or, `gated`, a gate and an up piece as one gated pair (as
 * `uploadGatedPair` interleaves them). Throws {@link InvalidInputError} where those would: pieces of
 * other formats or widths, a stacked piece (but the last) or a gated pair whose elements are not
 * whole blocks (`splitAlign`), or what `allocateMatrix` refuses.
 */
export function allocatePlaced(
  ctx: GpuContext,
  pieces: readonly MatrixPlacement[],
  label: string,
  gated = false,
  maxBindingBytes?: number,
): GpuMatrix {
  const first = pieces[0];
  if (!first) throw new InvalidInputError(`allocatePlaced ${label}: no matrices`);
  const { format, pad } = first;
  pieces.forEach((p, i) => {
    const size = p.pad.rows * p.pad.cols;
    if (p.format !== format || p.pad.cols !== pad.cols)
      throw new InvalidInputError(
        `allocatePlaced ${label}: ${p.name} is ${p.format} [${p.pad.rows}, ${p.pad.cols}], ${first.name} is ${format} with cols ${pad.cols}`,
      );
    if (!gated && i < pieces.length - 1 && size % splitAlign(format) !== 0)
      throw new InvalidInputError(
        `allocatePlaced ${label}: ${p.name} holds ${size} ${format} elements, not a multiple of ${splitAlign(format)}`,
      );
  });
  if (gated && (pieces.length !== 2 || pieces[1]!.pad.rows !== pad.rows))
    throw new InvalidInputError(`allocatePlaced ${label}: a gated pair is two matrices of one shape`);
  const rows = gated ? pad.rows : pieces.reduce((n, p) => n + p.pad.rows, 0);
  return allocateMatrix(ctx, format, rows, pad.cols, label, gated, maxBindingBytes);
}

/** Where {@link fillPiece} writes a piece: from row `row0` of the matrix, in `half` of a gated pair. */
export interface PieceAt {
  readonly row0: number;
  /** 0: the rows themselves (the gate of a gated pair); 1: the up half of a gated pair. */
  readonly half: 0 | 1;
}

/**
 * Fills one piece of `m` (allocated by {@link allocatePlaced}) from the checkpoint a slice of rows
 * at a time ({@link placedSlices}): each slice is read, packed and written with
 * `queue.writeBuffer` at its words in the parts it spans, then dropped, so the matrix is never
 * held whole on the CPU. `onSlice` gets each slice's transient bytes (its f32 and packed words).
 */
export async function fillPiece(
  ctx: GpuContext,
  m: GpuMatrix,
  weights: TensorReader,
  p: MatrixPlacement,
  at: PieceAt,
  o: { sliceElements?: number; onSlice?: (transientBytes: number) => void } = {},
): Promise<void> {
  const slices = placedSlices(weights, p.name, p.rows, p.cols, p.pad, p.format, p.rotation, o.sliceElements);
  for await (const { row0, q, f32Bytes } of slices) {
    o.onSlice?.(f32Bytes + q.data.byteLength + (q.scales?.byteLength ?? 0));
    writeRows(ctx, m, q, at.row0 + row0, at.half);
  }
}

/**
 * Writes packed rows `q` (rows [row0, row0 + q.rows) of `m`, row0 on a block) into the parts they
 * span: each part's share is a run of q's words (parts and q both start on blocks), written at the
 * words of its first row in the part, after the part's gate rows for the up `half`.
 */
function writeRows(ctx: GpuContext, m: GpuMatrix, q: QuantizedMatrix, row0: number, half: 0 | 1): void {
  const { format, cols: K } = m;
  const end = row0 + q.rows;
  for (const part of m.parts) {
    const lo = Math.max(row0, part.row0);
    const hi = Math.min(end, part.row0 + part.rows);
    if (lo >= hi) continue;
    const share = sliceRows(q, lo - row0, hi - lo);
    const first = (half * part.rows + lo - part.row0) * K; // flat element in the part
    writeBuffer(ctx, part.data, share.data, 4 * dataWords(format, first));
    if (part.scales && share.scales)
      writeBuffer(ctx, part.scales, share.scales, 4 * scaleWords(format, first));
  }
}

/**
 * Places an opened model's weights on the GPU, tensor by tensor, in checkpoint order (embedding,
 * each layer, final norm, LM head). Each matrix's buffers are allocated from its shape and format
 * first, then filled a slice of rows at a time ({@link fillPiece}): read, packed in the format of
 * `o.quant` (or copied when its file stores it packed that way: a weft-q checkpoint, GGUF blocks
 * with a weft layout), written and dropped, so the CPU never holds a matrix whole
 * (`peakTransientBytes` of the result says what it held at most). Loaded at the file's own
 * packing, each matrix keeps its own stored format where it has one ({@link placedFormat}), so
 * matrices may differ in format. `onProgress` reports every tensor placed.
 */
export async function placeWeights(
  ctx: GpuContext,
  opened: Pick<OpenedModel, 'spec' | 'weights' | 'packed'>,
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
  let peakTransientBytes = 0;
  const held = (bytes: number) => {
    peakTransientBytes = Math.max(peakTransientBytes, bytes);
  };
  const step = (tensor: string) =>
    o.onProgress?.({ phase: 'weights', done: ++done, total, tensor, peakTransientBytes });
  // The matmul reads K in blocks of 16, and a rotation needs a Hadamard size. An MLP width that is
  // neither (the demo draft's 344) is padded with zero rows of gate/up and zero columns of down
  // (placedPad): silu(0) * 0 = 0, so exact. The residual and attention widths must already be both.
  // Each matrix is in the format placedFormat chooses; one stored exactly so is copied, anything
  // else is packed here (placedSlices).
  const plan = (name: string, rows: number, cols: number): MatrixPlacement => {
    checkTensor(weights, name, [rows, cols]);
    const rotation = isRotatedLinear(name) ? rotationFor(o.rotate, cols) : 'none';
    const pad = placedPad(spec, name, rows, cols, o.rotate);
    return { name, rows, cols, pad, format: placedFormat(weights, name, o.quant, asStored), rotation };
  };
  const fill = async (m: GpuMatrix, p: MatrixPlacement, at: PieceAt) => {
    try {
      if (!o.allocateOnly) await fillPiece(ctx, m, weights, p, at, { onSlice: held, ...sliceOption(o) });
    } catch (e) {
      m.destroy();
      throw e;
    }
    step(p.name);
  };
  const single = async (p: MatrixPlacement): Promise<GpuMatrix> => {
    const m = allocatePlaced(ctx, [p], p.name);
    await fill(m, p, { row0: 0, half: 0 });
    return m;
  };
  const matrix = (name: string, rows: number, cols: number) => single(plan(name, rows, cols));
  // Stacked or paired where the formats and blocks allow (allocatePlaced checks and throws
  // InvalidInputError otherwise), else placed one by one.
  const stacked = async (p: string, pieces: readonly MatrixPlacement[]) => {
    let m: GpuMatrix;
    try {
      m = allocatePlaced(ctx, pieces, `${p}.self_attn.qkv_proj.weight`);
    } catch (e) {
      if (!(e instanceof InvalidInputError)) throw e;
      return [await single(pieces[0]!), await single(pieces[1]!), await single(pieces[2]!)] as const;
    }
    let row0 = 0;
    for (const piece of pieces) {
      await fill(m, piece, { row0, half: 0 });
      row0 += piece.pad.rows;
    }
    return m;
  };
  // W8A8 multiplies int8 activations and has no gated variant: its gate and up stay two matrices.
  const paired = async (p: string, gate: MatrixPlacement, up: MatrixPlacement) => {
    let m: GpuMatrix;
    try {
      if (o.quant === 'w8a8') throw new InvalidInputError('w8a8: no gated pair');
      m = allocatePlaced(ctx, [gate, up], `${p}.mlp.gate_up_proj.weight`, true);
    } catch (e) {
      if (!(e instanceof InvalidInputError)) throw e;
      return [await single(gate), await single(up)] as const;
    }
    await fill(m, gate, { row0: 0, half: 0 });
    await fill(m, up, { row0: 0, half: 1 });
    return m;
  };
  const row = async (p: string, n: number): Promise<GPUBuffer> => {
    if (o.allocateOnly) return createBuffer(ctx, n * 4, `${p}.self_attn.qkv_proj.bias`);
    const parts = await Promise.all(
      ['q', 'k', 'v'].map((x) => weights.readF32(`${p}.self_attn.${x}_proj.bias`)),
    );
    const out = new Float32Array(n);
    let at = 0;
    for (const b of parts) {
      out.set(b, at);
      at += b.length;
    }
    held(2 * out.byteLength);
    return uploadBuffer(ctx, out, `${p}.self_attn.qkv_proj.bias`);
  };
  const vector = async (name: string, n: number, repeat = 1): Promise<GPUBuffer> => {
    checkTensor(weights, name, [n]);
    if (o.allocateOnly) {
      step(name);
      return createBuffer(ctx, n * repeat * 4, name);
    }
    const v = await weights.readF32(name);
    const rows = repeat > 1 ? repeatRows(v, repeat) : v;
    held(v.byteLength + (rows === v ? 0 : rows.byteLength));
    step(name);
    return uploadBuffer(ctx, rows, name);
  };

  const embed = o.embed ?? (await matrix('model.embed_tokens.weight', V, H));
  const layers: LayerWeights[] = [];
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    const maxT = MAX_FORWARD_TOKENS;
    layers.push({
      inputNorm: await vector(`${p}.input_layernorm.weight`, H),
      postNorm: await vector(`${p}.post_attention_layernorm.weight`, H),
      qkv: await stacked(p, [
        plan(`${p}.self_attn.q_proj.weight`, qWidth, H),
        plan(`${p}.self_attn.k_proj.weight`, kvWidth, H),
        plan(`${p}.self_attn.v_proj.weight`, kvWidth, H),
      ]),
      o: await matrix(`${p}.self_attn.o_proj.weight`, H, qWidth),
      gateUp: await paired(p, plan(`${p}.mlp.gate_proj.weight`, I, H), plan(`${p}.mlp.up_proj.weight`, I, H)),
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
  const lmHead = spec.tiedEmbeddings ? embed : await matrix('lm_head.weight', o.lmRows ?? V, H);
  return { embed, layers, norm, lmHead, peakTransientBytes, ...(o.embed ? { borrowed: [o.embed] } : {}) };
}

/** The slice option of `o`, when set (exactOptionalPropertyTypes: no `undefined` member). */
function sliceOption(o: PlaceWeightsOptions): { sliceElements?: number } {
  return o.sliceElements === undefined ? {} : { sliceElements: o.sliceElements };
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
  for (const m of w.borrowed ?? []) matrices.delete(m);
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
