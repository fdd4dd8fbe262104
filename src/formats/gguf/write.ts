/**
 * GGUF writer (version 3): typed metadata, tensor infos and aligned data, the inverse of
 * `openGguf`. Tensors are given already encoded (see `quantizeGgml`) with their GGML `ne` dims,
 * fastest first. A model's export (its names, metadata and stored values) is `exportGguf` in
 * src/convert/gguf-export.ts.
 */
import { InvalidInputError } from '../../errors.js';
import { GGML_BLOCKS } from '../../quant/ggml/blocks.js';
import { GgufType } from './header.js';

/** A metadata entry with its GGUF type (arrays name their item type). */
export type GgufEntry =
  | { readonly type: 'u32' | 'i32' | 'f32' | 'u64' | 'u8'; readonly value: number }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'string[]'; readonly value: readonly string[] }
  | { readonly type: 'bool[]'; readonly value: readonly boolean[] }
  | { readonly type: 'f32[]' | 'i32[]'; readonly value: readonly number[] };

/** A tensor to write: GGUF name, `ne` dims (fastest first), GGML type and its encoded bytes. */
export interface GgufWriteTensor {
  readonly name: string;
  readonly ne: readonly number[];
  readonly type: number;
  readonly data: Uint8Array;
}

/** Grows a byte buffer as values are appended (little-endian). */
class ByteWriter {
  private buf = new Uint8Array(1 << 16);
  private view = new DataView(this.buf.buffer);
  length = 0;

  private reserve(n: number): number {
    if (this.length + n > this.buf.byteLength) {
      const next = new Uint8Array(Math.max(this.buf.byteLength * 2, this.length + n));
      next.set(this.buf.subarray(0, this.length));
      this.buf = next;
      this.view = new DataView(next.buffer);
    }
    const at = this.length;
    this.length += n;
    return at;
  }
  // Each writer reserves first: reserving may replace `buf` and `view`.
  u8(v: number) {
    const at = this.reserve(1);
    this.view.setUint8(at, v);
  }
  u32(v: number) {
    const at = this.reserve(4);
    this.view.setUint32(at, v, true);
  }
  i32(v: number) {
    const at = this.reserve(4);
    this.view.setInt32(at, v, true);
  }
  f32(v: number) {
    const at = this.reserve(4);
    this.view.setFloat32(at, v, true);
  }
  u64(v: number) {
    const at = this.reserve(8);
    this.view.setBigUint64(at, BigInt(v), true);
  }
  bytes(b: Uint8Array) {
    const at = this.reserve(b.byteLength);
    this.buf.set(b, at);
  }
  string(s: string) {
    const b = new TextEncoder().encode(s);
    this.u64(b.byteLength);
    this.bytes(b);
  }
  pad(alignment: number) {
    const n = (alignment - (this.length % alignment)) % alignment;
    this.reserve(n);
  }
  result(): Uint8Array<ArrayBuffer> {
    return this.buf.slice(0, this.length);
  }
}

function writeEntry(w: ByteWriter, e: GgufEntry): void {
  switch (e.type) {
    case 'u8':
      w.u32(GgufType.U8);
      w.u8(e.value);
      return;
    case 'u32':
      w.u32(GgufType.U32);
      w.u32(e.value);
      return;
    case 'i32':
      w.u32(GgufType.I32);
      w.i32(e.value);
      return;
    case 'f32':
      w.u32(GgufType.F32);
      w.f32(e.value);
      return;
    case 'u64':
      w.u32(GgufType.U64);
      w.u64(e.value);
      return;
    case 'bool':
      w.u32(GgufType.BOOL);
      w.u8(e.value ? 1 : 0);
      return;
    case 'string':
      w.u32(GgufType.STRING);
      w.string(e.value);
      return;
    case 'string[]':
      w.u32(GgufType.ARRAY);
      w.u32(GgufType.STRING);
      w.u64(e.value.length);
      for (const s of e.value) w.string(s);
      return;
    case 'bool[]':
      w.u32(GgufType.ARRAY);
      w.u32(GgufType.BOOL);
      w.u64(e.value.length);
      for (const b of e.value) w.u8(b ? 1 : 0);
      return;
    case 'f32[]':
    case 'i32[]':
      w.u32(GgufType.ARRAY);
      w.u32(e.type === 'f32[]' ? GgufType.F32 : GgufType.I32);
      w.u64(e.value.length);
      for (const v of e.value) e.type === 'f32[]' ? w.f32(v) : w.i32(v);
      return;
  }
}

/**
 * Serialises a GGUF v3 file. `general.alignment` is written when `alignment` is not the default
 * 32. Each tensor's byte size is checked against its type and dims.
 */
export function writeGguf(
  metadata: ReadonlyMap<string, GgufEntry> | readonly (readonly [string, GgufEntry])[],
  tensors: readonly GgufWriteTensor[],
  alignment = 32,
): Uint8Array<ArrayBuffer> {
  const entries = [...metadata];
  if (alignment !== 32) entries.push(['general.alignment', { type: 'u32', value: alignment }]);
  const w = new ByteWriter();
  w.bytes(new TextEncoder().encode('GGUF'));
  w.u32(3);
  w.u64(tensors.length);
  w.u64(entries.length);
  for (const [key, e] of entries) {
    w.string(key);
    writeEntry(w, e);
  }
  let offset = 0;
  const offsets: number[] = [];
  for (const t of tensors) {
    const block = GGML_BLOCKS.get(t.type);
    const count = t.ne.reduce((a, b) => a * b, 1);
    if (block === undefined || (count / block.elems) * block.bytes !== t.data.byteLength) {
      throw new InvalidInputError(
        `writeGguf: ${t.name} has ${t.data.byteLength} bytes for ne [${t.ne}] of type ${t.type}`,
      );
    }
    w.string(t.name);
    w.u32(t.ne.length);
    for (const d of t.ne) w.u64(d);
    w.u32(t.type);
    w.u64(offset);
    offsets.push(offset);
    offset += Math.ceil(t.data.byteLength / alignment) * alignment;
  }
  w.pad(alignment);
  const dataStart = w.length;
  tensors.forEach((t, i) => {
    w.pad(alignment);
    if (w.length !== dataStart + offsets[i]!)
      throw new InvalidInputError('writeGguf: internal offset mismatch');
    w.bytes(t.data);
  });
  return w.result();
}
