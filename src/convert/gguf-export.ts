/**
 * `weft export-gguf`'s core: a Hugging Face checkpoint (f32 tensors by HF name) written as a
 * llama.cpp GGUF, its metadata, names and stored values as llama.cpp's converter writes them.
 */

import { InvalidInputError } from '../errors.js';
import { type GgufEntry, type GgufWriteTensor, writeGguf } from '../formats/gguf/write.js';
import type { StoredForm } from '../model/families/family.js';
import { llama3RopeFactors } from '../model/families/gguf-base.js';
import { fusedProjections, ggufFamily, ggufNe, ggufTensorName, storedForm } from '../model/families/index.js';
import { storedValues } from '../model/families/stored.js';
import { fuseProjections } from '../model/fused-view.js';
import type { ModelSpec } from '../model/spec/spec.js';
import { GgmlType, quantizeGgml } from '../quant/ggml/blocks.js';
import { fallbackType, type GgufMix, isGgufMix, mixTypes } from './gguf-mix.js';

/** What {@link exportGguf} stores each 2-D weight as; 1-D tensors (norms, biases) stay F32. */
export type GgufExportType =
  | 'F32'
  | 'F16'
  | 'BF16'
  | 'Q8_0'
  | 'Q4_0'
  | 'Q4_1'
  | 'Q5_0'
  | 'Q5_1'
  | 'Q4_K'
  | 'Q5_K'
  | 'Q6_K'
  | 'Q2_K'
  | 'Q3_K'
  | 'IQ4_NL'
  | 'IQ4_XS'
  | 'IQ3_XXS'
  | 'IQ3_S'
  | 'IQ2_XXS'
  | 'IQ2_XS'
  | 'IQ2_S';

/** Options of {@link exportGguf}. */
export interface GgufExportOptions {
  /**
   * Importance weights of a weight's input columns (by its Hugging Face name, as in `tensors`;
   * length = its columns, in Hugging Face order), from calibration: the quantisers of Q2_K, Q3_K
   * and the i-quants weigh each column's squared error by them (llama.cpp's importance matrix).
   * Undefined: unweighted. A Phi-3 projection written fused is asked for by its first part's name
   * (q_proj, gate_proj: the parts share an input); columns are permuted as the stored form keeps them.
   */
  readonly importance?: (hfName: string) => Float32Array | undefined;
}

/**
 * Whether llama.cpp's converter keeps a tensor it writes as `name` in F32 whatever the file's type
 * (conversion/base.py `prepare_tensors`): vectors, `*_norm.weight`, names not ending `.weight`
 * (Qwen3.5's `ssm_a`, `ssm_dt.bias`), `ssm_conv1d.weight`, LFM2's `shortconv.conv.weight` and a
 * mixture's routers `ffn_gate_inp` and `ffn_gate_inp_shexp` (SSM_CONV1D, SHORTCONV_CONV,
 * FFN_GATE_INP and FFN_GATE_INP_SHEXP are kept F32). The others take the file's type, or a fallback
 * (`fallbackType`) where its block does not divide their rows.
 */
function keptF32(name: string, ne: readonly number[]): boolean {
  return (
    ne.length < 2 ||
    name.endsWith('_norm.weight') ||
    !name.endsWith('.weight') ||
    name.endsWith('.ssm_conv1d.weight') ||
    name.endsWith('.shortconv.conv.weight') ||
    name.endsWith('.ffn_gate_inp.weight') ||
    name.endsWith('.ffn_gate_inp_shexp.weight')
  );
}

/**
 * Writes a Hugging Face-layout checkpoint (tensors by HF name, f32 values) as a llama.cpp GGUF, as
 * llama.cpp's converter writes the spec's family (its `gguf` side): `general.architecture` and the
 * `<arch>.*` metadata, GGUF tensor names, dims reversed to `ne` (depthwise convolutions squeezed),
 * values in the family's stored form (Q/K rows permuted for interleaved RoPE, norms as 1 + w, value
 * heads tiled, ...), fused projections fused, Llama 3 RoPE scaling as `rope_freqs.weight` (linear
 * scaling as metadata) and LongRoPE factors as `rope_factors_short.weight` and
 * `rope_factors_long.weight` (the short ones under both names where the spec has no long ones),
 * and the vectors the family's converter generates (`extraTensors`: Gemma 4's `rope_freqs.weight`);
 * matrices encoded as `type` (or `type(hfName)`, for files that mix types as llama.cpp's do; or a
 * {@link GgufMix}, llama-quantize's per-tensor recipe, see `mixTypes`), falling back where a row is
 * no whole block (`fallbackType`), and everything else F32 ({@link keptF32}). `extra` adds metadata
 * (e.g. the tokenizer's, from `tokenizerGgufMetadata`). A checkpoint's MTP layer is not written (a
 * file as `convert_hf_to_gguf.py --no-mtp` writes). Throws {@link InvalidInputError} for a spec
 * that llama.cpp's loader would run differently (the family's `metadata` refuses it).
 */
