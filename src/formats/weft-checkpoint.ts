/**
 * weft's own quantised checkpoint: a safetensors file whose weight matrices are stored already
 * packed in a weft matmul format, so loading is a copy, not a re-quantisation.
 *
 * For a matrix `W` packed as a `QuantizedMatrix` (src/quant/formats.ts):
 *   `W`          I32 `[dataWords]` — its `data`, the u32 words as stored (bit patterns; read as u32)
 *   `W.scales`   I32 `[scaleWords]` — its `scales` (integer formats)
 * The byte layouts are the flat ones of `QuantizedMatrix`: element (r, k) is flat index r·cols + k;
 * f32 / f16 bits; int8 (Q8_0: int8 codes, an f16 scale per 32, 8.5 bits per weight); int4 (Q4_K:
 * nibbles, per 256 a 96-bit array of 6-bit sub-scales and sub-mins and two f16 super-scales, 4.5
 * bits); int2 (Q2_K: 2-bit codes, per 256 sixteen 4+4-bit sub-scale bytes and two f16, 2.625
 * bits); the flat array padded with zeros to whole groups / super-blocks.
 * Every other tensor (norms, biases) is stored F32 under its own name.
 * `__metadata__`: `format` = "weft-q", `version` = "3", `schemes` = JSON `{ name: { format, rows,
 * cols, shape, rotation } }` for every packed matrix, `rotation` = "none" | "hadamard" (of the
 * `*_proj` linears), `rotation_seed` (decimal, when rotated), `source_sha256` = hex SHA-256 over the
 * source tensors (see {@link sourceChecksum}).
 *
 * Each matrix is stored exactly as the GPU runner places it ({@link linearPad}): `rows`, `cols`
 * are the packed (zero-padded) sizes, `shape` the checkpoint's own `[rows, cols]`, and `rotation`
 * whether it was packed as W·Rᵀ. Versions 1 and 2 (per-row groups with f32 scales and zero points)
 * are refused: run `weft convert` again.
 */

import {
  alignedRowStep,
  checkShape,
  dataWords,
  isIntFormat,
  type QuantizedMatrix,
  rowRangeWords,
  scaleWords,
  type WeightFormat,
} from '../quant/formats.js';
import {
  crop,
  effectiveWeights,
  isLinear,
  isMlpInput,
  isPerLayerMatrix,
  isRotatedLinear,
  packedWidth,
  packLinear,
  type QuantFormat,
  ROTATION_SEED,
  type Rotation,
} from '../quant/pack.js';
import { ModelFormatError } from './errors.js';
import type { FileBytes } from './io/bytes.js';
import {
  openSafetensors,
  readTensorByteRange,
  readTensorBytes,
  readTensorF32,
  readTensorRowsF32,
  type SafetensorsCheckpoint,
  type SafetensorsDtype,
} from './safetensors.js';

/** How the GPU runner wants one matrix placed: the packed format, padded size and rotation. */
export interface PackedWant {
  readonly format: WeightFormat;
  /** Packed (zero-padded) rows and cols. */
  readonly rows: number;
  readonly cols: number;
  readonly rotation: Rotation;
}

/**
 * Rows [row0, row0 + rows) of a matrix. For a packed one, row0·cols is a multiple of its format's
 * `splitAlign`, and so is (row0 + rows)·cols unless the range runs to the last row.
 */
export interface RowRange {
  readonly row0: number;
  readonly rows: number;
}

/**
 * Any checkpoint weft can read tensors from as f32 in HF layout (safetensors, GGUF, weft-q).
 * `readPacked` exists where matrices are stored already packed (weft-q, and GGUF blocks with a
 * weft layout): it returns the stored matrix (or, given `range`, those rows of it, read alone) when
 * it is packed as `want` asks, else undefined, and the caller packs from `readF32` instead. `storedFormat` names the format a matrix is stored
 * in (readPacked gives it at its own shape and no rotation, or for weft-q as converted), so a
 * model loaded at its own packing can place each matrix as stored even when formats mix.
 * `stats` counts the f32 a reader decoded (GGUF), so tests can check what was never expanded.
 */
