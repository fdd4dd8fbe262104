/**
 * GGUF reader (llama.cpp's single-file format, versions 2 and 3): header, typed metadata, tensor
 * infos, and tensors under Hugging Face names and layouts, dequantised to f32 or, where a weft
 * layout holds their blocks, repacked as stored (`readPacked`), plus the mapping of
 * llama / qwen2 / qwen3 metadata to a {@link ModelSpec} and of the embedded vocabulary to a
 * tokenizer.json that `loadTokenizer` accepts.
 *
 * weft parses GGUF itself rather than through `@huggingface/gguf`: that package reads from a URL
 * with its own fetch logic and throws untyped errors, while weft needs any {@link ByteSource}, a
 * bound on every count and length before allocating, and {@link ModelFormatError} for every fault.
 *
 * Layout: magic "GGUF", u32 version, u64 tensor count, u64 KV count, KVs (string key, u32 type,
 * value), tensor infos (string name, u32 n_dims, u64 ne[n_dims] fastest first, u32 ggml type, u64
 * offset relative to the data section), padding to `general.alignment` (default 32), data.
 * Strings are u64 length + UTF-8 bytes. All little-endian.
 */

import type { QuantizedMatrix, WeightFormat } from '../quant/formats.js';
import { ModelFormatError } from './errors.js';
import {
  DEQUANTIZABLE,
  dequantizeGgml,
  emptyMatrix,
  GGML_BLOCKS,
  repackRows,
  storedWeftFormat,
} from './gguf-blocks.js';
import { checkTensors } from './layout.js';
import type { ByteSource } from './source.js';
import type { Llama3RopeScaling, ModelFamily, ModelSpec, RopeSpec } from './spec.js';
import type { PackedWant, ReadStats, RowRange, TensorReader } from './weft-checkpoint.js';

/** A metadata value: numbers (u64/i64 beyond 2^53 stay bigint), booleans, strings, arrays of them. */
export type GgufValue = number | bigint | boolean | string | readonly GgufValue[];

/** One tensor as stored: GGUF name, `ne` dims (fastest first), GGML type, absolute byte range. */
export interface GgufTensorInfo {
  readonly name: string;
  /** GGML dims, fastest-varying first: a Linear weight `[N, K]` in HF is `ne = [K, N]` here. */
  readonly ne: readonly number[];
  readonly type: number;
  readonly source: ByteSource;
  readonly offset: number;
  readonly byteLength: number;
}

