import { bf16ToF32Array, f16ToF32Array } from '../gpu/half.js';
import { ModelFormatError } from './errors.js';
import type { FileBytes } from './io/bytes.js';

/** Element types weft reads from safetensors files. */
export type SafetensorsDtype = 'BF16' | 'F16' | 'F32' | 'I8' | 'U8' | 'I32' | 'I64';

/** Bytes per element of each {@link SafetensorsDtype}. */
const DTYPE_BYTES: Readonly<Record<SafetensorsDtype, number>> = {
  BF16: 2,
  F16: 2,
  F32: 4,
  I8: 1,
  U8: 1,
  I32: 4,
  I64: 8,
};

/** The largest header weft accepts (the safetensors reference implementation uses the same 100 MB cap). */
const MAX_HEADER_BYTES = 100_000_000;

/** Reads are split into chunks of at most this many bytes (64 MiB). */
const MAX_CHUNK_BYTES = 64 * 1024 * 1024;

/**
 * One tensor of a checkpoint: where its bytes are and how to read them. `offset` is absolute in
 * `source` (header already accounted for), so a reader needs nothing else.
 */
export interface TensorInfo {
  readonly name: string;
  readonly dtype: SafetensorsDtype;
  /** Row-major shape as stored, slowest dimension first (`[out, in]` for a Linear weight). */
  readonly shape: readonly number[];
  readonly bytes: FileBytes;
  readonly offset: number;
  readonly byteLength: number;
}

/** A parsed safetensors file (or a set of shards): its tensors by name and its `__metadata__`. */
export interface SafetensorsCheckpoint {
  readonly tensors: ReadonlyMap<string, TensorInfo>;
  readonly metadata: Readonly<Record<string, string>>;
}

function isDtype(value: unknown): value is SafetensorsDtype {
  return typeof value === 'string' && Object.hasOwn(DTYPE_BYTES, value);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Validates a safetensors JSON header against a file of `fileSize` bytes whose data section starts
 * at `dataStart`: every entry has a known dtype, a shape of non-negative integers, `data_offsets`
 * `[begin, end]` inside the data section with `end - begin = prod(shape) * dtypeBytes`, and no two
 * tensors overlap. `__metadata__` must map strings to strings. Returns the tensors in file order.
 */
function parseSafetensorsHeader(
  header: unknown,
  source: FileBytes,
  dataStart: number,
): SafetensorsCheckpoint {
  const file = source.name;
  if (!isRecord(header)) throw new ModelFormatError(file, 'header', header, 'must be a JSON object');
  const dataBytes = source.size - dataStart;
  const metadata: Record<string, string> = {};
  const entries: TensorInfo[] = [];
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') {
      if (!isRecord(entry)) throw new ModelFormatError(file, name, entry, 'must be an object');
      for (const [k, v] of Object.entries(entry)) {
        if (typeof v !== 'string')
          throw new ModelFormatError(file, `__metadata__.${k}`, v, 'must be a string');
        metadata[k] = v;
      }
      continue;
    }
    if (!isRecord(entry)) throw new ModelFormatError(file, name, entry, 'tensor entry must be an object');
    const { dtype, shape, data_offsets: offsets } = entry;
    if (!isDtype(dtype)) {
      throw new ModelFormatError(
        file,
        `${name}.dtype`,
        dtype,
        'unknown dtype (BF16, F16, F32, I8, U8, I32, I64)',
      );
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new ModelFormatError(file, `${name}.shape`, shape, 'must be a list of non-negative integers');
    }
    if (
      !Array.isArray(offsets) ||
      offsets.length !== 2 ||
      !offsets.every((o) => Number.isSafeInteger(o) && o >= 0) ||
      offsets[0] > offsets[1] ||
      offsets[1] > dataBytes
    ) {
      throw new ModelFormatError(
        file,
        `${name}.data_offsets`,
        offsets,
        `must be [begin, end] with begin <= end <= ${dataBytes} (data section size)`,
      );
    }
    const [begin, end] = offsets;
    // Multiply step by step so a shape claiming 2^60 elements is caught, not rounded.
    let elements = 1;
    for (const d of shape) elements *= d;
    const expected = elements * DTYPE_BYTES[dtype];
    if (!Number.isSafeInteger(expected) || expected !== end - begin) {
      throw new ModelFormatError(
        file,
        `${name}.data_offsets`,
        offsets,
        `span ${end - begin} bytes but shape [${shape.join(', ')}] of ${dtype} needs ${expected}`,
      );
    }
    entries.push({ name, dtype, shape, bytes: source, offset: dataStart + begin, byteLength: end - begin });
  }
  entries.sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < entries.length; i++) {
    const prev = entries[i - 1]!;
    const cur = entries[i]!;
    if (cur.offset < prev.offset + prev.byteLength) {
      throw new ModelFormatError(
        file,
        `${cur.name}.data_offsets`,
        [cur.offset - dataStart, cur.offset - dataStart + cur.byteLength],
        `overlaps tensor ${prev.name}`,
      );
    }
  }
  return { tensors: new Map(entries.map((t) => [t.name, t])), metadata };
}

