import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import {
  CALIBRATION_WINDOW,
  calibrationWindows,
  collectHessians,
  headHessian,
  headWeightName,
} from '../../src/convert/calibrate.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { rmsNormRef } from '../../src/kernels/norm/rmsnorm.js';
import { attentionBlock } from '../../src/model/blocks/attention/block.js';
import { mlpBlock } from '../../src/model/blocks/mlp/block.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { hadamardRef } from '../../src/quant/hadamard.js';
import { HessianSum } from '../../src/quant/hessian.js';
import { packedWidth, ROTATION_SEED, type Rotation, zeroPad } from '../../src/quant/pack.js';
import { randomWeights, tinySpecs } from '../fixtures/reference.js';
import { randomF32, rng } from '../helpers/random.js';

// GPTQ's calibration statistics: H = Σ x xᵀ per linear input in the packed (padded, rotated) basis,
// collected from the reference forward (src/model/calibrate.ts, src/quant/hessian.ts), and the
// calibration text shipped for the demo target.

/** Σ_t x_t x_tᵀ [n, n] of x [T, width] padded to n and rotated, one token at a time. */
function directGram(x: Float32Array, width: number, rotate: Rotation): Float64Array {
  const T = x.length / width;
  const n = packedWidth(width, rotate);
  let m = zeroPad(x, T, width, T, n);
  if (rotate === 'hadamard') m = hadamardRef(m, T, n, ROTATION_SEED);
  const h = new Float64Array(n * n);
  for (let t = 0; t < T; t++)
    for (let i = 0; i < n; i++)
      for (let j = 0; j < n; j++) h[i * n + j] = h[i * n + j]! + m[t * n + i]! * m[t * n + j]!;
  return h;
}

/** max |a − b| / max |b|. */
function relDiff(a: Float64Array, b: Float64Array): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i]! - b[i]!));
    m = Math.max(m, Math.abs(b[i]!));
  }
  return d / m;
}

/** Random token windows for a tiny spec, each shorter than its maxPositions. */
function randomWindows(spec: ModelSpec, lengths: readonly number[], seed: number): number[][] {
  const next = rng(seed);
  return lengths.map((n) => Array.from({ length: n }, () => Math.floor(next() * spec.vocabSize)));
}

describe('HessianSum', () => {
  it('sums x xᵀ of padded (and rotated) rows over several calls, symmetric', () => {
    for (const rotate of ['none', 'hadamard'] as const) {
      const width = 40; // packs at 48 either way (48 = 12·4 is a Hadamard size)
      const a = randomF32(7 * width, 1);
      const b = randomF32(5 * width, 2, 3);
      const sum = new HessianSum(width, rotate);
      sum.add(a);
      sum.add(b);
      expect(sum.n).toBe(48);
      expect(sum.tokens).toBe(12);
      const h = sum.matrix();
      const both = new Float32Array([...a, ...b]);
      expect(relDiff(h, directGram(both, width, rotate))).toBeLessThan(1e-13);
      for (let i = 0; i < 48; i++) for (let j = 0; j < 48; j++) expect(h[i * 48 + j]).toBe(h[j * 48 + i]);
      // Unrotated, the padded columns 40..47 see only zeros.
      if (rotate === 'none') for (let j = 0; j < 48; j++) expect(h[45 * 48 + j]).toBe(0);
    }
  });
});