/** A parsed GGUF file: version, metadata and tensors in file order. */
export interface GgufFile {
  readonly source: ByteSource;
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

function parseHeader(bytes: Uint8Array, source: ByteSource): GgufFile {
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
      source,
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
  return { source, version, metadata, tensors, alignment, dataStart };
}

/**
 * Opens a GGUF file: reads a growing prefix (1 MiB, then ×4) until the header parses, so only the
 * header is read here. Every count and length is checked against the bytes the file has left
 * before anything is allocated; any fault throws {@link ModelFormatError}.
 */
export async function openGguf(source: ByteSource): Promise<GgufFile> {
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

/** Reads one GGUF tensor as stored (GGML layout, `ne` order) and dequantises it to f32. */
export async function readGgufTensorF32(info: GgufTensorInfo): Promise<Float32Array> {
  const [cols = 1, ...outer] = info.ne;
  return readGgufRowsF32(
    info,
    0,
    outer.reduce((a, b) => a * b, 1),
    cols,
  );
}

/**
 * Rows [row0, row0 + rows) of a GGUF tensor as stored (a row is `ne[0]` elements, whole blocks of
 * any GGML type), read and dequantised to f32 alone.
 */
async function readGgufRowsF32(
  info: GgufTensorInfo,
  row0: number,
  rows: number,
  cols: number,
): Promise<Float32Array> {
  if (!DEQUANTIZABLE.has(info.type)) {
    const name = GGML_BLOCKS.get(info.type)?.name ?? String(info.type);
    throw new ModelFormatError(info.source.name, info.name, name, 'weft cannot dequantise this GGML type');
  }
  const total = info.ne.slice(1).reduce((a, b) => a * b, 1);
  if (!Number.isInteger(row0) || !Number.isInteger(rows) || row0 < 0 || rows < 1 || row0 + rows > total)
    throw new ModelFormatError(info.source.name, info.name, [row0, rows], `row range outside [0, ${total})`);
  const rowBytes = info.byteLength / total;
  const bytes = await info.source.read(info.offset + row0 * rowBytes, rows * rowBytes);
  return dequantizeGgml(info.type, bytes, rows * cols);
}

// --- Hugging Face names and layouts -------------------------------------------------------------

/** Per-layer tensor renames shared by llama, qwen2 and qwen3 GGUFs: [GGUF suffix, HF suffix]. */
const LAYER_NAMES: readonly (readonly [string, string])[] = [
  ['attn_norm.weight', 'input_layernorm.weight'],
  ['attn_q.weight', 'self_attn.q_proj.weight'],
  ['attn_k.weight', 'self_attn.k_proj.weight'],
  ['attn_v.weight', 'self_attn.v_proj.weight'],
  ['attn_q.bias', 'self_attn.q_proj.bias'],
  ['attn_k.bias', 'self_attn.k_proj.bias'],
  ['attn_v.bias', 'self_attn.v_proj.bias'],
  ['attn_q_norm.weight', 'self_attn.q_norm.weight'],
  ['attn_k_norm.weight', 'self_attn.k_norm.weight'],
  ['attn_output.weight', 'self_attn.o_proj.weight'],
  ['ffn_norm.weight', 'post_attention_layernorm.weight'],
  ['ffn_gate.weight', 'mlp.gate_proj.weight'],
  ['ffn_up.weight', 'mlp.up_proj.weight'],
  ['ffn_down.weight', 'mlp.down_proj.weight'],
];
const GLOBAL_NAMES: readonly (readonly [string, string])[] = [
  ['token_embd.weight', 'model.embed_tokens.weight'],
  ['output_norm.weight', 'model.norm.weight'],
  ['output.weight', 'lm_head.weight'],
];

/**
 * The Hugging Face name of a GGUF tensor of the llama / qwen2 / qwen3 families (which share one
 * naming), e.g. `blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`; undefined for
 * tensors weft does not use (`rope_freqs.weight`). The one place GGUF names are renamed.
 */
export function hfTensorName(ggufName: string): string | undefined {
  for (const [g, h] of GLOBAL_NAMES) if (ggufName === g) return h;
  const m = /^blk\.(\d+)\.(.+)$/.exec(ggufName);
  if (m === null) return undefined;
  for (const [g, h] of LAYER_NAMES) if (m[2] === g) return `model.layers.${m[1]}.${h}`;
  return undefined;
}

/** The inverse of {@link hfTensorName}, for the GGUF writer. */
export function ggufTensorName(hfName: string): string | undefined {
  for (const [g, h] of GLOBAL_NAMES) if (hfName === h) return g;
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hfName);
  if (m === null) return undefined;
  for (const [g, h] of LAYER_NAMES) if (m[2] === h) return `blk.${m[1]}.${g}`;
  return undefined;
}

/**
 * llama.cpp's converter permutes the rows of llama Q and K weights for its interleaved RoPE:
 * `w.reshape(heads, 2, rows / heads / 2, cols).swapaxes(1, 2).reshape(rows, cols)`, i.e. HF row
 * `h·d + s·d/2 + i` (head h, half s, pair i) goes to row `h·d + 2i + s`. `inverse` undoes it.
 * `w` is `[rows, cols]` row-major; returns a new array.
 */
export function permuteRows(
  w: Float32Array,
  rows: number,
  cols: number,
  heads: number,
  inverse: boolean,
): Float32Array {
  const d = rows / heads; // rows per head (head_dim)
  const half = d / 2;
  const out = new Float32Array(w.length);
  for (let h = 0; h < heads; h++) {
    for (let s = 0; s < 2; s++) {
      for (let i = 0; i < half; i++) {
        const hf = h * d + s * half + i;
        const gg = h * d + 2 * i + s;
        const [from, to] = inverse ? [gg, hf] : [hf, gg];
        out.set(w.subarray(from * cols, (from + 1) * cols), to * cols);
      }
    }
  }
  return out;
}

/**
 * The Hugging Face row of GGUF row `row` of a llama Q or K weight with `rows` rows over `heads`
 * heads: the inverse of {@link permuteRows}' move, row h·d + 2i + s back to h·d + s·d/2 + i.
 */
export function hfRowOf(row: number, rows: number, heads: number): number {
  const d = rows / heads;
  const r = row % d;
  return row - r + (r & 1) * (d / 2) + (r >> 1);
}

/** Most bytes of a tensor read at once when it is repacked (whole rows; at least one). */
const PIECE_BYTES = 4 << 20;

/**
 * Reads one GGUF matrix [rows, cols] (HF shape: `ne` reversed) into its weft format
 * ({@link storedWeftFormat}) without decoding it to f32: a piece of whole rows (at most
 * `pieceBytes`, at least one row) at a time, each row moved to `to(row)` with its scales. Given
 * `range`, only the rows that move into it are kept, as a matrix of those rows, and only the
 * stored rows `from` ([first, count), all by default) are read: the caller names the rows that
 * `to` moves into the range (for a permutation within heads, the heads it covers).
 */
export async function readGgufTensorPacked(
  info: GgufTensorInfo,
  to: (row: number) => number = (r) => r,
  pieceBytes = PIECE_BYTES,
  range?: RowRange,
  from?: RowRange,
): Promise<QuantizedMatrix> {
  const format = storedWeftFormat(info.type);
  const [cols, rows, ...more] = info.ne;
  if (format === undefined || rows === undefined || cols === undefined || more.length > 0) {
    const name = GGML_BLOCKS.get(info.type)?.name ?? String(info.type);
    throw new ModelFormatError(
      info.source.name,
      info.name,
      name,
      'not a matrix of a type with a weft layout',
    );
  }
  const want = range ?? { row0: 0, rows };
  const read = from ?? { row0: 0, rows };
  const out = emptyMatrix(format, want.rows, cols);
  const rowBytes = info.byteLength / rows;
  const perPiece = Math.max(1, Math.floor(pieceBytes / rowBytes));
  const end = read.row0 + read.rows;
  for (let r0 = read.row0; r0 < end; r0 += perPiece) {
    const n = Math.min(perPiece, end - r0);
    const bytes = await info.source.read(info.offset + r0 * rowBytes, n * rowBytes);
    if (range === undefined) {
      repackRows(info.type, bytes, out, (r) => to(r0 + r));
      continue;
    }
    for (let r = 0; r < n; r++) {
      const dest = to(r0 + r) - want.row0;
      if (dest >= 0 && dest < want.rows)
        repackRows(info.type, bytes.subarray(r * rowBytes, (r + 1) * rowBytes), out, () => dest);
    }
  }
  return out;
}

// --- Spec from metadata -------------------------------------------------------------------------

function meta(g: GgufFile, key: string): GgufValue | undefined {
  return g.metadata.get(key);
}

function metaCount(g: GgufFile, key: string, fallback?: number): number {
  const v = meta(g, key) ?? fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) {
    throw new ModelFormatError(
      g.source.name,
      key,
      v,
      v === undefined ? 'missing' : 'must be a positive integer',
    );
  }
  return v;
}

