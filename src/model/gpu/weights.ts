import { InvalidInputError } from '../../errors.js';
import type { TensorReader } from '../../formats/weft-checkpoint.js';
import { createBuffer, uploadBuffer, writeBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { allocateMatrix, type GpuMatrix } from '../../kernels/matmul/matrix.js';
import {
  concatRows,
  dataWords,
  packedBytes,
  type QuantizedMatrix,
  scaleWords,
  sliceRows,
  splitAlign,
  type WeightFormat,
} from '../../quant/formats.js';
import {
  isRotatedLinear,
  type Quant,
  type Rotation,
  type RotationChoice,
  rotationFor,
} from '../../quant/pack.js';
import { outputGateView } from '../blocks/attention/gate-view.js';
import type { ExpertStackSpec, GpuBlock, PlacedExperts, Placer } from '../blocks/gpu.js';
import { placeBlock } from '../blocks/index.js';
import { normWeight } from '../blocks/ops.js';
import { finalNormName, modelBlocks } from '../families/index.js';
import type { OpenedModel } from '../load.js';
import { loadsAsStored, placedFormat, placedPad, placedSlices } from '../quantized.js';
import type { ModelSpec } from '../spec/spec.js';

/** A model's weights, resident on the GPU. */
export interface GpuWeights {
  embed: GpuMatrix; // [V, H]
  /** Each block's weights, in forward order (`modelBlocks`). */
  blocks: GpuBlock[];
  norm: GPUBuffer; // [H]
  lmHead: GpuMatrix; // [V, H], `embed` itself when the embeddings are tied
  /** Matrices another model owns (a draft head reads its target's embedding): never destroyed here. */
  borrowed?: readonly GpuMatrix[];
  /**
   * The most CPU memory placing held at once for one tensor, bytes: a slice's f32 rows (and their
   * padded or rotated copy) plus its packed words, or a vector and its repeated rows.
   */
  peakTransientBytes: number;
  /**
   * The most bytes of weights written to the queue and not yet known done, at once: placing waits
   * for the device each `uploadBytesInFlight` (see {@link PlaceWeightsOptions}), so the staging
   * copies an implementation keeps for pending writes never hold the whole model.
   */
  peakUploadBytes: number;
}

/**
 * Bytes of weights placing writes to the queue before it waits for the device to take them
 * (default of {@link PlaceWeightsOptions.uploadBytesInFlight}): `queue.writeBuffer` copies into
 * staging memory that is freed only once the copy has run, and without a submission in between
 * Dawn in Node keeps every write staged (Qwen-sized models: a second copy of the weights in host
 * memory). One wait per 64 MiB is a few per second of loading.
 */
const UPLOAD_BYTES_IN_FLIGHT = 64 << 20;

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
  /** Bytes written to the queue between waits for the device (default {@link UPLOAD_BYTES_IN_FLIGHT}). */
  uploadBytesInFlight?: number;
  /**
   * An embedding table already on the device (another model's, borrowed: a draft head embeds its
   * target's tokens) instead of `model.embed_tokens.weight`.
   */
  embed?: GpuMatrix;
  /** Rows of `lm_head.weight` (default the vocabulary: a draft head scores a draft vocabulary). */
  lmRows?: number;
  /**
   * Bytes of GPU memory a mixture's experts may take (shared evenly by its mixture layers): where
   * they do not all fit, each layer keeps a cache of as many expert slots as fit and every expert
   * packed in CPU memory, loaded into a slot when a pass chooses it. Default: every expert placed.
   */
  expertBudget?: number;
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
  const problem = stackProblem(pieces, gated);
  if (problem) throw new InvalidInputError(`allocatePlaced ${label}: ${problem}`);
  const { format, pad } = pieces[0]!;
  const rows = gated ? pad.rows : pieces.reduce((n, p) => n + p.pad.rows, 0);
  return allocateMatrix(ctx, format, rows, pad.cols, label, gated, maxBindingBytes);
}