/**
 * Opens one safetensors file: reads the 8-byte little-endian header length (which must fit in the
 * file and be ≤ {@link MAX_HEADER_BYTES}), the JSON header, and validates it with
 * {@link parseSafetensorsHeader}. Only the header is read; tensors are read later one by one.
 */
export async function openSafetensors(source: FileBytes): Promise<SafetensorsCheckpoint> {
  const file = source.name;
  if (source.size < 8)
    throw new ModelFormatError(file, 'header length', source.size, 'file shorter than 8 bytes');
  const lenBytes = await source.read(0, 8);
  const view = new DataView(lenBytes.buffer, lenBytes.byteOffset, 8);
  const length = Number(view.getBigUint64(0, true));
  if (length > MAX_HEADER_BYTES || length > source.size - 8) {
    throw new ModelFormatError(
      file,
      'header length',
      length,
      `past the end of the file (${source.size} bytes) or over ${MAX_HEADER_BYTES}`,
    );
  }
  let header: unknown;
  try {
    header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(await source.read(8, length)));
  } catch (cause) {
    throw new ModelFormatError(file, 'header', length, 'not valid UTF-8 JSON', { cause });
  }
  return parseSafetensorsHeader(header, source, 8 + length);
}

/**
 * Opens a sharded checkpoint from its `model.safetensors.index.json` (parsed): each distinct shard
 * in `weight_map` is opened through `open(shardFile)`, and every tensor listed must be present in
 * the shard the map names. Tensors present in a shard but absent from the map are ignored, as
 * Transformers does. The result merges all shards; metadata comes from the index's `metadata`.
 */
export async function openShardedSafetensors(
  index: unknown,
  open: (shardFile: string) => Promise<FileBytes>,
  file = 'model.safetensors.index.json',
): Promise<SafetensorsCheckpoint> {
  if (!isRecord(index) || !isRecord(index.weight_map)) {
    throw new ModelFormatError(
      file,
      'weight_map',
      isRecord(index) ? index.weight_map : index,
      'must be an object',
    );
  }
  const shards = new Map<string, SafetensorsCheckpoint>();
  const tensors = new Map<string, TensorInfo>();
  for (const [name, shard] of Object.entries(index.weight_map)) {
    if (typeof shard !== 'string')
      throw new ModelFormatError(file, `weight_map.${name}`, shard, 'must be a file name');
    let opened = shards.get(shard);
    if (opened === undefined) {
      opened = await openSafetensors(await open(shard));
      shards.set(shard, opened);
    }
    const info = opened.tensors.get(name);
    if (info === undefined)
      throw new ModelFormatError(shard, name, undefined, 'tensor listed in the index is missing');
    tensors.set(name, info);
  }
  const metadata: Record<string, string> = {};
  if (isRecord(index.metadata)) {
    for (const [k, v] of Object.entries(index.metadata)) metadata[k] = String(v);
  }
  return { tensors, metadata };
}

/**
 * Reads a tensor's bytes in chunks of at most `maxChunk` bytes (64 MiB by default, rounded down to
 * whole elements), yielding each with its byte offset inside the tensor. Lets a loader convert and
 * upload a 2 GB embedding table without holding it whole.
 */
export async function* readTensorChunks(
  info: TensorInfo,
  maxChunk = MAX_CHUNK_BYTES,
): AsyncGenerator<{ offset: number; bytes: Uint8Array }> {
  const elem = DTYPE_BYTES[info.dtype];
  const step = Math.max(elem, maxChunk - (maxChunk % elem));
  for (let done = 0; done < info.byteLength; done += step) {
    const length = Math.min(step, info.byteLength - done);
    yield { offset: done, bytes: await info.bytes.read(info.offset + done, length) };
  }
}

