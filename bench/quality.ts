// Quantization quality of the demo target on its held-out text (issues 10, 18): for each weight
// format, with and without the online Hadamard rotation, rounded to nearest or calibrated (GPTQ on
// a calibration text disjoint from the held-out one), bits per weight measured from the packed
// bytes, perplexity, its ratio to f16, mean KL(p_f16 || p_quant) per token and top-1 agreement with
// f16 (the greedy acceptance rate of that format as a self-draft). Runs the plain-TS reference in Node: only the numbers matter, not speed, and the
// reference on `roundedThrough` weights is the exact math the GPU runner does for int formats
// (test/model/gpu/rotate.gpu.test.ts checks that); W8A8 adds the GPU's per-token activation rounding
// through `w8a8Inputs`. GGUF rows (issue 40) score the file `exportGguf` writes for a GGML type or
// llama-quantize mix, with the calibration text's importance matrix, as the GGUF loader reads it
// back (`ggufWeights`).
import { readFile } from 'node:fs/promises';
import { calibrationWindows, collectHessians } from '../src/convert/calibrate.js';
import { exportGguf, type GgufExportType } from '../src/convert/gguf-export.js';
import { type GgufMix, isGgufMix } from '../src/convert/gguf-mix.js';
import { memoryBytes } from '../src/formats/io/bytes.js';
import { pathModel } from '../src/formats/io/node-file.js';
import { openGgufCheckpoint } from '../src/model/gguf.js';
import { openModel } from '../src/model/load.js';
import { roundedThrough, w8a8Inputs } from '../src/model/quantized.js';
import { ReferenceRunner } from '../src/model/reference/reference.js';
import type { ModelSpec } from '../src/model/spec/spec.js';
import { mapWeights, readAllF32, type Tensor } from '../src/model/weights.js';
import { packedBytes, type WeightFormat } from '../src/quant/formats.js';
import { GGML_BLOCKS, GgmlType } from '../src/quant/ggml/blocks.js';
import { formatOf, isRotatedLinear, packedWidth, type Quant, type Rotation } from '../src/quant/pack.js';

/** Chunk length of the model card's evaluation protocol (models/README.md). */
export const CHUNK = 256;

/** A GGML type or llama-quantize mix that a GGUF row stores every quantised weight as. */
export type GgufQuant = GgufExportType | GgufMix;

/**
 * The GGUF block types and mixes weft writes, most bits first: what `--gguf all` measures.
 */
export const GGUF_QUANTS: readonly GgufQuant[] = [
  'Q8_0',
  'Q6_K',
  'Q5_K_M',
  'Q5_K',
  'Q5_1',
  'Q5_0',
  'Q4_K_M',
  'Q4_K',
  'Q4_1',
  'Q4_0',
  'IQ4_NL',
  'IQ4_XS',
  'Q3_K_M',
  'Q3_K',
  'IQ3_S',
  'IQ3_XXS',
  'Q2_K',
  'IQ2_S',
  'IQ2_XS',
  'IQ2_XXS',
];

/** Options of {@link measureQuality}. */
export interface QualityOptions {
  /** Model folder (Hugging Face layout). */
  model: string;
  /** Held-out text file, scored by the model card's protocol. */
  text: string;
  /** Chunks of {@link CHUNK} ids to score, from the start of the text (at most all of them). */
  chunks: number;
  /** Formats to compare with f16 (each at every rotation of `rotations`, rounded to nearest). */
  quants: readonly Quant[];
  /** Rotations of the weft rows (default none and hadamard); GGUF rows are never rotated. */
  rotations?: readonly Rotation[];
  /**
   * Calibrated rounding: a text file (disjoint from `text`) whose Hessians drive GPTQ, and the
   * formats to add calibrated rows for (each at every rotation of `rotations`). The GGUF rows take
   * their importance matrix from the same text.
   */
  calibration?: { readonly text: string; readonly quants: readonly Quant[] };
  /**
   * GGUF rows: each type or mix as `exportGguf` writes the model, given the diagonal of each
   * linear's calibration Hessian as its importance matrix (so `calibration` is required), read
   * back through the GGUF loader ({@link ggufWeights}).
   */
  gguf?: readonly GgufQuant[];
  /** Called after each chunk. */
  onChunk?: (done: number, total: number) => void;
}