/**
 * Why `pieces` cannot be one matrix (stacked by rows, or `gated` as a gate/up pair), or undefined:
 * pieces of other formats or widths, a stacked piece (but the last) or a gated pair whose elements
 * are not whole blocks (`splitAlign`).
 */
function stackProblem(pieces: readonly MatrixPlacement[], gated: boolean): string | undefined {
  const first = pieces[0];
  if (!first) return 'no matrices';
  const { format, pad } = first;
  for (const [i, p] of pieces.entries()) {
    const size = p.pad.rows * p.pad.cols;
    if (p.format !== format || p.pad.cols !== pad.cols)
      return `${p.name} is ${p.format} [${p.pad.rows}, ${p.pad.cols}], ${first.name} is ${format} with cols ${pad.cols}`;
    if ((gated || i < pieces.length - 1) && size % splitAlign(format) !== 0)
      return `${p.name} holds ${size} ${format} elements, not a multiple of ${splitAlign(format)}`;
  }
  if (gated && (pieces.length !== 2 || pieces[1]!.pad.rows !== pad.rows))
    return 'a gated pair is two matrices of one shape';
  return undefined;
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
  o: {
    sliceElements?: number;
    onSlice?: (transientBytes: number) => void;
    /** Awaited after each slice's writes, with their bytes (the placer's flow control). */
    written?: (bytes: number) => Promise<void>;
  } = {},
): Promise<void> {
  const slices = placedSlices(weights, p.name, p.rows, p.cols, p.pad, p.format, p.rotation, o.sliceElements);
  for await (const { row0, q, f32Bytes } of slices) {
    const packed = q.data.byteLength + (q.scales?.byteLength ?? 0);
    o.onSlice?.(f32Bytes + packed);
    writeRows(ctx, m, q, at.row0 + row0, at.half);
    await o.written?.(packed);
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
 * Places an opened model's weights on the GPU, tensor by tensor: the embedding, each block's
 * tensors (`placeBlock`, in forward order), the final norm and the LM head. Each matrix's buffers
 * are allocated from its shape and format first, then filled a slice of rows at a time
 * ({@link fillPiece}): read, packed in the format of `o.quant` (or copied when its file stores it
 * packed that way: a weft-q checkpoint, GGUF blocks with a weft layout), written and dropped, so
 * the CPU never holds a matrix whole (`peakTransientBytes` of the result says what it held at
 * most). Loaded at the file's own packing, each matrix keeps its own stored format where it has one
 * ({@link placedFormat}), so matrices may differ in format. `onProgress` reports every tensor placed.
 */
export async function placeWeights(
  ctx: GpuContext,
  opened: Pick<OpenedModel, 'spec' | 'weights' | 'packed'>,
  o: PlaceWeightsOptions,
): Promise<GpuWeights> {
  const { spec } = opened;
  const H = spec.hidden;
  const V = spec.vocabSize;
  const placer = new CheckpointPlacer(ctx, opened, o);
  const embed = o.embed ?? (await placer.matrix('model.embed_tokens.weight', V, H));
  const blocks: GpuBlock[] = [];
  for (const block of modelBlocks(spec)) blocks.push(await placeBlock(placer, block));
  const norm = await placer.norm(finalNormName(spec), H);
  const lmHead = spec.tiedEmbeddings ? embed : await placer.matrix('lm_head.weight', o.lmRows ?? V, H);
  return {
    embed,
    blocks,
    norm,
    lmHead,
    peakTransientBytes: placer.peakTransientBytes,
    peakUploadBytes: placer.peakUploadBytes,
    ...(o.embed ? { borrowed: [o.embed] } : {}),
  };
}

/**
 * The {@link Placer} of {@link placeWeights}: plans each checkpoint matrix (its format, padding and
 * rotation), allocates it and fills it from the checkpoint, and counts tensors and transient bytes.
 */
class CheckpointPlacer implements Placer {
  readonly spec: ModelSpec;
  readonly quant: Quant;
  peakTransientBytes = 0;
  peakUploadBytes = 0;
  /** Bytes written since the last wait for the device. */
  private pendingUploadBytes = 0;
  private done = 0;
  private readonly weights: TensorReader;
  private readonly asStored: boolean;

  constructor(
    private readonly ctx: GpuContext,
    opened: Pick<OpenedModel, 'spec' | 'weights' | 'packed'>,
    private readonly o: PlaceWeightsOptions,
  ) {
    this.spec = opened.spec;
    this.quant = o.quant;
    // An output-gated q_proj is placed as its query and gate rows (see outputGateView).
    this.weights = outputGateView(opened.weights, opened.spec, modelBlocks(opened.spec));
    this.asStored = loadsAsStored(opened.packed, o.quant, o.rotate);
  }

  private held(bytes: number): void {
    this.peakTransientBytes = Math.max(this.peakTransientBytes, bytes);
  }

  /** Counts a slice's writes; at the limit, submits them and waits until the device has run them. */
  private async written(bytes: number): Promise<void> {
    this.pendingUploadBytes += bytes;
    this.peakUploadBytes = Math.max(this.peakUploadBytes, this.pendingUploadBytes);
    if (this.pendingUploadBytes < (this.o.uploadBytesInFlight ?? UPLOAD_BYTES_IN_FLIGHT)) return;
    this.ctx.counter.submit([]);
    await this.ctx.device.queue.onSubmittedWorkDone();
    this.pendingUploadBytes = 0;
  }

  private step(tensor: string): void {
    const total = this.weights.tensors.size;
    const peak = this.peakTransientBytes;
    this.o.onProgress?.({ phase: 'weights', done: ++this.done, total, tensor, peakTransientBytes: peak });
  }

  // The matmul reads K in blocks of 16, and a rotation needs a Hadamard size. An MLP width that is
  // neither (the demo draft's 344) is padded with zero rows of gate/up and zero columns of down
  // (placedPad): silu(0) * 0 = 0, so exact. The residual and attention widths must already be both.
  // Each matrix is in the format placedFormat chooses; one stored exactly so is copied, anything
  // else is packed here (placedSlices).
  private plan(name: string, rows: number, cols: number): MatrixPlacement {
    const { weights, o } = this;
    checkTensor(weights, name, [rows, cols]);
    const rotation = isRotatedLinear(name) ? rotationFor(o.rotate, cols) : 'none';
    const pad = placedPad(name, rows, cols, o.rotate);
    return { name, rows, cols, pad, format: placedFormat(weights, name, o.quant, this.asStored), rotation };
  }

  private async fill(m: GpuMatrix, p: MatrixPlacement, at: PieceAt): Promise<void> {
    try {
      if (!this.o.allocateOnly)
        await fillPiece(this.ctx, m, this.weights, p, at, {
          onSlice: (bytes) => this.held(bytes),
          written: (bytes) => this.written(bytes),
          ...sliceOption(this.o),
        });
    } catch (e) {
      m.destroy();
      throw e;
    }
    this.step(p.name);
  }

  private async single(p: MatrixPlacement): Promise<GpuMatrix> {
    const m = allocatePlaced(this.ctx, [p], p.name);
    await this.fill(m, p, { row0: 0, half: 0 });
    return m;
  }

  matrix(name: string, rows: number, cols: number): Promise<GpuMatrix> {
    return this.single(this.plan(name, rows, cols));
  }

  async stacked(
    label: string,
    pieces: readonly [string, number, number][],
  ): Promise<GpuMatrix | GpuMatrix[]> {
    const planned = pieces.map(([name, rows, cols]) => this.plan(name, rows, cols));
    if (stackProblem(planned, false)) {
      const each: GpuMatrix[] = [];
      for (const p of planned) each.push(await this.single(p));
      return each;
    }
    const m = allocatePlaced(this.ctx, planned, label);
    let row0 = 0;
    for (const piece of planned) {
      await this.fill(m, piece, { row0, half: 0 });
      row0 += piece.pad.rows;
    }
    return m;
  }

  async paired(
    label: string,
    gate: readonly [string, number, number],
    up: readonly [string, number, number],
  ): Promise<GpuMatrix | [GpuMatrix, GpuMatrix]> {
    const [g, u] = [this.plan(...gate), this.plan(...up)];
    // W8A8 multiplies int8 activations and has no gated variant: its gate and up stay two matrices.
    if (this.quant === 'w8a8' || stackProblem([g, u], true))
      return [await this.single(g), await this.single(u)];
    const m = allocatePlaced(this.ctx, [g, u], label, true);
    await this.fill(m, g, { row0: 0, half: 0 });
    await this.fill(m, u, { row0: 0, half: 1 });
    return m;
  }

  formatOf(name: string, rows: number, cols: number): WeightFormat {
    return this.plan(name, rows, cols).format;
  }

  async experts(stacks: readonly ExpertStackSpec[]): Promise<PlacedExperts> {
    const planned = stacks.map((st) =>
      st.names.map((pieces) => pieces.map((n) => this.plan(n, st.rows, st.cols))),
    );
    const formats = planned.map((stack, i) => {
      const format = stack[0]![0]!.format;
      const other = stack.flat().find((p) => p.format !== format);
      if (other)
        throw new InvalidInputError(
          `model weights: ${stacks[i]!.label}: ${other.name} is ${other.format}, ${stack[0]![0]!.name} is ${format}: an expert stack takes one format`,
        );
      return format;
    });
    const E = planned[0]!.length;
    const expertBytes = stacks.reduce(
      (n, st, i) => n + st.names[0]!.length * packedBytes(formats[i]!, st.rows, st.cols),
      0,
    );
    const slots = this.expertSlots(stacks[0]!.label, E, expertBytes);
    // Loaded with the first mixture placed (see blocks/moe/index.ts).
    const { allocateExperts, writeExpertRows } = await import('../../kernels/moe/experts.js');
    const gpu = stacks.map((st, i) =>
      allocateExperts(
        this.ctx,
        formats[i]!,
        slots ?? E,
        st.rows,
        st.cols,
        st.label,
        st.names[0]!.length === 2,
      ),
    );
    const packed = planned.map((stack): QuantizedMatrix[][] => stack.map(() => []));
    try {
      for (const [i, stack] of planned.entries())
        for (const [e, pieces] of stack.entries())
          for (const [half, p] of pieces.entries()) {
            // Resident: written into its slot slice by slice. Paged: kept packed in CPU memory.
            const slices: QuantizedMatrix[] = [];
            await this.fillExpert(p, formats[i]!, (q, row0) => {
              if (slots === undefined) writeExpertRows(this.ctx, gpu[i]!, e, half as 0 | 1, q, row0);
              else slices.push(q);
            });
            if (slices.length > 0) packed[i]![e]![half] = concatRows(slices);
          }
    } catch (err) {
      for (const m of gpu) m.destroy();
      throw err;
    }
    if (slots === undefined) return { stacks: gpu };
    const ctx = this.ctx;
    return {
      stacks: gpu,
      store: {
        experts: E,
        slots,
        expertBytes,
        load(expert, slot) {
          for (const [i, m] of gpu.entries())
            for (const [half, q] of packed[i]![expert]!.entries())
              writeExpertRows(ctx, m, slot, half as 0 | 1, q, 0);
        },
      },
    };
  }

  /**
   * The GPU cache's slots per stack of a mixture layer under the expert budget (`expertBudget`
   * shared evenly by the mixture layers), or undefined when every expert fits (or there is no
   * budget). Throws InvalidInputError when fewer than topK fit.
   */
  private expertSlots(label: string, experts: number, expertBytes: number): number | undefined {
    const budget = this.o.expertBudget;
    const m = this.spec.moe;
    if (budget === undefined || !m) return undefined;
    const layers = m.layers.filter(Boolean).length;
    const slots = Math.floor(budget / layers / expertBytes);
    if (slots >= experts) return undefined;
    if (slots < m.topK)
      throw new InvalidInputError(
        `expertBudget: ${budget} bytes hold ${slots} experts per mixture layer (${layers} layers, ${expertBytes} bytes an expert of ${label}); a token runs ${m.topK}: give at least ${layers * m.topK * expertBytes} bytes`,
      );
    return slots;
  }

  /** Reads, packs and hands over one expert matrix a slice of rows at a time, counting its bytes. */
  private async fillExpert(
    p: MatrixPlacement,
    format: WeightFormat,
    take: (q: QuantizedMatrix, row0: number) => void,
  ): Promise<void> {
    if (!this.o.allocateOnly) {
      const slices = placedSlices(
        this.weights,
        p.name,
        p.rows,
        p.cols,
        p.pad,
        format,
        p.rotation,
        this.o.sliceElements,
      );
      for await (const { row0, q, f32Bytes } of slices) {
        const packed = q.data.byteLength + (q.scales?.byteLength ?? 0);
        this.held(f32Bytes + packed);
        take(q, row0);
        await this.written(packed);
      }
    }
    this.step(p.name);
  }

  async row(label: string, names: readonly string[], n: number): Promise<GPUBuffer> {
    if (this.o.allocateOnly) return createBuffer(this.ctx, n * 4, label);
    const parts = await Promise.all(names.map((name) => this.weights.readF32(name)));
    const out = new Float32Array(n);
    let at = 0;
    for (const b of parts) {
      out.set(b, at);
      at += b.length;
    }
    this.held(2 * out.byteLength);
    return uploadBuffer(this.ctx, out, label);
  }

  async norm(name: string, n: number): Promise<GPUBuffer> {
    checkTensor(this.weights, name, [n]);
    if (this.o.allocateOnly) {
      this.step(name);
      return createBuffer(this.ctx, n * 4, name);
    }
    const v = normWeight(this.spec, await this.weights.readF32(name));
    this.held(v.byteLength);
    this.step(name);
    return uploadBuffer(this.ctx, v, name);
  }

  async tensor(name: string, shape: readonly number[]): Promise<GPUBuffer> {
    checkTensor(this.weights, name, shape);
    const n = shape.reduce((a, b) => a * b, 1);
    if (this.o.allocateOnly) {
      this.step(name);
      return createBuffer(this.ctx, n * 4, name);
    }
    const v = await this.weights.readF32(name);
    this.held(v.byteLength);
    this.step(name);
    return uploadBuffer(this.ctx, v, name);
  }

  async vector(name: string, n: number, repeat = 1): Promise<GPUBuffer> {
    checkTensor(this.weights, name, [n]);
    if (this.o.allocateOnly) {
      this.step(name);
      return createBuffer(this.ctx, n * repeat * 4, name);
    }
    const v = await this.weights.readF32(name);
    const rows = repeat > 1 ? repeatRows(v, repeat) : v;
    this.held(v.byteLength + (rows === v ? 0 : rows.byteLength));
    this.step(name);
    return uploadBuffer(this.ctx, rows, name);
  }
}

/** The slice option of `o`, when set (exactOptionalPropertyTypes: no `undefined` member). */
function sliceOption(o: PlaceWeightsOptions): { sliceElements?: number } {
  return o.sliceElements === undefined ? {} : { sliceElements: o.sliceElements };
}

/** Destroys every buffer of `w` (a tied LM head once). */
export function destroyWeights(w: GpuWeights): void {
  const matrices = new Set([w.embed, w.lmHead]);
  w.norm.destroy();
  for (const b of w.blocks) {
    for (const m of [...b.matrices, ...(b.tables ?? [])]) matrices.add(m);
    for (const v of b.vectors) v.destroy();
    for (const x of b.experts ?? []) x.destroy();
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