export function exportGguf(
  spec: ModelSpec,
  tensors: readonly {
    readonly name: string;
    readonly shape: readonly number[];
    readonly data: Float32Array;
  }[],
  type: GgufExportType | GgufMix | ((hfName: string) => GgufExportType),
  extra: readonly (readonly [string, GgufEntry])[] = [],
  options: GgufExportOptions = {},
): Uint8Array<ArrayBuffer> {
  // The family's llama.cpp architecture and its `<arch>.*` keys (which refuse what llama.cpp's
  // loader would run differently).
  const gguf = ggufFamily(spec);
  const metadata: (readonly [string, GgufEntry])[] = [
    ['general.architecture', { type: 'string', value: gguf.arch }],
    ...gguf.metadata(spec),
    ...extra,
  ];
  const out: GgufWriteTensor[] = [];
  const scaling = spec.rope.scaling;
  if (scaling?.type === 'longrope') {
    // llama.cpp takes the long factors when its context passes the original one (a spec without
    // long factors stops there: the short ones go under both names).
    const lists = [
      ['rope_factors_long.weight', scaling.long?.factors ?? scaling.factors],
      ['rope_factors_short.weight', scaling.factors],
    ] as const;
    for (const [name, factors] of lists)
      out.push({
        name,
        ne: [factors.length],
        type: GgmlType.F32,
        data: quantizeGgml(0, Float32Array.from(factors)),
      });
  } else if (
    scaling &&
    scaling.type !== 'linear' &&
    scaling.type !== 'yarn' &&
    scaling.type !== 'proportional'
  ) {
    const factors = llama3RopeFactors(spec.rope.theta, spec.headDim, scaling);
    out.push({
      name: 'rope_freqs.weight',
      ne: [factors.length],
      type: GgmlType.F32,
      data: quantizeGgml(0, factors),
    });
  }
  for (const [name, values] of gguf.extraTensors?.(spec) ?? [])
    out.push({ name, ne: [values.length], type: GgmlType.F32, data: quantizeGgml(0, values) });
  const written = fuseProjections(spec, tensors, 'gguf').flatMap((t) => {
    const name = ggufTensorName(t.name, spec);
    return name === undefined ? [] : [{ t, name, ne: ggufNe(t.name, t.shape, spec) }];
  });
  const weights = written.filter((w) => !keptF32(w.name, w.ne));
  // Each weight's type: the mix's recipe, or the type asked for (falling back where it must).
  const types =
    typeof type === 'function' || !isGgufMix(type)
      ? new Map(
          weights.map((w) => [
            w.name,
            fallbackType(GgmlType[typeof type === 'function' ? type(w.t.name) : type], w.ne[0]!),
          ]),
        )
      : mixTypes(type, weights, spec.layers);
  // A fused projection (Phi-3's) takes its first part's importance: its parts read one input.
  const firstPart = new Map(
    Array.from({ length: spec.layers }, (_, l) => fusedProjections(spec, l))
      .flat()
      .map((fp) => [fp.name, fp.parts[0]!.name]),
  );
  for (const { t, name, ne } of written) {
    const cols = t.shape.slice(1).reduce((a, b) => a * b, 1);
    const form = storedForm(spec, t.name, t.shape);
    const data = storedValues(form, t.data, cols);
    const ggmlType = types.get(name) ?? GgmlType.F32;
    const importance =
      ggmlType === GgmlType.F32
        ? undefined
        : storedImportance(options.importance?.(firstPart.get(t.name) ?? t.name), form, t.name, cols);
    out.push({ name, ne, type: ggmlType, data: quantizeGgml(ggmlType, data, importance) });
  }
  return writeGguf(metadata, out);
}

/**
 * A weight's column importance (Hugging Face column order) in the order its stored form keeps its columns
 * (Qwen3.5's out_proj tiles its value heads); throws {@link InvalidInputError} unless it has one
 * value per column.
 */
function storedImportance(
  importance: Float32Array | undefined,
  form: StoredForm,
  hfName: string,
  cols: number,
): Float32Array | undefined {
  if (importance === undefined) return undefined;
  if (importance.length !== cols)
    throw new InvalidInputError(
      `exportGguf: importance of ${hfName} has ${importance.length} values for its ${cols} columns`,
    );
  const hfCol = form.hfCol;
  return hfCol ? Float32Array.from({ length: cols }, (_, c) => importance[hfCol(c)]!) : importance;
}
