import { InvalidInputError } from '../errors.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import { isW8A8Format, quantizeActRef } from '../kernels/w8a8/w8a8.js';
import {
  alignedRowStep,
  dataWords,
  isIntFormat,
  type QuantizedMatrix,
  quantize,
  scaleWords,
  type WeightFormat,
} from '../quant/formats.js';
import { hadamardRef } from '../quant/hadamard.js';
import {
  crop,
  effectiveWeights,
  formatOf,
  isHadamardSize,
  isMlpInput,
  isRotatedLinear,
  isRouter,
  packedWidth,
  packLinear,
  type Quant,
  ROTATION_SEED,
  type Rotation,
  type RotationChoice,
  rotationFor,
  unrotateRows,
  zeroPad,
} from '../quant/pack.js';
import type { ModelSpec } from './spec/spec.js';
import { readAllF32, type Tensor } from './weights.js';

/** How a file stores its linears: format and input rotation (`OpenedModel.packed`). */
export interface Packing {
  readonly format: WeightFormat;
  readonly rotation: Rotation;
}

/**
 * True when a model is placed as stored: the chosen quant's weight format and the rotation are
 * the file's own packing (`OpenedModel.packed`: a weft-q checkpoint's, or a quantized GGUF's).
 */
export function loadsAsStored(packed: Packing | undefined, quant: Quant, rotate: RotationChoice): boolean {
  return packed !== undefined && packed.format === formatOf(quant) && packed.rotation === rotate;
}

/**
 * The format a matrix is placed in, by the GPU runner and the CPU reference alike. Placed as
 * stored ({@link loadsAsStored}), each matrix keeps the format its file stores it in where it has
 * one (`TensorReader.storedFormat`: a GGUF may mix Q4_0 linears with a Q8_0 or F16 head, Q4_K with
 * Q6_K (Q4_K_M) and Q5_0 or Q8_0 fallbacks), except a W8A8 linear whose format the W8A8 kernel
 * does not multiply (a float, or a 5- or 6-bit GGUF block: `isW8A8Format`); every other matrix
 * (a BF16 tensor, or any under another quant) is packed in the chosen quant's format.
 */
export function placedFormat(
  weights: TensorReader,
  name: string,
  quant: Quant,
  asStored: boolean,
): WeightFormat {
  const own = asStored ? weights.storedFormat?.(name) : undefined;
  if (own === undefined || (quant === 'w8a8' && isRotatedLinear(name) && !isW8A8Format(own)))
    return formatOf(quant);
  return own;
}

/**
 * The size a matrix [rows, cols] is placed at (zero rows and columns added): a `*_proj`
 * input goes to `packedWidth(cols, r)` (r its rotation), and gate/up grow zero rows to down's
 * padded input width Ip (their layer's MLP width, their rows, padded for its own rotation;
 * silu(0)·0 = 0, so exact). The embedding and the LM head are placed as they are.
 */
export function placedPad(
  name: string,
  rows: number,
  cols: number,
  rotate: RotationChoice,
): { rows: number; cols: number } {
  if (!isRotatedLinear(name)) return { rows, cols };
  // gate/up's rows are their layer's MLP width I (Gemma 4's wide layers differ from the model's).
  const Ip = packedWidth(rows, rotationFor(rotate, rows));
  return { rows: isMlpInput(name) ? Ip : rows, cols: packedWidth(cols, rotationFor(rotate, cols)) };
}

/**
 * One matrix [rows, cols] as the runner places it, padded to `pad`, in `format`, its input
 * rotated by `rotation`: {@link placedSlices} gathered whole. The CPU reference dequantizes it
 * (the GPU runner writes the slices into its buffers instead, never holding the matrix whole).
 */
export async function placedMatrix(
  weights: TensorReader,
  name: string,
  rows: number,
  cols: number,
  pad: { readonly rows: number; readonly cols: number },
  format: WeightFormat,
  rotation: Rotation,
): Promise<QuantizedMatrix> {
  return gatherSlices(
    placedSlices(weights, name, rows, cols, pad, format, rotation),
    pad.rows,
    pad.cols,
    format,
  );
}

/** Elements of f32 a sliced pack reads and rounds at once (16 MiB of f32). */
export const PACK_SLICE_ELEMENTS = 1 << 22;

/**
 * Rows [row0, row0 + q.rows) of a placed matrix, packed alone (row0 on an aligned step, see
 * {@link sliceRanges}, so its words are those rows' words of the whole). `f32Bytes`: the f32
 * arrays held to pack it (the rows read, and their padded or rotated copy), 0 for a stored copy;
 * with the packed words, the transient memory of placing it.
 */
export interface PlacedSlice {
  readonly row0: number;
  readonly q: QuantizedMatrix;
  readonly f32Bytes: number;
}

/**
 * The row ranges [row0, count] a [rows, cols] matrix in `format` is packed in: each a multiple of
 * the aligned step of rows (`alignedRowStep`) but the last, each of at most `sliceElements` (or one
 * step, if more).
 */