/**
 * The shortest decimal that rounds to the same f32 as `v`: GGUF stores `rms_norm_eps` and
 * `rope.freq_base` as f32, and the spec should read 1e-6, not 9.99999997e-7.
 */
function shortestF32(v: number): number {
  for (let p = 1; p < 9; p++) {
    const d = Number(v.toPrecision(p));
    if (Math.fround(d) === Math.fround(v)) return d;
  }
  return v;
}

function metaNumber(g: GgufFile, key: string, fallback?: number): number {
  const v = meta(g, key) ?? fallback;
  if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) {
    throw new ModelFormatError(
      g.source.name,
      key,
      v,
      v === undefined ? 'missing' : 'must be a finite number > 0',
    );
  }
  return shortestF32(v);
}

const ARCHES: Readonly<Record<string, ModelFamily>> = { llama: 'llama', qwen2: 'qwen2', qwen3: 'qwen3' };

/**
 * The per-frequency RoPE divisors of Llama 3 scaling, as llama.cpp's converter stores them in
 * `rope_freqs.weight` (`[head_dim / 2]`): 1 for short wavelengths, `factor` for long ones, and a
 * smooth blend between `original / high` and `original / low`.
 */
export function llama3RopeFactors(theta: number, headDim: number, s: Llama3RopeScaling): Float32Array {
  const out = new Float32Array(headDim / 2);
  const lowWavelen = s.originalMaxPositions / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositions / s.highFreqFactor;
  for (let i = 0; i < out.length; i++) {
    const wavelen = (2 * Math.PI) / theta ** -((2 * i) / headDim);
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = s.factor;
    else {
      const smooth =
        (s.originalMaxPositions / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / s.factor + smooth);
    }
  }
  return out;
}

