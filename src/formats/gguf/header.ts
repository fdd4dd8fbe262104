/**
 * GGUF header parser (llama.cpp's single-file format, versions 2 and 3): magic, version, typed
 * metadata and tensor infos, each count and length bounded by the file before anything is
 * allocated. Tensor data is read elsewhere (tensors.ts); this file reads only the header.
 *
 * weft parses GGUF itself rather than through `@huggingface/gguf`: that package reads from a URL
 * with its own fetch logic and throws untyped errors, while weft needs any {@link FileBytes}, a
 * bound on every count and length before allocating, and {@link ModelFormatError} for every fault.
 *
 * Layout: magic "GGUF", u32 version, u64 tensor count, u64 KV count, KVs (string key, u32 type,
 * value), tensor infos (string name, u32 n_dims, u64 ne[n_dims] fastest first, u32 ggml type, u64
 * offset relative to the data section), padding to `general.alignment` (default 32), data.
 * Strings are u64 length + UTF-8 bytes. All little-endian.
 */

import { GGML_BLOCKS } from '../../quant/ggml/blocks.js';
import { ModelFormatError } from '../errors.js';
import type { FileBytes } from '../io/bytes.js';

/** A metadata value: numbers (u64/i64 beyond 2^53 stay bigint), booleans, strings, arrays of them. */
export type GgufValue = number | bigint | boolean | string | readonly GgufValue[];

/** One tensor as stored: GGUF name, `ne` dims (fastest first), GGML type, absolute byte range. */
export interface GgufTensorInfo {
  readonly name: string;
  /** GGML dims, fastest-varying first: a Linear weight `[N, K]` in HF is `ne = [K, N]` here. */
  readonly ne: readonly number[];
  readonly type: number;
  readonly bytes: FileBytes;
  readonly offset: number;
  readonly byteLength: number;
}

/** A parsed GGUF file: version, metadata and tensors in file order. */
export interface GgufFile {
  readonly bytes: FileBytes;
  readonly version: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;
  readonly tensors: ReadonlyMap<string, GgufTensorInfo>;
  readonly alignment: number;
  readonly dataStart: number;
}

/** GGUF metadata value type ids. */
export const GgufType = {
  U8: 0,
  I8: 1,
  U16: 2,
  I16: 3,
  U32: 4,
  I32: 5,
  F32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  U64: 10,
  I64: 11,
  F64: 12,
} as const;

const FIXED_SIZE: Readonly<Record<number, number>> = {
  0: 1,
  1: 1,
  2: 2,
  3: 2,
  4: 4,
  5: 4,
  6: 4,
  7: 1,
  10: 8,
  11: 8,
  12: 8,
};

/** Thrown inside the parser when the prefix read so far is too short; the caller reads more. */
class NeedMore {}

/**
 * A cursor over a prefix of the file. Every read checks first against the whole file size
 * (a fault: {@link ModelFormatError}) and then against the prefix (read more and retry).
 */
class Cursor {
  pos = 0;
  private readonly view: DataView;
  private readonly utf8 = new TextDecoder('utf-8', { fatal: true });

  constructor(
    private readonly bytes: Uint8Array,
    readonly fileSize: number,
    readonly file: string,
  ) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /** Bytes left in the file after the cursor. */
  get left(): number {
    return this.fileSize - this.pos;
  }