function sliceRanges(
  format: WeightFormat,
  rows: number,
  cols: number,
  sliceElements = PACK_SLICE_ELEMENTS,
): [number, number][] {
  const step = alignedRowStep(format, cols);
  const perSlice = Math.max(step, Math.floor(sliceElements / cols / step) * step);
  const ranges: [number, number][] = [];
  for (let row0 = 0; row0 < rows; row0 += perSlice) ranges.push([row0, Math.min(perSlice, rows - row0)]);
  return ranges;
}

/**
 * One matrix [rows, cols] as the runner places it ({@link placedMatrix}), a slice of rows at a
 * time ({@link sliceRanges} of the padded matrix): copied when the file stores it packed exactly
 * so (`readPacked` of each range), else packed from its f32 values (`readRowsF32` of each range
 * where the reader has it, else one whole `readF32`; for a packed file its dequantized values, so
 * another format rounds them again), zero-padded and rotated as `packLinear` does. Exact: rows
 * rotate alone, and every format rounds blocks of at most `splitAlign(format)` elements on their
 * own, each slice starting on one, so the slices' words are the whole matrix's.
 */
export async function* placedSlices(
  weights: TensorReader,
  name: string,
  rows: number,
  cols: number,
  pad: { readonly rows: number; readonly cols: number },
  format: WeightFormat,
  rotation: Rotation,
  sliceElements = PACK_SLICE_ELEMENTS,
): AsyncGenerator<PlacedSlice> {
  const ranges = sliceRanges(format, pad.rows, pad.cols, sliceElements);
  const want = { format, rows: pad.rows, cols: pad.cols, rotation };
  const readPacked = weights.readPacked?.bind(weights);
  const first = await readPacked?.(name, want, { row0: 0, rows: ranges[0]![1] });
  if (readPacked && first) {
    yield { row0: 0, q: first, f32Bytes: 0 };
    for (const [row0, count] of ranges.slice(1)) {
      const q = await readPacked(name, want, { row0, rows: count });
      if (!q) throw new InvalidInputError(`placedSlices: ${name} rows [${row0}, ${row0 + count}) not stored`);
      yield { row0, q, f32Bytes: 0 };
    }
    return;
  }
  const readRows = weights.readRowsF32?.bind(weights);
  const whole = readRows ? undefined : await weights.readF32(name);
  const read = (row0: number, count: number) =>
    whole ? whole.subarray(row0 * cols, (row0 + count) * cols) : readRows!(name, row0, count);
  yield* packSlices(read, rows, cols, pad, format, rotation, ranges, whole?.byteLength ?? 0);
}

/**
 * The slices of `packLinear(w, rows, cols, pad, format, rotation)` (no Hessian) over `ranges` of
 * the padded rows, with w read a range at a time (`read`: the source rows of the range that exist,
 * the others are padding). `wholeBytes`: f32 the caller holds throughout (a whole matrix read
 * once), counted in every slice's `f32Bytes`.
 */
async function* packSlices(
  read: (row0: number, count: number) => Float32Array | Promise<Float32Array>,
  rows: number,
  cols: number,
  pad: { readonly rows: number; readonly cols: number },
  format: WeightFormat,
  rotation: Rotation,
  ranges: readonly (readonly [number, number])[],
  wholeBytes = 0,
): AsyncGenerator<PlacedSlice> {
  if (rotation === 'hadamard' && !isHadamardSize(pad.cols))
    throw new InvalidInputError(`packLinear: padded width ${pad.cols} is not a Hadamard size`);
  for (const [row0, count] of ranges) {
    const have = Math.max(0, Math.min(count, rows - row0)); // source rows; the rest are zero
    const w = have > 0 ? await read(row0, have) : new Float32Array(0);
    let m = zeroPad(w, have, cols, count, pad.cols);
    if (rotation === 'hadamard') m = hadamardRef(m, count, pad.cols, ROTATION_SEED);
    const held = (wholeBytes > 0 ? wholeBytes : w.byteLength) + (m === w ? 0 : m.byteLength);
    yield { row0, q: quantize(m, count, pad.cols, format), f32Bytes: held };
  }
}

/** The slices of a [rows, cols] matrix in `format` gathered into the whole packed matrix. */
async function gatherSlices(
  slices: AsyncIterable<PlacedSlice>,
  rows: number,
  cols: number,
  format: WeightFormat,
): Promise<QuantizedMatrix> {
  const n = rows * cols;
  const data = new Uint32Array(dataWords(format, n));
  const scales = isIntFormat(format) ? new Uint32Array(scaleWords(format, n)) : undefined;
  for await (const { row0, q } of slices) {
    data.set(q.data, dataWords(format, row0 * cols));
    if (scales && q.scales) scales.set(q.scales, scaleWords(format, row0 * cols));
  }
  return scales ? { format, rows, cols, data, scales } : { format, rows, cols, data };
}

/**
 * {@link quantize} of a [rows, cols] matrix read a slice of rows at a time (`readRows`, over
 * {@link sliceRanges}), so only the packed result and one slice are ever held; exact, as
 * {@link placedSlices} is.
 */