/** A weight of a GGUF row stored in another type than the one asked for (`fallbackType`). */
export interface GgufFallback {
  /** GGUF tensor name. */
  tensor: string;
  /** GGML dims, fastest first: `ne[0]` is the row that is not whole blocks. */
  ne: number[];
  /** The GGML type it was stored as. */
  type: string;
}

/** One format, rotation and rounding against the f16 model, over the scored tokens. */
export interface QualityRow {
  /** A weft format, or the GGML type or mix of a GGUF file. */
  quant: Quant | GgufQuant;
  rotate: Rotation;
  /**
   * Round-to-nearest, GPTQ on the calibration text, or (GGUF rows) weft's GGML quantisers given
   * the calibration text's importance matrix (those of Q2_K, Q3_K and the i-quants weigh by it).
   */
  rounding: 'rtn' | 'gptq' | 'imatrix';
  /**
   * Bits per weight of every matrix as packed (codes, scales and padding), measured from the bytes;
   * for a GGUF row, the file's matrices as stored, fallbacks included.
   */
  bits: number;
  ppl: number;
  /** ppl / ppl(f16). */
  ppl_ratio: number;
  /** Mean KL(p_f16 || p_quant) per token, in nats. */
  kld: number;
  /** Fraction of tokens whose argmax equals the f16 argmax (lowest id on ties). */
  top1: number;
  /** GGUF rows: the weights whose rows are not whole blocks of the type asked for, and their type. */
  fallbacks?: GgufFallback[];
}

/** The benchmark's result. */
export interface QualityReport {
  model: string;
  text: string;
  chunks: number;
  /** Chunks the text has in all. */
  chunks_available: number;
  tokens: number;
  f16: { ppl: number };
  rows: QualityRow[];
  seconds: number;
}

/** Running sums for one configuration. */
interface Sums {
  nll: number;
  kld: number;
  agree: number;
}

/**
 * Scores the first `chunks` chunks of the held-out text (each fed as [BOS] + chunk[:-1] from
 * position 0, as the model card does) with the f16 model once and every configuration once,
 * chunk by chunk, so only one chunk's logits per model are held at a time.
 */
