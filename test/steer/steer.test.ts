import { describe, expect, it } from 'vitest';
import { parseGenerateArgs } from '../../src/cli/main.js';
import { createEngine } from '../../src/engine/create.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { type SteerPlan, steerHook, steerRowsRef } from '../../src/kernels/steer/steer.js';
import { modelChecksum, openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { SteerMismatchError } from '../../src/steer/errors.js';
import { readSteerFile, type SteerFile, writeSteerFile } from '../../src/steer/format.js';
import { lastTokenResiduals, measureDirections } from '../../src/steer/measure.js';
import { resolveSteer } from '../../src/steer/plan.js';
import { basis, deadCoordinateModel } from '../fixtures/steer.js';
import { fixtureFiles, rng } from '../fixtures/write.js';

function randomUnit(H: number, seed: number): Float32Array {
  const r = rng(seed);
  const v = Float32Array.from({ length: H }, () => r() - 0.5);
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}

const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0);

async function reference(files: ReturnType<typeof memoryModelFiles>) {
  const opened = await openModel(files);
  return new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), { capacity: 64 });
}

function fixture(seed: number) {
  return memoryModelFiles(`llama-${seed}`, fixtureFiles('llama', 'f32', seed).files);
}

function steerFile(hidden: number, checksum: string, extra: Partial<SteerFile> = {}): Uint8Array {
  return writeSteerFile({
    hidden,
    modelChecksum: checksum,
    layers: new Map([[1, randomUnit(hidden, 3)]]),
    shared: randomUnit(hidden, 4),
    defaultLayers: [1],
    mode: 'ablate',
    scale: 2,
    ...extra,
  });
}

describe('steering kernel reference', () => {
  it('ablate removes the component along r; add adds scale·r', () => {
    const r = randomUnit(16, 1);
    const x = Float32Array.from({ length: 48 }, (_, i) => Math.sin(i));
    const ablated = x.slice();
    steerRowsRef(ablated, r, 'ablate', 123);
    for (let t = 0; t < 3; t++)
      expect(Math.abs(dot(ablated.subarray(t * 16, t * 16 + 16), r))).toBeLessThan(1e-6);
    const added = x.slice();
    steerRowsRef(added, r, 'add', 2.5);
    added.forEach((v, i) => {
      expect(v).toBeCloseTo(x[i]! + 2.5 * r[i % 16]!, 6);
    });
  });
});

