/**
 * GGUF writer (version 3): typed metadata, tensor infos and aligned data, the inverse of
 * `openGguf`. Used by the test fixtures and by `weft export-gguf`. Tensors are given already
 * encoded (see `quantizeGgml`) with their GGML `ne` dims, fastest first.
 */
import { InvalidInputError } from '../errors.js';
import { GGML_BLOCKS, GgmlType, quantizeGgml } from './gguf-blocks.js';
import { GgufType } from './gguf-header.js';
import { ggufNe, ggufTensorName, storedLayout, storedValues } from './gguf-names.js';
import { imropeSections, llama3RopeFactors } from './gguf-spec.js';
import type { ModelSpec } from './spec.js';

/** A metadata entry with its GGUF type (arrays name their item type). */
export type GgufEntry =
  | { readonly type: 'u32' | 'i32' | 'f32' | 'u64' | 'u8'; readonly value: number }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'string[]'; readonly value: readonly string[] }
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

/** What {@link exportGguf} stores each 2-D weight as; 1-D tensors (norms, biases) stay F32. */
export type GgufExportType = 'F32' | 'F16' | 'Q8_0' | 'Q4_0' | 'Q4_K' | 'Q6_K';

/**
 * The GGML type a `[rows, cols]` weight gets when `wanted` is asked for: as llama.cpp does, a
 * block type whose block does not divide `cols` falls back (K-quants to Q8_0, then F16).
 */
function typeFor(wanted: GgufExportType, cols: number): number {
  const id = GgmlType[wanted];
  const elems = GGML_BLOCKS.get(id)!.elems;
  if (cols % elems === 0) return id;
  return cols % 32 === 0 ? GgmlType.Q8_0 : GgmlType.F16;
}

/**
 * The `<arch>.*` metadata of `spec`: the keys llama.cpp's converter writes (conversion/base.py
 * `TextModel.set_gguf_parameters`; for Qwen3.5 also conversion/qwen.py `Qwen3NextModel` and
 * `_Qwen35MRopeMixin`, in the converter's order).
 */
function archMetadata(spec: ModelSpec, arch: string): (readonly [string, GgufEntry])[] {
  const u32 = (value: number): GgufEntry => ({ type: 'u32', value });
  const k = (key: string) => `${arch}.${key}`;
  if (spec.family !== 'qwen3_5') {
    return [
      [k('context_length'), u32(spec.maxPositions)],
      [k('embedding_length'), u32(spec.hidden)],
      [k('block_count'), u32(spec.layers)],
      [k('feed_forward_length'), u32(spec.intermediate)],
      [k('attention.head_count'), u32(spec.heads)],
      [k('attention.head_count_kv'), u32(spec.kvHeads)],
      [k('attention.key_length'), u32(spec.headDim)],
      [k('attention.value_length'), u32(spec.headDim)],
      [k('rope.dimension_count'), u32(spec.headDim)],
      [k('rope.freq_base'), { type: 'f32', value: spec.rope.theta }],
      [k('attention.layer_norm_rms_epsilon'), { type: 'f32', value: spec.rmsEps }],
    ];
  }
  // Without linear layers llama.cpp still wants the ssm keys; any sizes do.
  const la = spec.linearAttention ?? { keyHeads: 1, valueHeads: 1, keyDim: 1, valueDim: 1, convKernel: 4 };
  const rotaryDim = spec.rope.rotaryDim ?? spec.headDim;
  return [
    [k('block_count'), u32(spec.layers)],
    [k('context_length'), u32(spec.maxPositions)],
    [k('embedding_length'), u32(spec.hidden)],
    [k('feed_forward_length'), u32(spec.intermediate)],
    [k('attention.head_count'), u32(spec.heads)],
    [k('attention.head_count_kv'), u32(spec.kvHeads)],
    [k('rope.freq_base'), { type: 'f32', value: spec.rope.theta }],
    [k('attention.layer_norm_rms_epsilon'), { type: 'f32', value: spec.rmsEps }],
    [k('attention.key_length'), u32(spec.headDim)],
    [k('attention.value_length'), u32(spec.headDim)],
    [k('ssm.conv_kernel'), u32(la.convKernel)],
    [k('ssm.state_size'), u32(la.keyDim)],
    [k('ssm.group_count'), u32(la.keyHeads)],
    [k('ssm.time_step_rank'), u32(la.valueHeads)],
    [k('ssm.inner_size'), u32(la.valueDim * la.valueHeads)],
    [k('full_attention_interval'), u32(fullAttentionInterval(spec))],
    [k('rope.dimension_count'), u32(rotaryDim)],
    [k('rope.dimension_sections'), { type: 'i32[]', value: imropeSections(rotaryDim / 2) }],
  ];
}