export async function measureQuality(o: QualityOptions): Promise<QualityReport> {
  const started = performance.now();
  const files = await pathModel(o.model);
  const opened = await openModel(files);
  const { spec } = opened;
  const source = await readAllF32(opened.weights);
  await files.close?.();
  const bos = spec.bosId;
  if (bos === undefined) throw new Error(`${o.model}: the model has no BOS id to start chunks with`);
  if (o.gguf?.length && !o.calibration)
    throw new Error('measureQuality: GGUF rows take their importance matrix from a calibration text');
  const text = (await readFile(o.text, 'utf8')).replace(/\n$/, '');
  const ids = opened.tokenizer.encode(text, { addSpecialTokens: false });
  const available = Math.ceil(ids.length / CHUNK);
  const chunks = Math.min(o.chunks, available);

  const model = (tensors: Record<string, Tensor>) =>
    new ReferenceRunner(spec, mapWeights(tensors), { capacity: CHUNK });
  const base = model(source);
  const rotations = o.rotations ?? (['none', 'hadamard'] as const);
  // GPTQ needs each linear's input statistics, in the basis its weights are packed in; the GGUF
  // rows need them unrotated.
  const hessians = new Map<Rotation, Map<string, Float64Array>>();
  if (o.calibration) {
    const calText = await readFile(o.calibration.text, 'utf8');
    const windows = calibrationWindows(opened.tokenizer, calText, bos);
    const needed = new Set<Rotation>(o.calibration.quants.length > 0 ? rotations : []);
    if (o.gguf?.length) needed.add('none');
    for (const rotate of needed)
      hessians.set(rotate, collectHessians(spec, mapWeights(source), windows, { rotate }));
  }
  // int8 and w8a8 share their weights: round each (format, rotation, rounding) once.
  const rounded = new Map<string, Record<string, Tensor>>();
  const weightsFor = (quant: Quant, rotate: Rotation, rounding: QualityRow['rounding']) => {
    const key = `${formatOf(quant)}/${rotate}/${rounding}`;
    const h = rounding === 'gptq' ? hessians.get(rotate) : undefined;
    const t = rounded.get(key) ?? roundedThrough(source, formatOf(quant), rotate, h);
    rounded.set(key, t);
    return t;
  };
  const plan = [
    ...o.quants.map((quant) => ({ quant, rounding: 'rtn' as const })),
    ...(o.calibration?.quants ?? []).map((quant) => ({ quant, rounding: 'gptq' as const })),
  ];
  const sums = (): Sums => ({ nll: 0, kld: 0, agree: 0 });
  const configs: {
    quant: QualityRow['quant'];
    rotate: Rotation;
    rounding: QualityRow['rounding'];
    bits: number;
    fallbacks?: GgufFallback[];
    model: ReferenceRunner;
    sums: Sums;
  }[] = plan.flatMap(({ quant, rounding }) =>
    rotations.map((rotate) => {
      const m = model(weightsFor(quant, rotate, rounding));
      if (quant === 'w8a8') m.linearInput = w8a8Inputs(rotate);
      const bits = packedBits(source, formatOf(quant), rotate);
      return { quant, rotate, rounding, bits, model: m, sums: sums() };
    }),
  );
  for (const quant of o.gguf ?? []) {
    const g = await ggufWeights(spec, source, quant, hessians.get('none')!);
    configs.push({ quant, rotate: 'none', rounding: 'imatrix', ...g, model: model(g.tensors), sums: sums() });
  }

  const V = spec.vocabSize;
  let baseNll = 0;
  let tokens = 0;
  const lp = new Float64Array(V);
  const lq = new Float64Array(V);
  for (let c = 0; c < chunks; c++) {
    const chunk = ids.slice(c * CHUNK, (c + 1) * CHUNK);
    const input = [bos, ...chunk.slice(0, -1)];
    const p = base.logitsFor(input);
    const qs = configs.map((cfg) => cfg.model.logitsFor(input));
    chunk.forEach((target, r) => {
      const pTop = logSoftmax(p.subarray(r * V, (r + 1) * V), lp);
      baseNll -= lp[target]!;
      configs.forEach((cfg, i) => {
        const qTop = logSoftmax(qs[i]!.subarray(r * V, (r + 1) * V), lq);
        cfg.sums.nll -= lq[target]!;
        let kl = 0;
        for (let v = 0; v < V; v++) kl += Math.exp(lp[v]!) * (lp[v]! - lq[v]!);
        cfg.sums.kld += kl;
        if (qTop === pTop) cfg.sums.agree++;
      });
    });
    tokens += chunk.length;
    o.onChunk?.(c + 1, chunks);
  }
  const basePpl = Math.exp(baseNll / tokens);
  return {
    model: o.model,
    text: o.text,
    chunks,
    chunks_available: available,
    tokens,
    f16: { ppl: basePpl },
    rows: configs.map(({ quant, rotate, rounding, bits, fallbacks, sums }) => {
      const ppl = Math.exp(sums.nll / tokens);
      return {
        quant,
        rotate,
        rounding,
        bits,
        ppl,
        ppl_ratio: ppl / basePpl,
        kld: sums.kld / tokens,
        top1: sums.agree / tokens,
        ...(fallbacks ? { fallbacks } : {}),
      };
    }),
    seconds: (performance.now() - started) / 1000,
  };
}