/**
 * Recovers Llama 3 RoPE scaling from the `rope_freqs.weight` factors llama.cpp stores instead of
 * the config's parameters: assumes the published (low 1, high 4, original 8192) with factor = the
 * largest stored factor, and accepts it only if it reproduces every factor within 1e-3.
 */
function ropeFromFreqs(g: GgufFile, theta: number, headDim: number, freqs: Float32Array): RopeSpec {
  if (freqs.length !== headDim / 2) {
    throw new ModelFormatError(
      g.source.name,
      'rope_freqs.weight',
      freqs.length,
      `expected ${headDim / 2} factors`,
    );
  }
  const factor = freqs.reduce((a, b) => Math.max(a, b), 0);
  const scaling = { factor, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 };
  const expected = llama3RopeFactors(theta, headDim, scaling);
  if (!(factor > 0) || expected.some((e, i) => !(Math.abs(e - freqs[i]!) <= 1e-3 * e))) {
    throw new ModelFormatError(
      g.source.name,
      'rope_freqs.weight',
      [...freqs].slice(0, 8),
      'RoPE factors are not Llama 3 scaling with (low 1, high 4, original 8192)',
    );
  }
  return { theta, layout: 'half', scaling };
}

/**
 * Builds a {@link ModelSpec} from GGUF metadata for `general.architecture` llama (also Mistral
 * GGUFs), qwen2 or qwen3. Keys are `<arch>.embedding_length`, `.block_count`,
 * `.feed_forward_length`, `.attention.head_count(_kv)`, `.attention.key_length` (head dim),
 * `.attention.layer_norm_rms_epsilon`, `.rope.freq_base`, `.context_length`; the vocab size comes
 * from `token_embd.weight`; the head is tied when `output.weight` is absent. Llama 3 RoPE scaling
 * is recovered from `rope_freqs.weight` (hence async). RoPE layout is always `'half'`: weft
 * un-permutes llama Q/K rows at load (see {@link openGgufCheckpoint}).
 */