export interface TensorReader {
  readonly tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>;
  readF32(name: string): Promise<Float32Array>;
  /**
   * Rows [row0, row0 + rows) of a matrix as f32, where the file allows reading a slice alone
   * (safetensors, GGUF, weft-q): a loader then packs a large matrix a slice at a time, never holding it
   * whole in f32 (see `placedSlices`).
   */
  readRowsF32?(name: string, row0: number, rows: number): Promise<Float32Array>;
  readPacked?(name: string, want: PackedWant, range?: RowRange): Promise<QuantizedMatrix | undefined>;
  storedFormat?(name: string): WeightFormat | undefined;
  readonly stats?: ReadStats;
}

/** What a {@link TensorReader} decoded to f32 so far: bytes in all, and the longest array (elements). */
export interface ReadStats {
  readonly f32Bytes: number;
  readonly largestF32: number;
}

/**
 * A safetensors checkpoint as a {@link TensorReader}; `file` is what a missing tensor's error names.
 * Its `stats` count every f32 array it hands out, whole tensors and row slices alike.
 */
export function safetensorsReader(ck: SafetensorsCheckpoint, file = 'checkpoint'): TensorReader {
  const stats = { f32Bytes: 0, largestF32: 0 };
  const info = (name: string) => {
    const found = ck.tensors.get(name);
    if (found === undefined) throw new ModelFormatError(file, name, undefined, 'missing tensor');
    return found;
  };
  const counted = (values: Float32Array) => {
    stats.f32Bytes += values.byteLength;
    stats.largestF32 = Math.max(stats.largestF32, values.length);
    return values;
  };
  return {
    tensors: ck.tensors,
    readF32: async (name) => counted(await readTensorF32(info(name))),
    readRowsF32: async (name, row0, rows) => counted(await readTensorRowsF32(info(name), row0, rows)),
    stats,
  };
}

/** How one tensor is stored in a weft-q checkpoint. */
interface WeftScheme {
  readonly format: QuantFormat;
  /** Packed (zero-padded) rows and cols. */
  readonly rows: number;
  readonly cols: number;
  /** The checkpoint's own `[rows, cols]` (top-left of the packed matrix). */
  readonly shape: readonly [number, number];
  /** Packed as W·Rᵀ (see `packLinear`). */
  readonly rotation: Rotation;
}

/** Options of {@link convert}. */
export interface ConvertOptions {
  /**
   * Format of the Linear weights (`*_proj.weight`, `lm_head.weight`), and of the per-layer-input
   * table and matrices (`isPerLayerMatrix`), which the runner places at the linears' format.
   */
  readonly quant: QuantFormat;
  /** Format of `model.embed_tokens.weight` (default f16: it is gathered, and tied heads reuse it). */
  readonly embeddings?: QuantFormat;
  /** Rotation of the `*_proj` linears' inputs (default none), as the GPU runner's `rotate`. */
  readonly rotate?: Rotation;
  /**
   * The source model's identity for steering files (`modelChecksum` in src/steer), stored as
   * `source_model_checksum` so a direction measured on the source applies to its conversion.
   */
  readonly sourceModel?: string;
  /**
   * Calibrated rounding: H = Σ x xᵀ of each `*_proj` linear's padded, rotated input on calibration
   * text (`collectHessians`), by tensor name; those linears get GPTQ codes (see `packLinear`).
   */
  readonly hessians?: ReadonlyMap<string, Float64Array>;
  /** What the Hessians were measured on, recorded as the `calibration` metadata. */
  readonly calibration?: { readonly text: string; readonly tokens: number };
}

/**
 * The packed size of a `[rows, cols]` checkpoint matrix as the GPU runner places it: a `*_proj`
 * linear's input width goes to `packedWidth(cols, rotate)`, and gate/up grow zero rows to the
 * same width as down's input (silu(0)·0 = 0), so the MLP is exact. Embedding and LM head are
 * placed as they are.
 */
export function linearPad(
  name: string,
  rows: number,
  cols: number,
  rotate: Rotation,
): { rows: number; cols: number } {
  if (!isRotatedLinear(name)) return { rows, cols };
  return { rows: isMlpInput(name) ? packedWidth(rows, rotate) : rows, cols: packedWidth(cols, rotate) };
}

const hex = (bytes: ArrayBuffer) =>
  [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, '0')).join('');

