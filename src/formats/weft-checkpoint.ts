/**
 * weft's own quantised checkpoint: a safetensors file whose weight matrices are stored already
 * packed in a weft matmul format, so loading is a copy, not a re-quantisation.
 *
 * For a matrix `W` quantised as `QuantizedMatrix`:
 *   `W`          I32 `[rows, wordsPerRow]` — the packed u32 words (bit patterns; read as u32)
 *   `W.scales`   F32 `[rows, cols / group]` (int formats)
 *   `W.zeros`    F32 `[rows, cols / group]` (int4, int2)
 * Every other tensor (norms, biases) is stored F32 under its own name.
 * `__metadata__`: `format` = "weft-q", `version` = "1", `schemes` = JSON `{ name: { format, group,
 * rows, cols } }` for every packed matrix, `rotation` = "none" (rotated checkpoints are not
 * produced yet), `source_sha256` = hex SHA-256 over the source tensors (see {@link sourceChecksum}).
 */
import {
  checkShape,
  dequantize,
  type QuantizedMatrix,
  quantize,
  type WeightFormat,
  wordsPerRow,
} from '../kernels/matmul/quant.js';
import { ModelFormatError } from './errors.js';
import {
  openSafetensors,
  readTensorBytes,
  readTensorF32,
  type SafetensorsCheckpoint,
  type SafetensorsDtype,
} from './safetensors.js';
import type { ByteSource } from './source.js';

/** Any checkpoint weft can read tensors from as f32 in HF layout (safetensors, GGUF, weft-q). */
export interface TensorReader {
  readonly tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>;
  readF32(name: string): Promise<Float32Array>;
}

/** A safetensors checkpoint as a {@link TensorReader}. */
export function safetensorsReader(ck: SafetensorsCheckpoint): TensorReader {
  return {
    tensors: ck.tensors,
    readF32: async (name) => {
      const info = ck.tensors.get(name);
      if (info === undefined) throw new ModelFormatError('checkpoint', name, undefined, 'missing tensor');
      return readTensorF32(info);
    },
  };
}

/** How one tensor is stored in a weft-q checkpoint. */
export interface WeftScheme {
  readonly format: WeightFormat;
  readonly group: number;
  readonly rows: number;
  readonly cols: number;
}

/** Options of {@link convert}. */
export interface ConvertOptions {
  /** Format of the Linear weights (`*_proj.weight`, `lm_head.weight`). */
  readonly quant: WeightFormat;
  /** Group along K for int formats (default: per channel for int8, 32 for int4/int2). */
  readonly group?: number;
  /** Format of `model.embed_tokens.weight` (default f16: it is gathered, and tied heads reuse it). */
  readonly embeddings?: WeightFormat;
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
      : name.endsWith('_proj.weight') || name === 'lm_head.weight'
        ? options.quant
        : undefined;
  if (format === undefined) return undefined;
  const [rows = 0, cols = 0] = shape;
  const group =
    format === 'f32' || format === 'f16' ? cols : (options.group ?? (format === 'int8' ? cols : 32));
  return { format, group, rows, cols };
}

interface Planned {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  readonly shape: readonly number[];
  readonly bytes: number;
}

/**
 * Converts a checkpoint to weft-q: Linear weights packed as `options.quant`, the embedding as
 * `options.embeddings`, everything else F32. Writes through `write` in order — 8-byte header
 * length, header, then each tensor as it is read and packed — so only one tensor is in memory at
 * a time. Returns the metadata written. Shapes that the format cannot pack (K not a multiple of
 * the group) throw {@link ModelFormatError} naming the tensor before anything is written.
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
    const s = schemeFor(name, shape, options);
    if (s === undefined) {
      plan.push({ name, dtype: 'F32', shape, bytes: 4 * shape.reduce((a, b) => a * b, 1) });
      continue;
    }
    try {
      checkShape(s.format, s.rows, s.cols, s.group);
    } catch (cause) {
      throw new ModelFormatError('checkpoint', name, shape, `cannot pack as ${s.format}: ${String(cause)}`, {
        cause,
      });
    }
    schemes[name] = s;
    const wpr = wordsPerRow(s.format, s.cols);
    plan.push({ name, dtype: 'I32', shape: [s.rows, wpr], bytes: 4 * s.rows * wpr });
    const groups = [s.rows, s.cols / s.group];
    if (s.format === 'int8' || s.format === 'int4' || s.format === 'int2') {
      plan.push({
        name: `${name}.scales`,
        dtype: 'F32',
        shape: groups,
        bytes: 4 * s.rows * (s.cols / s.group),
      });
    }
    if (s.format === 'int4' || s.format === 'int2') {
      plan.push({
        name: `${name}.zeros`,
        dtype: 'F32',
        shape: groups,
        bytes: 4 * s.rows * (s.cols / s.group),
      });
    }
  }
  const metadata: Record<string, string> = {
    format: 'weft-q',
    version: '1',
    schemes: JSON.stringify(schemes),
    rotation: 'none',
    source_sha256: await sourceChecksum(source),
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
  // Data in plan order: each matrix, then its scales and zeros.
  for (const [name] of source.tensors) {
    const values = await source.readF32(name);
    const s = schemes[name];
    if (s === undefined) {
      await write(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
      continue;
    }
    const q = quantize(values, s.rows, s.cols, s.format, s.group);
    await write(new Uint8Array(q.data.buffer, q.data.byteOffset, q.data.byteLength));
    if (q.scales) await write(new Uint8Array(q.scales.buffer, q.scales.byteOffset, q.scales.byteLength));
    if (q.zeros) await write(new Uint8Array(q.zeros.buffer, q.zeros.byteOffset, q.zeros.byteLength));
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

const FORMATS: readonly string[] = ['f32', 'f16', 'int8', 'int4', 'int2'];

function isFormat(v: unknown): v is WeightFormat {
  return typeof v === 'string' && FORMATS.includes(v);
}

/**
 * Opens a weft-q checkpoint: validates the safetensors header, the `__metadata__` (format,
 * version, schemes) and that each scheme's packed data, scales and zeros are present with the
 * shapes and dtypes the scheme implies. Faults throw {@link ModelFormatError}.
 */