export async function ggufSpec(g: GgufFile): Promise<ModelSpec> {
  const file = g.source.name;
  const arch = meta(g, 'general.architecture');
  const family = typeof arch === 'string' ? ARCHES[arch] : undefined;
  if (family === undefined) {
    throw new ModelFormatError(
      file,
      'general.architecture',
      arch,
      'unsupported architecture (llama, qwen2, qwen3)',
    );
  }
  const k = (key: string) => `${arch}.${key}`;
  const hidden = metaCount(g, k('embedding_length'));
  const heads = metaCount(g, k('attention.head_count'));
  const kvHeads = metaCount(g, k('attention.head_count_kv'), heads);
  if (heads % kvHeads !== 0)
    throw new ModelFormatError(file, k('attention.head_count_kv'), kvHeads, 'must divide head_count');
  const headDim = metaCount(g, k('attention.key_length'), hidden / heads);
  if (headDim % 2 !== 0)
    throw new ModelFormatError(file, k('attention.key_length'), headDim, 'must be even for RoPE');
  const theta = metaNumber(g, k('rope.freq_base'), 10000);
  const scalingType = meta(g, k('rope.scaling.type'));
  if (scalingType !== undefined && scalingType !== 'none') {
    throw new ModelFormatError(file, k('rope.scaling.type'), scalingType, 'unsupported RoPE scaling');
  }
  const embd = g.tensors.get('token_embd.weight');
  if (embd === undefined) throw new ModelFormatError(file, 'token_embd.weight', undefined, 'missing tensor');
  const freqs = g.tensors.get('rope_freqs.weight');
  const rope: RopeSpec = freqs
    ? ropeFromFreqs(g, theta, headDim, await readGgufTensorF32(freqs))
    : { theta, layout: 'half' };
  const ids = (key: string) => {
    const v = meta(g, key);
    return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined;
  };
  const eos = [
    ids('tokenizer.ggml.eos_token_id'),
    ids('tokenizer.ggml.eot_token_id'),
    ids('tokenizer.ggml.eom_token_id'),
  ];
  return {
    family,
    vocabSize: embd.ne[1] ?? 0,
    hidden,
    intermediate: metaCount(g, k('feed_forward_length')),
    layers: metaCount(g, k('block_count')),
    heads,
    kvHeads,
    headDim,
    rmsEps: metaNumber(g, k('attention.layer_norm_rms_epsilon')),
    rope,
    maxPositions: metaCount(g, k('context_length')),
    tiedEmbeddings: !g.tensors.has('output.weight'),
    qkvBias: g.tensors.has('blk.0.attn_q.bias'),
    qkNorm: family === 'qwen3',
    bosId: ids('tokenizer.ggml.bos_token_id'),
    eosIds: [...new Set(eos.filter((x): x is number => x !== undefined))],
  };
}

/** One tensor of a GGUF checkpoint under its Hugging Face name and shape. */
export interface GgufTensor {
  readonly name: string;
  /** HF shape, slowest first (`ne` reversed). */
  readonly shape: readonly number[];
  readonly info: GgufTensorInfo;
}

/**
 * A GGUF file seen as a Hugging Face checkpoint: spec, tensors by HF name and HF shape,
 * `readF32(name)` that dequantises and, for llama Q/K weights, un-permutes the rows back to HF
 * order (one RoPE path at run time), and `readPacked` that gives a matrix whose GGML type has a
 * weft layout ({@link storedWeftFormat}) as stored, rows un-permuted the same way, without an f32
 * copy; both (and `readRowsF32`, its f32 rows) can read a range of rows alone. `stats` counts
 * what `readF32` and `readRowsF32` decoded. Tensors weft does not use are left out.
 */
export interface GgufCheckpoint extends TensorReader {
  readonly file: GgufFile;
  readonly spec: ModelSpec;
  readonly tensors: ReadonlyMap<string, GgufTensor>;
  readonly stats: ReadStats;
  readRowsF32(name: string, row0: number, rows: number): Promise<Float32Array>;
  readPacked(name: string, want: PackedWant, range?: RowRange): Promise<QuantizedMatrix | undefined>;
  storedFormat(name: string): WeightFormat | undefined;
}