/**
 * A checksum of a checkpoint's content, independent of file layout and sharding: SHA-256 over the
 * lines `name\tshape\tsha256(f32 values)` of every tensor, sorted by name. Reads one tensor at a
 * time (WebCrypto has no streaming digest, so each tensor is hashed whole).
 */
export async function sourceChecksum(source: TensorReader): Promise<string> {
  const lines: string[] = [];
  for (const name of [...source.tensors.keys()].sort()) {
    const values = await source.readF32(name);
    // A copy on a plain ArrayBuffer, as WebCrypto requires.
    const digest = await crypto.subtle.digest('SHA-256', new Uint8Array(values.slice().buffer));
    lines.push(`${name}\t${source.tensors.get(name)!.shape.join(',')}\t${hex(digest)}`);
  }
  return hex(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(lines.join('\n'))));
}

function schemeFor(name: string, shape: readonly number[], options: ConvertOptions): WeftScheme | undefined {
  if (shape.length !== 2) return undefined;
  const format =
    name === 'model.embed_tokens.weight'
      ? (options.embeddings ?? 'f16')
      : isLinear(name) || isPerLayerMatrix(name) || name === 'lm_head.weight'
        ? options.quant
        : undefined;
  if (format === undefined) return undefined;
  const [rows = 0, cols = 0] = shape;
  const rotation = isRotatedLinear(name) ? (options.rotate ?? 'none') : 'none';
  const pad = linearPad(name, rows, cols, rotation);
  return { format, rows: pad.rows, cols: pad.cols, shape: [rows, cols], rotation };
}

interface Planned {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  readonly bytes: number;
}

/**
 * Converts a checkpoint to weft-q: Linear weights packed as `options.quant` (padded and rotated
 * as the GPU runner places them, see {@link linearPad}; the per-layer-input table and matrices
 * too, never rotated), the embedding as `options.embeddings`,
 * everything else F32. Writes through `write` in order — 8-byte header
 * length, header, then each tensor as it is read and packed — so only one tensor is in memory at
 * a time. Returns the metadata written. Shapes that the format cannot pack (an odd K for f16)
 * throw {@link ModelFormatError} naming the tensor before anything is written.
 */