/**
 * The `full_attention_interval` n that gives Qwen3.5's layer kinds (layer i full attention exactly
 * when (i + 1) mod n = 0, as llama.cpp's loader derives them); throws when no n does.
 */
function fullAttentionInterval(spec: ModelSpec): number {
  const kinds = spec.layerKinds ?? [];
  const first = kinds.indexOf('attention');
  const n = first < 0 ? spec.layers + 1 : first + 1;
  kinds.forEach((kind, i) => {
    if (kind !== ((i + 1) % n === 0 ? 'attention' : 'linear')) {
      throw new InvalidInputError(
        `exportGguf: qwen35 GGUFs give every full_attention_interval-th layer full attention; layer kinds [${kinds}] are not such a pattern`,
      );
    }
  });
  return n;
}

/**
 * The GGML type llama.cpp's converter gives a tensor it writes as `name` (conversion/base.py
 * `prepare_tensors`): F32 for vectors, `*_norm.weight`, names not ending `.weight` (Qwen3.5's
 * `ssm_a`, `ssm_dt.bias`) and `ssm_conv1d.weight`; else `wanted` ({@link typeFor}).
 */
function ggmlTypeOf(name: string, ne: readonly number[], wanted: GgufExportType): number {
  const f32 =
    ne.length < 2 ||
    name.endsWith('_norm.weight') ||
    !name.endsWith('.weight') ||
    name.endsWith('.ssm_conv1d.weight');
  return f32 ? GgmlType.F32 : typeFor(wanted, ne[0]!);
}

/**
 * Writes a Hugging Face-layout checkpoint (tensors by HF name, f32 values) as a llama.cpp GGUF:
 * `<arch>.*` metadata from `spec` ({@link archMetadata}), GGUF tensor names, dims reversed to `ne`
 * (Qwen3.5's conv1d squeezed), values stored as llama.cpp's converter stores them (`storedLayout`:
 * llama Q/K rows permuted for interleaved RoPE; Qwen3.5's norms as 1 + w, `A_log` as -exp(A_log),
 * value heads tiled), Llama 3 RoPE scaling as `rope_freqs.weight`, matrices encoded as `type` (or
 * `type(hfName)`, for files that mix types as llama.cpp's do) and everything else F32
 * ({@link ggmlTypeOf}). `extra` adds metadata (e.g. the tokenizer's, from `tokenizerGgufMetadata`).
 * Qwen3.5's MTP layer is not written (a file as `convert_hf_to_gguf.py --no-mtp` writes).
 */
export function exportGguf(
  spec: ModelSpec,
  tensors: readonly {
    readonly name: string;
    readonly shape: readonly number[];
    readonly data: Float32Array;
  }[],
  type: GgufExportType | ((hfName: string) => GgufExportType),
  extra: readonly (readonly [string, GgufEntry])[] = [],
): Uint8Array<ArrayBuffer> {
  // Mistral GGUFs use the llama architecture and naming; llama.cpp names Qwen3.5 qwen35.
  const arch = spec.family === 'mistral' ? 'llama' : spec.family === 'qwen3_5' ? 'qwen35' : spec.family;
  const metadata: (readonly [string, GgufEntry])[] = [
    ['general.architecture', { type: 'string', value: arch }],
    ...archMetadata(spec, arch),
    ...extra,
  ];
  const out: GgufWriteTensor[] = [];
  if (spec.rope.scaling) {
    const factors = llama3RopeFactors(spec.rope.theta, spec.headDim, spec.rope.scaling);
    out.push({
      name: 'rope_freqs.weight',
      ne: [factors.length],
      type: GgmlType.F32,
      data: quantizeGgml(0, factors),
    });
  }
  for (const t of tensors) {
    const name = ggufTensorName(t.name, spec.family);
    if (name === undefined) continue;
    const ne = ggufNe(t.name, t.shape);
    const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
    const data = storedValues(storedLayout(spec, t.name, t.shape), t.data, cols);
    const ggmlType = ggmlTypeOf(name, ne, typeof type === 'string' ? type : type(t.name));
    out.push({ name, ne, type: ggmlType, data: quantizeGgml(ggmlType, data) });
  }
  return writeGguf(metadata, out);
}