/**
 * Bits per weight of every matrix of the model packed as the GPU runner packs it (`*_proj` inputs
 * padded to `packedWidth` of their rotation; the embedding and LM head in the same format): the
 * bytes of codes and scales over the checkpoint's own element count.
 */
function packedBits(tensors: Record<string, Tensor>, format: WeightFormat, rotate: Rotation): number {
  let bytes = 0;
  let weights = 0;
  for (const [name, t] of Object.entries(tensors)) {
    const [rows, cols] = t.shape;
    if (t.shape.length !== 2 || !rows || !cols) continue;
    const r = isRotatedLinear(name) ? rotate : 'none';
    bytes += packedBytes(format, rows, packedWidth(cols, r));
    weights += rows * cols;
  }
  return (8 * bytes) / weights;
}

/**
 * The model as a GGUF of `quant` holds it: the file `exportGguf` writes (which tensors take the
 * type, the mix's recipe, llama.cpp's fallback where a row is not whole blocks, what stays F32,
 * the stored row order), each weight given the diagonal of its calibration Hessian H = Σ x xᵀ as
 * its importance (llama.cpp's imatrix is that diagonal over the token count; the quantisers only
 * weigh columns against each other, so the scale does not matter), then read back through the
 * GGUF loader, which dequantises with llama.cpp's formulas and undoes the stored layout. So the
 * row measures the bytes a user would get. Bits per weight are the file's matrices (every 2-D
 * tensor) as stored; `fallbacks` are the quantised ones whose `ne[0]` is not whole blocks of the
 * type asked for (of 256 for a mix), with the type they got.
 */
async function ggufWeights(
  spec: ModelSpec,
  source: Record<string, Tensor>,
  quant: GgufQuant,
  hessians: ReadonlyMap<string, Float64Array>,
): Promise<{ tensors: Record<string, Tensor>; bits: number; fallbacks: GgufFallback[] }> {
  const importance = (name: string) => {
    const h = hessians.get(name);
    const cols = source[name]?.shape[1];
    if (h === undefined || cols === undefined) return undefined;
    // H is [n, n] over the input padded to n ≥ cols; the padding is not stored.
    const n = Math.round(Math.sqrt(h.length));
    return Float32Array.from({ length: cols }, (_, k) => h[k * n + k]!);
  };
  const list = Object.entries(source).map(([name, t]) => ({ name, shape: t.shape, data: t.data }));
  const bytes = exportGguf(spec, list, quant, [], { importance });
  const file = await openGgufCheckpoint(memoryBytes(bytes, `${quant}.gguf`));
  const block = isGgufMix(quant) ? 256 : GGML_BLOCKS.get(GgmlType[quant])!.elems;
  let bits = 0;
  let weights = 0;
  const fallbacks: GgufFallback[] = [];
  for (const info of file.file.tensors.values()) {
    if (info.ne.length < 2) continue;
    bits += 8 * info.byteLength;
    weights += info.ne.reduce((a, b) => a * b, 1);
    if (info.type !== 0 && info.ne[0]! % block !== 0)
      fallbacks.push({ tensor: info.name, ne: [...info.ne], type: GGML_BLOCKS.get(info.type)!.name });
  }
  return { tensors: await readAllF32(file), bits: bits / weights, fallbacks };
}

/** Writes log-softmax(logits) into `out` (f64) and returns the argmax (lowest id on ties). */
function logSoftmax(logits: Float32Array, out: Float64Array): number {
  let top = 0;
  for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[top]!) top = v;
  const max = logits[top]!;
  let z = 0;
  for (let v = 0; v < logits.length; v++) z += Math.exp(logits[v]! - max);
  const logZ = Math.log(z) + max;
  for (let v = 0; v < logits.length; v++) out[v] = logits[v]! - logZ;
  return top;
}