export async function convert(
  source: TensorReader,
  write: (chunk: Uint8Array) => Promise<void> | void,
  options: ConvertOptions,
): Promise<Record<string, string>> {
  // Plan every entry first: the header needs all sizes before any data.
  const schemes: Record<string, WeftScheme> = {};
  const plan: Planned[] = [];
  for (const [name, { shape }] of source.tensors) {
    let s: WeftScheme | undefined;
    try {
      s = schemeFor(name, shape, options);
      if (s !== undefined) checkShape(s.format, s.rows, s.cols);
    } catch (cause) {
      const format = name === 'model.embed_tokens.weight' ? (options.embeddings ?? 'f16') : options.quant;
      throw new ModelFormatError('checkpoint', name, shape, `cannot pack as ${format}: ${String(cause)}`, {
        cause,
      });
    }
    if (s === undefined) {
      plan.push({ name, dtype: 'F32', shape, bytes: 4 * shape.reduce((a, b) => a * b, 1) });
      continue;
    }
    schemes[name] = s;
    const n = s.rows * s.cols;
    plan.push({ name, dtype: 'I32', shape: [dataWords(s.format, n)], bytes: 4 * dataWords(s.format, n) });
    if (isIntFormat(s.format)) {
      const words = scaleWords(s.format, n);
      plan.push({ name: `${name}.scales`, dtype: 'I32', shape: [words], bytes: 4 * words });
    }
  }
  const rotate = options.rotate ?? 'none';
  const metadata: Record<string, string> = {
    format: 'weft-q',
    version: WEFT_Q_VERSION,
    schemes: JSON.stringify(schemes),
    rotation: rotate,
    ...(rotate === 'hadamard' ? { rotation_seed: String(ROTATION_SEED) } : {}),
    source_sha256: await sourceChecksum(source),
    ...(options.sourceModel === undefined ? {} : { source_model_checksum: options.sourceModel }),
    ...(options.calibration === undefined
      ? {}
      : { calibration: JSON.stringify({ method: 'gptq', ...options.calibration }) }),
  };
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const p of plan) {
    header[p.name] = { dtype: p.dtype, shape: p.shape, data_offsets: [offset, offset + p.bytes] };
    offset += p.bytes;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const padded = new Uint8Array(Math.ceil(json.byteLength / 8) * 8).fill(0x20);
  padded.set(json);
  const len = new Uint8Array(8);
  new DataView(len.buffer).setBigUint64(0, BigInt(padded.byteLength), true);
  await write(len);
  await write(padded);
  // Data in plan order: each matrix, then its scales.
  for (const [name] of source.tensors) {
    const values = await source.readF32(name);
    const s = schemes[name];
    if (s === undefined) {
      await write(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
      continue;
    }
    const q = packLinear(
      values,
      s.shape[0],
      s.shape[1],
      { rows: s.rows, cols: s.cols },
      s.format,
      s.rotation,
      options.hessians?.get(name),
    );
    await write(new Uint8Array(q.data.buffer, q.data.byteOffset, q.data.byteLength));
    if (q.scales) await write(new Uint8Array(q.scales.buffer, q.scales.byteOffset, q.scales.byteLength));
  }
  return metadata;
}

/** An opened weft-q checkpoint. */
export interface WeftCheckpoint extends TensorReader {
  readonly metadata: Readonly<Record<string, string>>;
  readonly schemes: Readonly<Record<string, WeftScheme>>;
  /** A packed matrix exactly as stored (no re-quantisation). */
  readMatrix(name: string): Promise<QuantizedMatrix>;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The weft-q version {@link convert} writes and {@link openWeftCheckpoint} reads. */
const WEFT_Q_VERSION = '3';

const FORMATS: readonly string[] = ['f32', 'f16', 'int8', 'int4', 'int2'];

function isFormat(v: unknown): v is QuantFormat {
  return typeof v === 'string' && FORMATS.includes(v);
}

/**
 * Opens a weft-q checkpoint: validates the safetensors header, the `__metadata__` (format,
 * version, schemes) and that each scheme's packed data and scales are present with the shapes
 * and dtypes the scheme implies. Faults throw {@link ModelFormatError}; a folder of weft-q version
 * 1 or 2 (the old per-row groups) is refused with a message to run `weft convert` again.
 */
export async function openWeftCheckpoint(source: FileBytes): Promise<WeftCheckpoint> {
  const file = source.name;
  const st = await openSafetensors(source);
  const meta = st.metadata;
  checkWeftMetadata(file, meta);
  const schemes = parseSchemes(file, st);
  const tensors = readerTensors(st, schemes);
  const readMatrix = (name: string) => readStoredMatrix(file, st, schemes, name);
  const tensorOf = (name: string) => {
    const t = st.tensors.get(name);
    if (t === undefined || !tensors.has(name))
      throw new ModelFormatError(file, name, undefined, 'missing tensor');
    return t;
  };
  return {
    metadata: meta,
    schemes,
    tensors,
    readMatrix,
    async readF32(name) {
      const s = schemes[name];
      if (s === undefined) return readTensorF32(tensorOf(name));
      // The values the packed matrix multiplies by: dequantized, un-rotated, cropped.
      return effectiveWeights(await readMatrix(name), s.shape[0], s.shape[1], s.rotation);
    },
    async readRowsF32(name, row0, rows) {
      const s = schemes[name];
      if (s === undefined) return readTensorRowsF32(tensorOf(name), row0, rows);
      return readPackedRowsF32(file, st, name, s, row0, rows);
    },
    async readPacked(name, want, range) {
      const s = schemes[name];
      const same =
        s !== undefined &&
        s.format === want.format &&
        s.rows === want.rows &&
        s.cols === want.cols &&
        s.rotation === want.rotation;
      if (!same) return undefined;
      return range === undefined ? readMatrix(name) : readStoredRange(st, name, s, range.row0, range.rows);
    },
    storedFormat: (name) => schemes[name]?.format,
  };
}

/**
 * Checks a weft-q `__metadata__`'s format, version (refusing versions 1 and 2 with a message to
 * convert again) and, when rotated, that the rotation seed is the one weft rotates with.
 */
function checkWeftMetadata(file: string, meta: Readonly<Record<string, string>>): void {
  if (meta.format !== 'weft-q')
    throw new ModelFormatError(file, '__metadata__.format', meta.format, 'not a weft-q checkpoint');
  if (meta.version === '1' || meta.version === '2')
    throw new ModelFormatError(
      file,
      '__metadata__.version',
      meta.version,
      `written by an older weft (weft-q version ${meta.version}, whose weight layouts this weft no longer reads): run \`weft convert\` again`,
    );
  if (meta.version !== WEFT_Q_VERSION)
    throw new ModelFormatError(
      file,
      '__metadata__.version',
      meta.version,
      `unsupported version (this weft reads ${WEFT_Q_VERSION})`,
    );
  // A rotation weft cannot reproduce (another sign seed) would give wrong outputs, not a crash.
  if (meta.rotation === 'hadamard' && meta.rotation_seed !== String(ROTATION_SEED)) {
    throw new ModelFormatError(
      file,
      '__metadata__.rotation_seed',
      meta.rotation_seed,
      `weft rotates with seed ${ROTATION_SEED}`,
    );
  }
}

/**
 * The `__metadata__.schemes` JSON of a weft-q checkpoint, each entry checked by
 * {@link parseScheme}, by tensor name.
 */
function parseSchemes(file: string, st: SafetensorsCheckpoint): Record<string, WeftScheme> {
  const meta = st.metadata;
  let parsed: unknown;
  try {
    parsed = JSON.parse(meta.schemes ?? '');
  } catch (cause) {
    throw new ModelFormatError(file, '__metadata__.schemes', meta.schemes, 'not JSON', { cause });
  }
  if (!isRecord(parsed))
    throw new ModelFormatError(file, '__metadata__.schemes', meta.schemes, 'must be an object');
  const schemes: Record<string, WeftScheme> = {};
  for (const [name, s] of Object.entries(parsed)) schemes[name] = parseScheme(file, st, name, s);
  return schemes;
}

/**
 * One scheme of `__metadata__.schemes`: a weft format, packed rows and cols the format can hold,
 * the checkpoint's own shape within them, a rotation the checkpoint's `rotation` allows, and the
 * packed data (and scales) present as I32 tensors of the sizes these imply.
 */
function parseScheme(file: string, st: SafetensorsCheckpoint, name: string, s: unknown): WeftScheme {
  const meta = st.metadata;
  const field = `__metadata__.schemes.${name}`;
  if (!isRecord(s) || !isFormat(s.format)) throw new ModelFormatError(file, field, s, 'needs a weft format');
  const { format, rows, cols } = s;
  if (typeof rows !== 'number' || typeof cols !== 'number') {
    throw new ModelFormatError(file, field, s, 'needs numeric rows, cols');
  }
  try {
    checkShape(format, rows, cols);
  } catch (cause) {
    throw new ModelFormatError(file, field, s, String(cause), { cause });
  }
  const rawShape: unknown = s.shape;
  const [r, c] = Array.isArray(rawShape) && rawShape.length === 2 ? rawShape : [];
  if (!(Number.isInteger(r) && Number.isInteger(c) && r >= 1 && c >= 1 && r <= rows && c <= cols))
    throw new ModelFormatError(file, `${field}.shape`, rawShape, `must be [r, c] within [${rows}, ${cols}]`);
  const rotation = s.rotation;
  if (rotation !== 'none' && rotation !== 'hadamard')
    throw new ModelFormatError(file, `${field}.rotation`, rotation, 'must be none or hadamard');
  if (rotation !== (meta.rotation ?? 'none') && rotation === 'hadamard')
    throw new ModelFormatError(file, '__metadata__.rotation', meta.rotation, `${name} is rotated`);
  expectTensor(file, st, name, 'I32', [dataWords(format, rows * cols)]);
  if (isIntFormat(format)) expectTensor(file, st, `${name}.scales`, 'I32', [scaleWords(format, rows * cols)]);
  return { format, rows, cols, shape: [r, c], rotation };
}

/** Checks that tensor `name` is present with `dtype` and `shape`. */
function expectTensor(
  file: string,
  st: SafetensorsCheckpoint,
  name: string,
  dtype: SafetensorsDtype,
  shape: readonly number[],
): void {
  const t = st.tensors.get(name);
  if (t === undefined) throw new ModelFormatError(file, name, undefined, 'missing tensor');
  if (t.dtype !== dtype || t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
    throw new ModelFormatError(file, name, [t.dtype, ...t.shape], `expected ${dtype} [${shape.join(', ')}]`);
  }
}

/** The reader's view: every tensor under its model name and HF shape (packed parts hidden). */
function readerTensors(
  st: SafetensorsCheckpoint,
  schemes: Readonly<Record<string, WeftScheme>>,
): Map<string, { readonly shape: readonly number[] }> {
  const tensors = new Map<string, { readonly shape: readonly number[] }>();
  for (const [name, t] of st.tensors) {
    if (name.endsWith('.scales') && schemes[name.slice(0, -'.scales'.length)] !== undefined) continue;
    const s = schemes[name];
    tensors.set(name, { shape: s ? s.shape : t.shape });
  }
  return tensors;
}

/** A stored tensor's bytes as u32 words (a copy on its own buffer). */
async function storedWords(st: SafetensorsCheckpoint, name: string): Promise<Uint32Array> {
  const raw = (await readTensorBytes(st.tensors.get(name)!)).slice();
  return new Uint32Array(raw.buffer, 0, raw.byteLength / 4);
}

/** A packed matrix exactly as stored: its data words and, for integer formats, its scales. */
async function readStoredMatrix(
  file: string,
  st: SafetensorsCheckpoint,
  schemes: Readonly<Record<string, WeftScheme>>,
  name: string,
): Promise<QuantizedMatrix> {
  const s = schemes[name];
  if (s === undefined) throw new ModelFormatError(file, name, undefined, 'not a packed matrix');
  const base = { format: s.format, rows: s.rows, cols: s.cols, data: await storedWords(st, name) };
  return isIntFormat(s.format) ? { ...base, scales: await storedWords(st, `${name}.scales`) } : base;
}

/**
 * Packed rows [row0, row0 + rows) of a stored matrix (row0 and the end on an aligned step, see
 * rowRangeWords): the range's words of the data and the scales, read alone.
 */
async function readStoredRange(
  st: SafetensorsCheckpoint,
  name: string,
  s: WeftScheme,
  row0: number,
  rows: number,
): Promise<QuantizedMatrix> {
  const at = rowRangeWords(s.format, s.rows, s.cols, row0, rows);
  const words = async (tensor: string, [begin, end]: readonly [number, number]) => {
    const raw = (await readTensorByteRange(st.tensors.get(tensor)!, 4 * begin, 4 * end)).slice();
    return new Uint32Array(raw.buffer, 0, end - begin);
  };
  const base = { format: s.format, rows, cols: s.cols, data: await words(name, at.data) };
  return isIntFormat(s.format) ? { ...base, scales: await words(`${name}.scales`, at.scales) } : base;
}

/**
 * Rows [row0, row0 + rows) of a packed matrix's f32 values (as `readF32` gives them), from the
 * stored words of the aligned rows around them alone: rows rotate alone, and blocks never cross
 * an aligned step, so they are its rows.
 */
async function readPackedRowsF32(
  file: string,
  st: SafetensorsCheckpoint,
  name: string,
  s: WeftScheme,
  row0: number,
  rows: number,
): Promise<Float32Array> {
  const [r, c] = s.shape;
  if (!Number.isInteger(row0) || !Number.isInteger(rows) || row0 < 0 || rows < 1 || row0 + rows > r)
    throw new ModelFormatError(file, name, [row0, rows], `rows out of [0, ${r})`);
  const step = alignedRowStep(s.format, s.cols);
  const a0 = Math.floor(row0 / step) * step;
  const a1 = Math.min(s.rows, Math.ceil((row0 + rows) / step) * step);
  const q = await readStoredRange(st, name, s, a0, a1 - a0);
  const d = effectiveWeights(q, a1 - a0, s.cols, s.rotation);
  const own =
    a0 === row0 && a1 === row0 + rows ? d : d.slice((row0 - a0) * s.cols, (row0 - a0 + rows) * s.cols);
  return crop(own, s.cols, rows, c);
}