  need(n: number, what: string): void {
    if (n > this.left) {
      throw new ModelFormatError(
        this.file,
        what,
        n,
        `needs ${n} bytes at offset ${this.pos}, file has ${this.left} left`,
      );
    }
    if (this.pos + n > this.bytes.byteLength) throw new NeedMore();
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  /** A u64 that must be a safe integer (counts, lengths, dims, offsets). */
  size(what: string): number {
    this.need(8, what);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new ModelFormatError(this.file, what, v, 'too large');
    return Number(v);
  }
  string(what: string): string {
    const n = this.size(`${what} length`);
    this.need(n, what);
    const bytes = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    try {
      return this.utf8.decode(bytes);
    } catch (cause) {
      throw new ModelFormatError(this.file, what, n, 'string is not valid UTF-8', { cause });
    }
  }

  /** One value of metadata type `type`; arrays may nest once more (depth ≤ 2). */
  value(type: number, what: string, depth = 0): GgufValue {
    const v = this.view;
    const fixed = FIXED_SIZE[type];
    if (fixed !== undefined) {
      this.need(fixed, what);
      const at = this.pos;
      this.pos += fixed;
      switch (type) {
        case GgufType.U8:
          return v.getUint8(at);
        case GgufType.I8:
          return v.getInt8(at);
        case GgufType.U16:
          return v.getUint16(at, true);
        case GgufType.I16:
          return v.getInt16(at, true);
        case GgufType.U32:
          return v.getUint32(at, true);
        case GgufType.I32:
          return v.getInt32(at, true);
        case GgufType.F32:
          return v.getFloat32(at, true);
        case GgufType.BOOL: {
          const b = v.getUint8(at);
          if (b > 1) throw new ModelFormatError(this.file, what, b, 'bool must be 0 or 1');
          return b === 1;
        }
        case GgufType.U64: {
          const x = v.getBigUint64(at, true);
          return x <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(x) : x;
        }
        case GgufType.I64: {
          const x = v.getBigInt64(at, true);
          return x <= BigInt(Number.MAX_SAFE_INTEGER) && x >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(x) : x;
        }
        default:
          return v.getFloat64(at, true);
      }
    }
    if (type === GgufType.STRING) return this.string(what);
    if (type === GgufType.ARRAY && depth < 2) {
      const itemType = this.u32(`${what} item type`);
      const count = this.size(`${what} count`);
      // Reject before allocating: every item takes at least `min` bytes, so a count claiming more
      // bytes than the file has left is a fault, whatever the prefix read so far.
      const min = FIXED_SIZE[itemType] ?? (itemType === GgufType.STRING ? 8 : 12);
      if (count * min > this.left) {
        throw new ModelFormatError(
          this.file,
          `${what} count`,
          count,
          `needs ≥ ${count * min} bytes, file has ${this.left} left`,
        );
      }
      const out: GgufValue[] = new Array(count);
      for (let i = 0; i < count; i++) out[i] = this.value(itemType, what, depth + 1);
      return out;
    }
    throw new ModelFormatError(this.file, what, type, 'unknown metadata value type');
  }
}

/** Largest file prefix tried for the header before giving up (headers with big vocabularies are ~10 MB). */
const MAX_HEADER_PREFIX = 512 * 1024 * 1024;

/**
 * Parses the header from `bytes`, a prefix of `source`: metadata, then tensor infos placed after
 * the aligned data start and checked to lie inside the file without overlapping. Throws
 * {@link NeedMore} when the prefix ends first, {@link ModelFormatError} for a fault.
 */
function parseHeader(bytes: Uint8Array, source: FileBytes): GgufFile {
  const c = new Cursor(bytes, source.size, source.name);
  const file = source.name;
  const magic = c.u32('magic');
  if (magic !== 0x46554747) throw new ModelFormatError(file, 'magic', magic.toString(16), 'not a GGUF file');
  const version = c.u32('version');
  if (version !== 2 && version !== 3)
    throw new ModelFormatError(file, 'version', version, 'unsupported (2 or 3)');
  const tensorCount = c.size('tensor count');
  const kvCount = c.size('metadata count');
  // A KV takes ≥ 8 + 4 + 1 bytes and a tensor info ≥ 8 + 4 + 8 + 4 + 8: bound counts by the file.
  if (kvCount * 13 + tensorCount * 32 > c.left) {
    throw new ModelFormatError(
      file,
      'counts',
      [tensorCount, kvCount],
      `more entries than ${c.left} bytes can hold`,
    );
  }
  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const key = c.string(`metadata key ${i}`);
    const type = c.u32(key);
    metadata.set(key, c.value(type, key));
  }
  const alignment = metadata.get('general.alignment') ?? 32;
  if (
    typeof alignment !== 'number' ||
    !Number.isInteger(alignment) ||
    alignment < 1 ||
    alignment & (alignment - 1)
  ) {
    throw new ModelFormatError(file, 'general.alignment', alignment, 'must be a power of two');
  }
  const infos: { name: string; ne: number[]; type: number; rel: number; byteLength: number }[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = c.string(`tensor ${i} name`);
    const nDims = c.u32(`${name}.n_dims`);
    if (nDims < 1 || nDims > 4) throw new ModelFormatError(file, `${name}.n_dims`, nDims, 'must be 1..4');
    const ne: number[] = [];
    for (let d = 0; d < nDims; d++) ne.push(c.size(`${name}.ne[${d}]`));
    const type = c.u32(`${name}.type`);
    const block = GGML_BLOCKS.get(type);
    if (block === undefined) throw new ModelFormatError(file, `${name}.type`, type, 'unknown GGML type');
    if (ne[0]! % block.elems !== 0) {
      throw new ModelFormatError(
        file,
        `${name}.ne[0]`,
        ne[0],
        `not a multiple of the ${block.name} block (${block.elems})`,
      );
    }
    let count = 1;
    for (const d of ne) count *= d;
    const byteLength = (count / block.elems) * block.bytes;
    if (!Number.isSafeInteger(byteLength) || byteLength > source.size) {
      throw new ModelFormatError(file, `${name}.ne`, ne, 'larger than the file');
    }
    const rel = c.size(`${name}.offset`);
    if (rel % alignment !== 0)
      throw new ModelFormatError(file, `${name}.offset`, rel, `not aligned to ${alignment}`);
    infos.push({ name, ne, type, rel, byteLength });
  }
  const dataStart = Math.ceil(c.pos / alignment) * alignment;
  const tensors = new Map<string, GgufTensorInfo>();
  for (const t of infos) {
    if (dataStart + t.rel + t.byteLength > source.size) {
      throw new ModelFormatError(
        file,
        `${t.name}.offset`,
        t.rel,
        `data [${t.rel}, +${t.byteLength}) runs past the end`,
      );
    }
    if (tensors.has(t.name)) throw new ModelFormatError(file, t.name, t.rel, 'duplicate tensor name');
    tensors.set(t.name, {
      name: t.name,
      ne: t.ne,
      type: t.type,
      bytes: source,
      offset: dataStart + t.rel,
      byteLength: t.byteLength,
    });
  }
  const sorted = [...tensors.values()].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < sorted.length; i++) {
    const prev = sorted[i - 1]!;
    if (sorted[i]!.offset < prev.offset + prev.byteLength) {
      throw new ModelFormatError(
        file,
        `${sorted[i]!.name}.offset`,
        sorted[i]!.offset - dataStart,
        `overlaps ${prev.name}`,
      );
    }
  }
  return { bytes: source, version, metadata, tensors, alignment, dataStart };
}

/**
 * Opens a GGUF file: reads a growing prefix (1 MiB, then ×4) until the header parses, so only the
 * header is read here. Every count and length is checked against the bytes the file has left
 * before anything is allocated; any fault throws {@link ModelFormatError}.
 */
export async function openGguf(source: FileBytes): Promise<GgufFile> {
  let length = Math.min(source.size, 1 << 20);
  for (;;) {
    const bytes = await source.read(0, length);
    try {
      return parseHeader(bytes, source);
    } catch (e) {
      if (!(e instanceof NeedMore)) throw e;
      if (length >= source.size || length >= MAX_HEADER_PREFIX) {
        throw new ModelFormatError(source.name, 'header', length, 'header larger than the limit');
      }
      length = Math.min(source.size, length * 4, MAX_HEADER_PREFIX);
    }
  }
}