export async function openWeftCheckpoint(source: ByteSource): Promise<WeftCheckpoint> {
  const file = source.name;
  const st = await openSafetensors(source);
  const meta = st.metadata;
  if (meta.format !== 'weft-q')
    throw new ModelFormatError(file, '__metadata__.format', meta.format, 'not a weft-q checkpoint');
  if (meta.version !== '1')
    throw new ModelFormatError(file, '__metadata__.version', meta.version, 'unsupported version');
  let parsed: unknown;
  try {
    parsed = JSON.parse(meta.schemes ?? '');
  } catch (cause) {
    throw new ModelFormatError(file, '__metadata__.schemes', meta.schemes, 'not JSON', { cause });
  }
  if (!isRecord(parsed))
    throw new ModelFormatError(file, '__metadata__.schemes', meta.schemes, 'must be an object');
  const schemes: Record<string, WeftScheme> = {};
  const expectTensor = (name: string, dtype: SafetensorsDtype, shape: readonly number[]) => {
    const t = st.tensors.get(name);
    if (t === undefined) throw new ModelFormatError(file, name, undefined, 'missing tensor');
    if (t.dtype !== dtype || t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      throw new ModelFormatError(
        file,
        name,
        [t.dtype, ...t.shape],
        `expected ${dtype} [${shape.join(', ')}]`,
      );
    }
  };
  for (const [name, s] of Object.entries(parsed)) {
    const field = `__metadata__.schemes.${name}`;
    if (!isRecord(s) || !isFormat(s.format))
      throw new ModelFormatError(file, field, s, 'needs a weft format');
    const { format, group, rows, cols } = s;
    if (typeof group !== 'number' || typeof rows !== 'number' || typeof cols !== 'number') {
      throw new ModelFormatError(file, field, s, 'needs numeric group, rows, cols');
    }
    try {
      checkShape(format, rows, cols, group);
    } catch (cause) {
      throw new ModelFormatError(file, field, s, String(cause), { cause });
    }
    expectTensor(name, 'I32', [rows, wordsPerRow(format, cols)]);
    if (format === 'int8' || format === 'int4' || format === 'int2')
      expectTensor(`${name}.scales`, 'F32', [rows, cols / group]);
    if (format === 'int4' || format === 'int2') expectTensor(`${name}.zeros`, 'F32', [rows, cols / group]);
    schemes[name] = { format, group, rows, cols };
  }
  // The reader's view: every tensor under its model name and HF shape (packed parts hidden).
  const tensors = new Map<string, { readonly shape: readonly number[] }>();
  for (const [name, t] of st.tensors) {
    if (name.endsWith('.scales') || name.endsWith('.zeros')) {
      if (schemes[name.slice(0, name.lastIndexOf('.'))] !== undefined) continue;
    }
    const s = schemes[name];
    tensors.set(name, { shape: s ? [s.rows, s.cols] : t.shape });
  }
  const f32 = async (name: string) => readTensorF32(st.tensors.get(name)!);
  const readMatrix = async (name: string): Promise<QuantizedMatrix> => {
    const s = schemes[name];
    if (s === undefined) throw new ModelFormatError(file, name, undefined, 'not a packed matrix');
    const raw = (await readTensorBytes(st.tensors.get(name)!)).slice();
    const data = new Uint32Array(raw.buffer, 0, raw.byteLength / 4);
    const base = { format: s.format, rows: s.rows, cols: s.cols, group: s.group, data };
    if (s.format === 'int8') return { ...base, scales: await f32(`${name}.scales`) };
    if (s.format === 'int4' || s.format === 'int2') {
      return { ...base, scales: await f32(`${name}.scales`), zeros: await f32(`${name}.zeros`) };
    }
    return base;
  };
  return {
    metadata: meta,
    schemes,
    tensors,
    readMatrix,
    async readF32(name) {
      if (!tensors.has(name)) throw new ModelFormatError(file, name, undefined, 'missing tensor');
      if (schemes[name] === undefined) return f32(name);
      return dequantize(await readMatrix(name));
    },
  };
}