export async function packInSlices(
  readRows: (row0: number, count: number) => Promise<Float32Array>,
  rows: number,
  cols: number,
  format: WeightFormat,
  sliceElements = PACK_SLICE_ELEMENTS,
): Promise<QuantizedMatrix> {
  const ranges = sliceRanges(format, rows, cols, sliceElements);
  const slices = packSlices(readRows, rows, cols, { rows, cols }, format, 'none', ranges);
  return gatherSlices(slices, rows, cols, format);
}

/**
 * The reference's W8A8 activation path (a `LinearInputHook` of model/reference): each row of a
 * linear's input x [T, width] is zero-padded to {@link packedWidth}, rotated when `choice` rotates
 * that width ({@link rotationFor}), rounded to int8 per token exactly as the GPU's `quantize_act`
 * does (`quantizeActRef`), dequantized, un-rotated and cropped. Multiplied by
 * {@link effectiveWeights} this is the GPU's (W·Rᵀ)_q · Q(R·x) up to f32 rounding; when padding and
 * rotation meet (a width that is not a Hadamard size), the product through the padded columns of
 * (W·Rᵀ)_q·R is left out: a rounding-sized term, since those columns are zero before quantization.
 * The rounding is the same for every linear, so the hook ignores which one it feeds (callers may
 * omit `linears`).
 */
export function w8a8Inputs(choice: RotationChoice): (x: Float32Array, width: number) => Float32Array {
  return (x, width) => {
    const rotate = rotationFor(choice, width);
    const T = x.length / width;
    const n = packedWidth(width, rotate);
    let m = zeroPad(x, T, width, T, n);
    if (rotate === 'hadamard') m = hadamardRef(m, T, n, ROTATION_SEED);
    const { q, scale } = quantizeActRef(m, T, n);
    let d: Float32Array = new Float32Array(T * n);
    for (let i = 0; i < d.length; i++) d[i] = q[i]! * scale[Math.floor(i / n)]!;
    if (rotate === 'hadamard') d = unrotateRows(d, T, n);
    return crop(d, n, T, width);
  };
}

/**
 * The tensors with every matrix rounded through `format` exactly as the GPU runner packs it
 * (vectors and a mixture's routers stay f32): the CPU reference of a quantized model. Each `*_proj` linear's input is
 * rotated as `rotate` chooses for its width ({@link rotationFor}). With `hessians` (from
 * `collectHessians`, in the same rotation), the linears they name are rounded by GPTQ, as
 * `weft convert --calibrate` packs them.
 */
export function roundedThrough(
  tensors: Record<string, Tensor>,
  format: WeightFormat,
  rotate: RotationChoice = 'none',
  hessians?: ReadonlyMap<string, Float64Array>,
): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  for (const [name, t] of Object.entries(tensors)) {
    const [rows, cols] = t.shape;
    if (t.shape.length !== 2 || !rows || !cols || isRouter(name)) {
      out[name] = t;
      continue;
    }
    const r = isRotatedLinear(name) ? rotationFor(rotate, cols) : 'none';
    const pad = { rows, cols: packedWidth(cols, r) };
    out[name] = {
      shape: t.shape,
      data: effectiveWeights(
        packLinear(t.data, rows, cols, pad, format, r, hessians?.get(name)),
        rows,
        cols,
        r,
      ),
    };
  }
  return out;
}

/**
 * The f32 tensors the CPU reference runs on for a model loaded at `quant` and `rotate`: each
 * matrix exactly as the GPU runner places it ({@link placedPad}, {@link placedFormat},
 * {@link placedMatrix}), dequantized, un-rotated and cropped ({@link effectiveWeights}); a matrix
 * copied as stored is thus its file's blocks dequantized (for GGUF, llama.cpp's values, up to the
 * sign of a q4_0 zero: see `repackRows`). Vectors are read as they are, and at f32 every tensor
 * is (rotation is exact math, so the source weights are what a rotated runner multiplies by).
 */
export async function referenceTensors(
  model: { readonly spec: ModelSpec; readonly weights: TensorReader; readonly packed?: Packing | undefined },
  quant: Quant,
  rotate: RotationChoice,
): Promise<Record<string, Tensor>> {
  const { weights } = model;
  if (quant === 'f32') return readAllF32(weights);
  const asStored = loadsAsStored(model.packed, quant, rotate);
  const out: Record<string, Tensor> = {};
  for (const [name, { shape }] of weights.tensors) {
    const [rows, cols] = shape;
    if (shape.length !== 2 || !rows || !cols || isRouter(name)) {
      out[name] = { shape, data: await weights.readF32(name) };
      continue;
    }
    const r = isRotatedLinear(name) ? rotationFor(rotate, cols) : 'none';
    const pad = placedPad(name, rows, cols, rotate);
    const format = placedFormat(weights, name, quant, asStored);
    const m = await placedMatrix(weights, name, rows, cols, pad, format, r);
    out[name] = { shape, data: effectiveWeights(m, rows, cols, r) };
  }
  return out;
}
