// Cost of GPTQ calibration on the CPU (issue 18): collectHessians over calibration windows, then
// gptqCodes on every linear, with a stand-in grid (symmetric int4, one scale per 32 weights of a row)
// because the real grids come with the K-quant formats. Also reports how much GPTQ lowers each
// linear's output error Σ_r (w_r − ŵ_r)ᵀ H (w_r − ŵ_r) against round-to-nearest on the same grid, on
// the calibration inputs and on held-out inputs (H collected the same way from the held-out text).
import { readFile } from 'node:fs/promises';
import { calibrationWindows, collectHessians } from '../src/convert/calibrate.js';
import { pathModel } from '../src/formats/io/node-file.js';
import { openModel } from '../src/model/load.js';
import { mapWeights, readAllF32 } from '../src/model/weights.js';
import { gptqCodes, type RoundingGrid } from '../src/quant/gptq.js';
import { hadamardRef } from '../src/quant/hadamard.js';
import { isRotatedLinear, packedWidth, ROTATION_SEED, type Rotation, zeroPad } from '../src/quant/pack.js';

/** Options of {@link measureCalibration}. */
export interface CalibrationBenchOptions {
  model: string;
  text: string;
  /** Windows of 256 positions to run, from the start of the text (at most all of them). */
  windows: number;
  /** Held-out text, and how many of its windows measure the output error out of sample. */
  heldout: string;
  heldoutWindows: number;
  rotate: Rotation;
  onWindow?: (done: number, total: number) => void;
}

/** One linear: its GPTQ time and output error against round-to-nearest's. */
export interface LinearRow {
  name: string;
  rows: number;
  cols: number;
  seconds: number;
  /** GPTQ's output error over RTN's on the calibration inputs (lower is better). */
  error_ratio: number;
  /** The same on held-out inputs. */
  heldout_error_ratio: number;
}

/** The benchmark's result. */
export interface CalibrationReport {
  model: string;
  text: string;
  rotate: Rotation;
  windows: number;
  windows_available: number;
  tokens: number;
  hessian_seconds: number;
  gptq_seconds: number;
  linears: LinearRow[];
}

/** Times collectHessians and gptqCodes over every linear of `o.model`. */
export async function measureCalibration(o: CalibrationBenchOptions): Promise<CalibrationReport> {
  const files = await pathModel(o.model);
  const opened = await openModel(files);
  const { spec } = opened;
  const tensors = await readAllF32(opened.weights);
  await files.close?.();
  if (spec.bosId === undefined) throw new Error(`${o.model}: the model has no BOS id`);
  const text = await readFile(o.text, 'utf8');
  const all = calibrationWindows(opened.tokenizer, text, spec.bosId);
  const windows = all.slice(0, o.windows);

  const started = performance.now();
  const hessians = collectHessians(spec, mapWeights(tensors), windows, {
    rotate: o.rotate,
    onWindow: o.onWindow,
  });
  const hessianSeconds = (performance.now() - started) / 1000;
  const heldoutText = await readFile(o.heldout, 'utf8');
  const heldout = collectHessians(
    spec,
    mapWeights(tensors),
    calibrationWindows(opened.tokenizer, heldoutText, spec.bosId).slice(0, o.heldoutWindows),
    { rotate: o.rotate },
  );

  const linears: LinearRow[] = [];
  let gptqSeconds = 0;
  for (const [name, h] of hessians) {
    const [rows, cols] = tensors[name]!.shape as [number, number];
    // The matrix packLinear quantizes: padded, rotated on the input side when rotating (the
    // `*_proj` linears; the LM head, keyed too, is never rotated).
    const rotate = isRotatedLinear(name) ? o.rotate : 'none';
    const n = packedWidth(cols, rotate);
    let w = zeroPad(tensors[name]!.data, rows, cols, rows, n);
    if (rotate === 'hadamard') w = hadamardRef(w, rows, n, ROTATION_SEED);
    const grid = int4Grid(w, rows, n);
    const t0 = performance.now();
    const codes = gptqCodes(w, rows, n, h, grid);
    const seconds = (performance.now() - t0) / 1000;
    gptqSeconds += seconds;
    const rtn = Int32Array.from(w, (x, i) =>
      Math.min(Math.max(Math.round(x / grid.scaleAt(i)), grid.lo), grid.hi),
    );
    const ratio = (hs: Float64Array) =>
      outputError(w, codes, grid, hs, rows, n) / outputError(w, rtn, grid, hs, rows, n);
    linears.push({
      name,
      rows,
      cols,
      seconds,
      error_ratio: ratio(h),
      heldout_error_ratio: ratio(heldout.get(name)!),
    });
  }
  return {
    model: o.model,
    text: o.text,
    rotate: o.rotate,
    windows: windows.length,
    windows_available: all.length,
    tokens: windows.reduce((a, w) => a + w.length, 0),
    hessian_seconds: hessianSeconds,
    gptq_seconds: gptqSeconds,
    linears,
  };
}

/** Symmetric int4 in [−8, 7], one scale max|w| / 7 per 32 weights of a row (cols a multiple of 16). */
function int4Grid(w: Float32Array, rows: number, cols: number): RoundingGrid {
  const group = cols % 32 === 0 ? 32 : 16;
  const groups = cols / group;
  const scales = new Float32Array(rows * groups);
  for (let g = 0; g < scales.length; g++) {
    let m = 0;
    for (let i = g * group; i < (g + 1) * group; i++) m = Math.max(m, Math.abs(w[i]!));
    scales[g] = m / 7;
  }
  return { lo: -8, hi: 7, scaleAt: (i) => scales[Math.floor(i / group)]!, offsetAt: () => 0 };
}

/** Σ_r (w_r − ŵ_r)ᵀ H (w_r − ŵ_r): the squared output error over the calibration inputs. */
function outputError(
  w: Float32Array,
  codes: Int32Array,
  grid: RoundingGrid,
  h: Float64Array,
  rows: number,
  n: number,
): number {
  const d = new Float64Array(n);
  let total = 0;
  for (let r = 0; r < rows; r++) {
    for (let k = 0; k < n; k++) {
      const i = r * n + k;
      d[k] = w[i]! - Math.fround(grid.scaleAt(i) * codes[i]! - grid.offsetAt(i));
    }
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (let j = 0; j < n; j++) s += h[i * n + j]! * d[j]!;
      total += d[i]! * s;
    }
  }
  return total;
}