/**
 * Opens a GGUF file as a {@link GgufCheckpoint}: parses the header, derives the spec and checks
 * that every tensor the spec needs is present with its HF shape ({@link checkTensors}).
 */
export async function openGgufCheckpoint(source: ByteSource): Promise<GgufCheckpoint> {
  const file = await openGguf(source);
  const spec = await ggufSpec(file);
  const tensors = new Map<string, GgufTensor>();
  for (const info of file.tensors.values()) {
    const name = hfTensorName(info.name);
    if (name !== undefined) tensors.set(name, { name, shape: [...info.ne].reverse(), info });
  }
  // Shapes must match the spec before any row permutation trusts heads * head_dim.
  checkTensors(spec, tensors, source.name);
  // llama.cpp permutes the rows of llama Q and K over their heads (see permuteRows).
  const permutedHeads = (name: string): number | undefined => {
    if (spec.family !== 'llama') return undefined;
    if (name.endsWith('self_attn.q_proj.weight')) return spec.heads;
    if (name.endsWith('self_attn.k_proj.weight')) return spec.kvHeads;
    return undefined;
  };
  const tensor = (name: string): GgufTensor => {
    const t = tensors.get(name);
    if (t === undefined) throw new ModelFormatError(source.name, name, undefined, 'missing tensor');
    return t;
  };
  const stats = { f32Bytes: 0, largestF32: 0 };
  const counted = (values: Float32Array) => {
    stats.f32Bytes += values.byteLength;
    stats.largestF32 = Math.max(stats.largestF32, values.length);
    return values;
  };
  // The stored rows that hold HF rows [row0, row0 + n) of a matrix whose rows are permuted within
  // blocks of d (a head; 1 when not permuted): the whole blocks they fall in.
  const covering = (row0: number, n: number, d: number): RowRange => {
    const first = row0 - (row0 % d);
    return { row0: first, rows: Math.ceil((row0 + n) / d) * d - first };
  };
  return {
    file,
    spec,
    tensors,
    stats,
    async readF32(name) {
      const t = tensor(name);
      const values = counted(await readGgufTensorF32(t.info));
      const [rows = 1, cols = 1] = t.shape.length === 2 ? t.shape : [t.shape[0], 1];
      const heads = permutedHeads(name);
      return heads === undefined ? values : permuteRows(values, rows, cols, heads, true);
    },
    async readRowsF32(name, row0, n) {
      const t = tensor(name);
      const [rows = 1, cols = 1] = t.shape;
      const heads = permutedHeads(name);
      const read = covering(row0, n, heads === undefined ? 1 : rows / heads);
      const values = counted(await readGgufRowsF32(t.info, read.row0, read.rows, cols));
      if (heads === undefined) return values;
      const hf = permuteRows(values, read.rows, cols, read.rows / (rows / heads), true);
      const at = row0 - read.row0;
      return at === 0 && n === read.rows ? hf : hf.slice(at * cols, (at + n) * cols);
    },
    storedFormat(name) {
      const t = tensors.get(name);
      return t?.shape.length === 2 ? storedWeftFormat(t.info.type) : undefined;
    },
    async readPacked(name, want, range) {
      const t = tensor(name);
      const [rows, cols] = t.shape;
      const same =
        t.shape.length === 2 &&
        storedWeftFormat(t.info.type) === want.format &&
        rows === want.rows &&
        cols === want.cols &&
        want.rotation === 'none';
      if (!same || rows === undefined || cols === undefined) return undefined;
      // A row permutation moves whole rows: each GGUF row is whole blocks, so codes and scales
      // move together and nothing is rounded.
      const heads = permutedHeads(name);
      const to = heads === undefined ? (r: number) => r : (r: number) => hfRowOf(r, rows, heads);
      if (range === undefined) return readGgufTensorPacked(t.info, to);
      const from = covering(range.row0, range.rows, heads === undefined ? 1 : rows / heads);
      return readGgufTensorPacked(t.info, to, PIECE_BYTES, range, from);
    },
  };
}