/** The report as a markdown table (one row per configuration, f16 first). */
export function qualityTable(r: QualityReport): string {
  const lines = [
    `Quantization quality of ${r.model} on ${r.text}: ${r.chunks} of ${r.chunks_available} chunks of ${CHUNK} tokens (${r.tokens} tokens), CPU reference, ${r.seconds.toFixed(0)} s.`,
    '',
    '| format | bits/weight | rotation | rounding | perplexity | ppl ratio | mean KLD (nats) | top-1 agreement |',
    '|---|---|---|---|---|---|---|---|',
    `| f16 | 16 | none | - | ${r.f16.ppl.toFixed(3)} | 1.000 | 0 | 100% |`,
  ];
  for (const row of r.rows)
    lines.push(
      `| ${row.quant} | ${row.bits.toFixed(3)} | ${row.rotate} | ${row.rounding} | ${row.ppl.toFixed(3)} | ${row.ppl_ratio.toFixed(4)} | ${row.kld.toFixed(5)} | ${(row.top1 * 100).toFixed(2)}% |`,
    );
  const gains = calibrationGains(r.rows);
  if (gains.length > 0) lines.push('', ...gains);
  const fallbacks = fallbackNotes(r.rows);
  if (fallbacks.length > 0) lines.push('', ...fallbacks);
  return lines.join('\n');
}

/**
 * The GGUF rows' fallbacks, one line per distinct set (the rows that share it named together):
 * the weights whose rows are not whole blocks of the type asked for (layers folded into
 * `blk.*`), with their dims and the type they were stored as.
 */
function fallbackNotes(rows: readonly QualityRow[]): string[] {
  const byNote = new Map<string, string[]>();
  for (const row of rows) {
    if (!row.fallbacks) continue;
    const groups = new Map<string, number>();
    for (const f of row.fallbacks) {
      const key = `${f.tensor.replace(/^blk\.\d+\./, 'blk.*.')} (ne [${f.ne}]) → ${f.type}`;
      groups.set(key, (groups.get(key) ?? 0) + 1);
    }
    const note =
      groups.size === 0 ? 'none' : [...groups].map(([key, n]) => (n > 1 ? `${n} × ${key}` : key)).join(', ');
    byNote.set(note, [...(byNote.get(note) ?? []), row.quant]);
  }
  if (byNote.size === 0) return [];
  return [
    "GGUF fallbacks (rows that are not whole blocks of the type asked for, stored as llama.cpp's `tensor_type_fallback` says; their bytes are in the bits per weight):",
    ...[...byNote].map(([note, quants]) => `- ${quants.join(', ')}: ${note}.`),
  ];
}

/**
 * One line per calibrated row: its KLD change against the round-to-nearest row of the same format
 * and rotation (the same bytes, so the same bits per weight), and against the better of that
 * format's round-to-nearest rows with or without rotation (the stricter baseline; the bits then
 * differ where rotation pads a width).
 */
function calibrationGains(rows: readonly QualityRow[]): string[] {
  const pct = (a: number, b: number) => `${(100 * (a / b - 1)).toFixed(1)}%`;
  return rows
    .filter((row) => row.rounding === 'gptq')
    .flatMap((row) => {
      const rtn = rows.filter((o) => o.rounding === 'rtn' && o.quant === row.quant);
      const same = rtn.find((o) => o.rotate === row.rotate);
      if (!same) return [];
      const best = rtn.reduce((a, b) => (b.kld < a.kld ? b : a));
      return [
        `${row.quant} calibrated, rotation ${row.rotate}: KLD ${pct(row.kld, same.kld)} against round-to-nearest at the same bits (rotation ${row.rotate}), ${pct(row.kld, best.kld)} against the better round-to-nearest row (rotation ${best.rotate}).`,
      ];
    });
}