describe('collectHessians', () => {
  const spec = tinySpecs.llama; // hidden 32, intermediate 40 (packed at 48), qWidth 32
  const source = randomWeights(spec, 3);
  const windows = randomWindows(spec, [11, 17], 4);

  for (const rotate of ['none', 'hadamard'] as const)
    it(`(${rotate}) keys every *_proj by name, shares one H per input, H = X·Xᵀ of that input`, () => {
      const hessians = collectHessians(spec, source, windows, { rotate });
      expect(hessians.size).toBe(7 * spec.layers + 1); // and the LM head
      for (let l = 0; l < spec.layers; l++) {
        const a = attentionBlock(l).names;
        const m = mlpBlock(l, 'silu').names;
        const [qkv, o, gateUp, down] = [[a.q, a.k, a.v], [a.o], [m.gate, m.up], [m.down]] as const;
        const [q, k, v] = qkv.map((name) => hessians.get(name));
        expect(q).toBe(k);
        expect(q).toBe(v);
        expect(hessians.get(gateUp[0])).toBe(hessians.get(gateUp[1]));
        expect(new Set([q, hessians.get(o[0]), hessians.get(gateUp[0]), hessians.get(down[0])]).size).toBe(4);
        expect(q!.length).toBe(packedWidth(spec.hidden, rotate) ** 2);
        expect(hessians.get(down[0])!.length).toBe(packedWidth(spec.intermediate, rotate) ** 2);
      }

      // One linear's input captured from a second model over the same windows, summed directly.
      const target = mlpBlock(1, 'silu').names.down;
      const model = new ReferenceRunner(spec, source, { capacity: 17 });
      const rows: number[] = [];
      model.linearInput = (x, _width, linears) => {
        if (linears[0] === target) rows.push(...x);
        return x;
      };
      for (const w of windows) model.logitsFor(w);
      const direct = directGram(new Float32Array(rows), spec.intermediate, rotate);
      expect(rows.length).toBe(28 * spec.intermediate);
      expect(relDiff(hessians.get(target)!, direct)).toBeLessThan(1e-13);
    });

  for (const family of ['llama', 'qwen3'] as const)
    it(`keys the LM head's H (${family}: ${tinySpecs[family].tiedEmbeddings ? 'tied to the embedding' : 'its own lm_head'}): the final normed hidden states, unrotated`, () => {
      const s = tinySpecs[family];
      const weights = randomWeights(s, 8);
      const calibration = randomWindows(s, [9, 14], 9);
      const hessians = collectHessians(s, weights, calibration, { rotate: 'hadamard' });
      const name = headWeightName(s);
      expect(name).toBe(s.tiedEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
      // The last block's outputs, normed as the reference does before its head, summed directly.
      const model = new ReferenceRunner(s, weights, { capacity: 14 });
      const rows: number[] = [];
      model.residualHook = { output: (l, x) => l === s.layers - 1 && rows.push(...x) };
      for (const w of calibration) model.logitsFor(w);
      const normed = rmsNormRef(new Float32Array(rows), weights.get('model.norm.weight').data, {
        n: s.hidden,
        eps: s.rmsEps,
      });
      const direct = headHessian(
        directGram(normed, s.hidden, 'none'),
        packedWidth(s.hidden, 'none'),
        s.tiedEmbeddings,
      );
      expect(hessians.get(name)!.length).toBe(packedWidth(s.hidden, 'none') ** 2);
      expect(relDiff(hessians.get(name)!, direct)).toBeLessThan(1e-13);
    });

  it('headHessian adds mean(H_kk)·I for a tied embedding and leaves an untied head alone', () => {
    const h = Float64Array.of(2, 1, 1, 4);
    expect(Array.from(headHessian(Float64Array.from(h), 2, false))).toEqual([2, 1, 1, 4]);
    expect(Array.from(headHessian(Float64Array.from(h), 2, true))).toEqual([5, 1, 1, 7]);
  });

  it('gives symmetric, positive semi-definite matrices (random probes)', () => {
    const next = rng(5);
    const qwen3 = tinySpecs.qwen3; // hidden 24: padded to 32 and rotated
    const calibration = randomWindows(qwen3, [13, 20], 7);
    const hessians = collectHessians(qwen3, randomWeights(qwen3, 6), calibration, { rotate: 'hadamard' });
    const seen = new Set<Float64Array>();
    for (const h of hessians.values()) {
      if (seen.has(h)) continue;
      seen.add(h);
      const n = Math.sqrt(h.length);
      let trace = 0;
      for (let i = 0; i < n; i++) {
        trace += h[i * n + i]!;
        for (let j = 0; j < n; j++) expect(h[i * n + j]).toBe(h[j * n + i]);
      }
      for (let probe = 0; probe < 20; probe++) {
        const p = Array.from({ length: n }, () => 2 * next() - 1);
        let quad = 0;
        let norm = 0;
        for (let i = 0; i < n; i++) {
          norm += p[i]! * p[i]!;
          for (let j = 0; j < n; j++) quad += p[i]! * h[i * n + j]! * p[j]!;
        }
        expect(quad).toBeGreaterThanOrEqual(-1e-12 * trace * norm);
      }
    }
    expect(seen.size).toBe(4 * qwen3.layers + 1);
  });
});

describe('calibrationWindows', () => {
  it('cuts the ids into windows of BOS + up to 255 ids, covering every id once', () => {
    const tokenizer = { encode: (text: string) => Array.from(text, (c) => c.charCodeAt(0)) };
    const text = 'ab'.repeat(300); // 600 ids
    const windows = calibrationWindows(tokenizer, `${text}\n`, 7);
    expect(windows.map((w) => w.length)).toEqual([256, 256, 600 - 2 * 255 + 1]);
    expect(windows.every((w) => w[0] === 7)).toBe(true);
    expect(windows.flatMap((w) => w.slice(1))).toEqual(tokenizer.encode(text));
  });
});

describe('models/kjv-calibration.txt', () => {
  it('shares no line with the held-out text, and fills at least 64 windows of the demo target', async () => {
    const calibration = await readFile('models/kjv-calibration.txt', 'utf8');
    const heldout = new Set((await readFile('models/kjv-heldout.txt', 'utf8')).split('\n').filter(Boolean));
    const lines = calibration.split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThan(400);
    expect(lines.filter((line) => heldout.has(line))).toEqual([]);

    const files = await pathModel('models/kjv-target');
    const opened = await openModel(files);
    await files.close?.();
    const windows = calibrationWindows(opened.tokenizer, calibration, opened.spec.bosId!);
    expect(windows.length).toBeGreaterThanOrEqual(64);
    expect(windows[0]!.length).toBe(CALIBRATION_WINDOW);
  });
});