/** Reads a whole tensor's raw bytes (use {@link readTensorChunks} for very large ones). */
export function readTensorBytes(info: TensorInfo): Promise<Uint8Array> {
  return info.bytes.read(info.offset, info.byteLength);
}

/**
 * Bytes [begin, end) of a tensor's data, read alone: a loader copies a packed matrix's words a
 * slice of rows at a time this way (see `WeftCheckpoint.readPacked`).
 */
export function readTensorByteRange(info: TensorInfo, begin: number, end: number): Promise<Uint8Array> {
  if (!Number.isInteger(begin) || !Number.isInteger(end) || begin < 0 || end < begin || end > info.byteLength)
    throw new ModelFormatError(
      info.bytes.name,
      info.name,
      [begin, end],
      `byte range outside [0, ${info.byteLength})`,
    );
  return info.bytes.read(info.offset + begin, end - begin);
}

/** A copy of `bytes` starting on a fresh buffer when it is not aligned for `align`-byte views. */
function aligned(bytes: Uint8Array, align: number): Uint8Array {
  return bytes.byteOffset % align === 0 ? bytes : bytes.slice();
}

/**
 * Converts raw little-endian tensor bytes of `dtype` to f32 values (BF16 and F16 exactly, integers
 * by value). Assumes a little-endian host, as every browser and Node platform is.
 */
function bytesToF32(dtype: SafetensorsDtype, raw: Uint8Array): Float32Array {
  const bytes = aligned(raw, Math.max(4, DTYPE_BYTES[dtype]));
  const n = bytes.byteLength / DTYPE_BYTES[dtype];
  switch (dtype) {
    case 'F32':
      return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    case 'F16':
      return f16ToF32Array(new Uint16Array(bytes.buffer, bytes.byteOffset, n));
    case 'BF16':
      return bf16ToF32Array(new Uint16Array(bytes.buffer, bytes.byteOffset, n));
    case 'I8':
      return Float32Array.from(new Int8Array(bytes.buffer, bytes.byteOffset, n));
    case 'U8':
      return Float32Array.from(bytes);
    case 'I32':
      return Float32Array.from(new Int32Array(bytes.buffer, bytes.byteOffset, n));
    case 'I64':
      return Float32Array.from(new BigInt64Array(bytes.buffer, bytes.byteOffset, n), Number);
  }
}

/** Reads a tensor and converts it to f32 (see {@link bytesToF32}). */
export async function readTensorF32(info: TensorInfo): Promise<Float32Array> {
  return bytesToF32(info.dtype, await readTensorBytes(info));
}

/**
 * Rows [row0, row0 + rows) of a tensor (along its first dimension) as f32, read and converted
 * alone: what a loader that packs a large matrix a slice at a time reads.
 */
export async function readTensorRowsF32(info: TensorInfo, row0: number, rows: number): Promise<Float32Array> {
  const total = info.shape[0] ?? 1;
  if (!Number.isInteger(row0) || !Number.isInteger(rows) || row0 < 0 || rows < 1 || row0 + rows > total)
    throw new ModelFormatError(info.bytes.name, info.name, [row0, rows], `row range outside [0, ${total})`);
  const rowBytes = info.byteLength / total;
  return bytesToF32(info.dtype, await info.bytes.read(info.offset + row0 * rowBytes, rows * rowBytes));
}

/**
 * Serialises tensors as one safetensors file: header JSON padded with spaces to a multiple of 8
 * bytes (as the reference writer does), then the data in the given order. Used by the test fixture
 * writer and by weft's own quantised checkpoints.
 */
export function writeSafetensors(
  tensors: readonly { name: string; dtype: SafetensorsDtype; shape: readonly number[]; data: Uint8Array }[],
  metadata?: Readonly<Record<string, string>>,
): Uint8Array<ArrayBuffer> {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = new TextEncoder().encode(JSON.stringify(header));
  const padded = Math.ceil(json.byteLength / 8) * 8;
  if (padded !== json.byteLength) {
    const p = new Uint8Array(padded).fill(0x20);
    p.set(json);
    json = p;
  }
  const out = new Uint8Array(8 + json.byteLength + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.byteLength), true);
  out.set(json, 8);
  let at = 8 + json.byteLength;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}