describe('steering file', () => {
  it('round-trips vectors and metadata', async () => {
    const bytes = steerFile(32, 'a'.repeat(64));
    const f = await readSteerFile(bytes, 'x.safetensors');
    expect(f.hidden).toBe(32);
    expect(f.modelChecksum).toBe('a'.repeat(64));
    expect(Array.from(f.layers.get(1)!)).toEqual(Array.from(randomUnit(32, 3)));
    expect(Array.from(f.shared!)).toEqual(Array.from(randomUnit(32, 4)));
    expect(f.defaultLayers).toEqual([1]);
    expect([f.mode, f.scale]).toEqual(['ablate', 2]);
  });

  it('rejects malformed files naming the field', async () => {
    const notUnit = steerFile(8, 'b'.repeat(64), {
      shared: undefined,
      layers: new Map([[0, new Float32Array(8).fill(1)]]),
    });
    await expect(readSteerFile(notUnit, 'n.safetensors')).rejects.toThrow(/steer\.layer\.0.*unit vector/);
    const badMode = steerFile(8, 'b'.repeat(64), { mode: 'zap' as 'add' });
    await expect(readSteerFile(badMode, 'm.safetensors')).rejects.toBeInstanceOf(ModelFormatError);
    await expect(readSteerFile(steerFile(8, 'nope'), 'c.safetensors')).rejects.toThrow(/model_checksum/);
  });

  it('a file measured on another model is refused (checksum, hidden size)', async () => {
    const a = fixture(7);
    const b = fixture(8);
    const { spec } = await openModel(a);
    const sumA = await modelChecksum(a);
    expect(await modelChecksum(b)).not.toBe(sumA);
    expect(await modelChecksum(fixture(7))).toBe(sumA);
    const file = steerFile(spec.hidden, sumA);
    await expect(resolveSteer({ file }, spec, sumA)).resolves.toBeDefined();
    const err = await createEngine({
      model: b,
      device: 'cpu',
      steer: { file, fileName: 'a.safetensors' },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SteerMismatchError);
    expect(err).toMatchObject({ file: 'a.safetensors', field: 'model_checksum', found: sumA });
    const wide = steerFile(spec.hidden * 2, sumA);
    await expect(resolveSteer({ file: wide, fileName: 'w' }, spec, sumA)).rejects.toMatchObject({
      field: 'hidden',
      found: spec.hidden * 2,
      expected: spec.hidden,
    });
  });
});

describe('steering in the reference forward', () => {
  it('after ablation the hidden state has no component along r at the chosen layers', async () => {
    const model = await reference(fixture(7));
    const H = model.spec.hidden;
    const r = randomUnit(H, 11);
    const plan: SteerPlan = { mode: 'ablate', scale: 1, inputs: true, vectors: [undefined, r] };
    const seen: number[] = [];
    const steer = steerHook(plan);
    model.residualHook = {
      input: (l, x) => steer.input(l, x),
      output: (l, x) => {
        steer.output(l, x);
        for (let t = 0; t < x.length / H; t++) {
          const p = Math.abs(dot(x.subarray(t * H, (t + 1) * H), r));
          if (l === 1) expect(p).toBeLessThan(1e-5);
          else seen.push(p);
        }
      },
    };
    model.logitsFor([5, 17, 99, 3, 250, 11]);
    // Unsteered layers do project on r: the check above is not vacuous.
    expect(Math.max(...seen)).toBeGreaterThan(1e-2);
  });

  it('ablating a direction the residual stream never uses leaves logits bit-identical', async () => {
    const c = 5;
    const { spec, files } = deadCoordinateModel('llama', c);
    const model = await reference(files);
    const ids = [5, 17, 99, 3, 250, 11, 42];
    const plain = model.logitsFor(ids);
    const vectors = Array.from({ length: spec.layers }, () => basis(spec.hidden, c));
    model.residualHook = steerHook({ mode: 'ablate', scale: 1, inputs: true, vectors });
    expect(Array.from(model.logitsFor(ids))).toEqual(Array.from(plain));
  });

  it('measures a unit direction along which the positive set sits higher', async () => {
    const model = await reference(fixture(7));
    const pos = [
      [5, 6, 7],
      [5, 9, 7, 8],
    ];
    const neg = [
      [100, 200, 300],
      [101, 201],
    ];
    const { vectors, norms } = measureDirections(model, pos, neg, [0, 1]);
    for (const l of [0, 1]) {
      const r = vectors.get(l)!;
      expect(Math.hypot(...r)).toBeCloseTo(1, 5);
      const proj = (ids: number[]) => dot(lastTokenResiduals(model, ids, [l]).get(l)!, r);
      const gap = (proj(pos[0]!) + proj(pos[1]!)) / 2 - (proj(neg[0]!) + proj(neg[1]!)) / 2;
      expect(gap).toBeCloseTo(norms.get(l)!, 3);
    }
  });
});

describe('steer options', () => {
  it('resolves vectors, layers and defaults', async () => {
    const { spec } = await openModel(fixture(7));
    const H = spec.hidden;
    const plan = await resolveSteer({ vectors: { shared: Array(H).fill(2) }, mode: 'add', scale: 3 }, spec);
    expect(plan.vectors.every((v) => v && Math.abs(v[0]! - 1 / Math.sqrt(H)) < 1e-7)).toBe(true);
    expect([plan.mode, plan.scale, plan.inputs]).toEqual(['add', 3, false]);
    const one = await resolveSteer({ vectors: { layers: { 1: Array(H).fill(1) } } }, spec);
    expect(one.vectors.map((v) => v !== undefined)).toEqual(
      Array.from({ length: spec.layers }, (_, l) => l === 1),
    );
    await expect(resolveSteer({ vectors: { layers: { 0: [1, 2] } } }, spec)).rejects.toThrow(/hidden size/);
    await expect(
      resolveSteer({ vectors: { layers: { 0: Array(H).fill(1) } }, layers: [1] }, spec),
    ).rejects.toThrow(/no vector for layer 1/);
  });

  it('weft generate parses --steer options', () => {
    const a = parseGenerateArgs([
      '--model',
      'm',
      '--prompt',
      'x',
      '--steer',
      'f.safetensors',
      '--steer-mode',
      'add',
      '--steer-scale',
      '4',
    ]);
    expect(a.steer).toEqual({
      file: 'f.safetensors',
      mode: 'add',
      scale: 4,
      layers: undefined,
      inputs: false,
    });
    expect(() => parseGenerateArgs(['--model', 'm', '--prompt', 'x', '--steer-mode', 'add'])).toThrow(
      /--steer-mode needs --steer FILE/,
    );
    expect(() =>
      parseGenerateArgs(['--model', 'm', '--prompt', 'x', '--steer', 'f', '--steer-mode', 'x']),
    ).toThrow(/ablate, add/);
  });
});
