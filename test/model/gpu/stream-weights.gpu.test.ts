// Streaming placement: every matrix's GPU buffers are allocated from its shape and format, then
// filled a slice of rows at a time (allocatePlaced, fillPiece, placeWeights). The buffers must be
// bit for bit those of packing the matrix whole and uploading it (packLinear or readPacked, then
// uploadMatrix / concatRows / uploadGatedPair), in every format, rotated or not, padded, stacked
// (q | k | v) and paired (gate | up), with slices that end mid-part and parts forced small.
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../../src/errors.js';
import { memoryBytes } from '../../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { openSafetensors } from '../../../src/formats/safetensors.js';
import { safetensorsReader, type TensorReader } from '../../../src/formats/weft-checkpoint.js';
import { readBuffer } from '../../../src/gpu/buffers.js';
import type { GpuContext } from '../../../src/gpu/device.js';
import { type GpuMatrix, uploadGatedPair, uploadMatrix } from '../../../src/kernels/matmul/matrix.js';
import { type ModelFamily, specFromConfig } from '../../../src/model/families/index.js';
import {
  allocatePlaced,
  destroyWeights,
  fillPiece,
  type GpuWeights,
  type MatrixPlacement,
  placeWeights,
} from '../../../src/model/gpu/weights.js';
import { type OpenedModel, openModel, WEFT_WEIGHTS } from '../../../src/model/load.js';
import { loadsAsStored, placedFormat, placedPad } from '../../../src/model/quantized.js';
import { deriveSizes } from '../../../src/model/spec/spec.js';
import {
  alignedRowStep,
  concatRows,
  packedBytes,
  type QuantizedMatrix,
  type WeightFormat,
} from '../../../src/quant/formats.js';
import {
  isRotatedLinear,
  packedWidth,
  packLinear,
  type Quant,
  type QuantFormat,
  type Rotation,
  type RotationChoice,
  rotationFor,
} from '../../../src/quant/pack.js';
import {
  type FixtureTensor,
  fixtureFiles,
  type GgufVariant,
  ggufFixture,
  randomTensors,
  rng,
  safetensorsBytes,
  tinyConfig,
  weftCheckpointBytes,
} from '../../fixtures/write.js';
import { gpu } from '../../helpers/gpu.js';

const FORMATS: readonly WeightFormat[] = ['f32', 'f16', 'int8', 'q4_0', 'int4', 'int2'];

function randomMatrix(rows: number, cols: number, seed: number): Float32Array {
  const r = rng(seed);
  return Float32Array.from({ length: rows * cols }, () => (r() < 0.01 ? 8 : 1) * (r() - 0.5));
}

/** Every part's row range and the bytes of its buffers, to compare two matrices by. */
async function partBytes(ctx: GpuContext, m: GpuMatrix) {
  const bytes = async (b: GPUBuffer | undefined) =>
    b && { size: b.size, label: b.label, words: new Uint32Array(await readBuffer(ctx, b)) };
  return {
    format: m.format,
    rows: m.rows,
    cols: m.cols,
    bytes: m.bytes,
    gated: m.gated ?? false,
    parts: await Promise.all(
      m.parts.map(async (p) => ({
        row0: p.row0,
        rows: p.rows,
        data: await bytes(p.data),
        scales: await bytes(p.scales),
      })),
    ),
  };
}

async function expectSameMatrix(ctx: GpuContext, got: GpuMatrix, want: GpuMatrix, what: string) {
  const [g, w] = [await partBytes(ctx, got), await partBytes(ctx, want)];
  expect(g.parts.length, `${what}: parts`).toBe(w.parts.length);
  // Word by word first, so a difference names its place (toEqual on typed arrays is slow to print).
  g.parts.forEach((p, i) => {
    const q = w.parts[i]!;
    for (const k of ['data', 'scales'] as const) {
      const a = p[k]?.words;
      const b = q[k]?.words;
      expect(a?.length, `${what} part ${i} ${k} words`).toBe(b?.length);
      if (a && b)
        expect(
          a.findIndex((x, j) => x !== b[j]),
          `${what} part ${i} ${k}: first differing word`,
        ).toBe(-1);
    }
  });
  expect(g, what).toEqual(w);
}

/** A reader with no row reads: placement falls back to one whole readF32 per matrix. */
function wholeOnly(reader: TensorReader): TensorReader {
  return { tensors: reader.tensors, readF32: (name) => reader.readF32(name) };
}

describe('allocatePlaced + fillPiece', () => {
  // K = 64: q, k and v (40, 20, 20 rows) stack in every format; gate and up have the MLP width of
  // the demo draft (344), padded by rows to Ip; down's K is 344 padded; odd has rows that fill
  // no block (its last part keeps the padding).
  const H = 64;
  const I = 344;
  const shapes: Record<string, readonly [number, number]> = {
    'l.self_attn.q_proj.weight': [40, H],
    'l.self_attn.k_proj.weight': [20, H],
    'l.self_attn.v_proj.weight': [20, H],
    'l.mlp.gate_proj.weight': [I, H],
    'l.mlp.up_proj.weight': [I, H],
    'l.mlp.down_proj.weight': [H, I],
    'odd.weight': [37, 80],
  };
  const tensors: FixtureTensor[] = Object.entries(shapes).map(([name, shape], i) => ({
    name,
    shape,
    data: randomMatrix(shape[0], shape[1], 11 + i),
  }));
  const reader = async () =>
    safetensorsReader(await openSafetensors(memoryBytes(safetensorsBytes(tensors, 'BF16'), 'm')));
  // A binding of a third of the matrix (at least one aligned step of rows) forces three or more
  // parts; 800 elements make slices of 12 rows at K = 64 (int: 8 or 12), which parts of a third
  // do not divide, so slices straddle parts; 5000 make one or a few slices per part.
  const binding = (m: readonly MatrixPlacement[], copies = 1) => {
    const { format, pad } = m[0]!;
    const rows = copies === 2 ? pad.rows : m.reduce((n, p) => n + p.pad.rows, 0);
    const step = alignedRowStep(format, pad.cols);
    return (
      copies *
      Math.max(packedBytes(format, 2 * step, pad.cols), Math.floor(packedBytes(format, rows, pad.cols) / 3))
    );
  };

  const placement = (name: string, format: WeightFormat, rotate: Rotation): MatrixPlacement => {
    const [rows, cols] = shapes[name]!;
    const rotation = isRotatedLinear(name) ? rotate : 'none';
    const Ip = packedWidth(I, rotate);
    const mlpIn = name.includes('gate_proj') || name.includes('up_proj');
    return {
      name,
      rows,
      cols,
      pad: { rows: mlpIn ? Ip : rows, cols: packedWidth(cols, rotation) },
      format,
      rotation,
    };
  };
  const whole = async (r: TensorReader, p: MatrixPlacement): Promise<QuantizedMatrix> =>
    packLinear(await r.readF32(p.name), p.rows, p.cols, p.pad, p.format, p.rotation);

  for (const rotate of ['none', 'hadamard'] as const)
    it.each(FORMATS)(`%s, rotation ${rotate}: buffers equal the whole upload's`, async (format) => {
      const ctx = await gpu();
      const rows = await reader();
      // Every other format reads whole (a reader without readRowsF32).
      const r = FORMATS.indexOf(format) % 2 === 0 ? rows : wholeOnly(rows);
      const p = (name: string) => placement(name, format, rotate);
      const qkv = ['q', 'k', 'v'].map((x) => p(`l.self_attn.${x}_proj.weight`));
      const [gate, up, down, odd] = [
        p('l.mlp.gate_proj.weight'),
        p('l.mlp.up_proj.weight'),
        p('l.mlp.down_proj.weight'),
        p('odd.weight'),
      ];
      for (const sliceElements of [800, 5000]) {
        const o = { sliceElements };
        const fills: [string, GpuMatrix, GpuMatrix][] = [];
        // Stacked q | k | v.
        const stacked = allocatePlaced(ctx, qkv, 'qkv', false, binding(qkv));
        let row0 = 0;
        for (const piece of qkv) {
          await fillPiece(ctx, stacked, r, piece, { row0, half: 0 }, o);
          row0 += piece.pad.rows;
        }
        const wholes = await Promise.all(qkv.map((x) => whole(r, x)));
        fills.push(['qkv', stacked, uploadMatrix(ctx, concatRows(wholes), 'qkv', binding(qkv))]);
        // The gated pair.
        const pair = allocatePlaced(ctx, [gate, up], 'gate_up', true, binding([gate, up], 2));
        await fillPiece(ctx, pair, r, gate, { row0: 0, half: 0 }, o);
        await fillPiece(ctx, pair, r, up, { row0: 0, half: 1 }, o);
        const pairWant = uploadGatedPair(
          ctx,
          await whole(r, gate),
          await whole(r, up),
          'gate_up',
          binding([gate, up], 2),
        );
        fills.push(['gate_up', pair, pairWant]);
        // Plain matrices, one padded by columns, one whose last part ends mid-block.
        for (const m of [down, odd]) {
          const got = allocatePlaced(ctx, [m], m.name, false, binding([m]));
          let slices = 0;
          await fillPiece(ctx, got, r, m, { row0: 0, half: 0 }, { sliceElements, onSlice: () => slices++ });
          expect(slices, `${m.name}: slices`).toBeGreaterThan(sliceElements < 1000 ? 2 : 0);
          fills.push([m.name, got, uploadMatrix(ctx, await whole(r, m), m.name, binding([m]))]);
        }
        for (const [what, got, want] of fills) {
          expect(got.parts.length, `${what}: several parts`).toBeGreaterThan(1);
          await expectSameMatrix(ctx, got, want, `${format} ${rotate} ${what} slices of ${sliceElements}`);
          got.destroy();
          want.destroy();
        }
      }
    });

  it('refuses pieces that cannot stack or pair, as concatRows and uploadGatedPair do', async () => {
    const ctx = await gpu();
    const p = (name: string, format: WeightFormat) => placement(name, format, 'none');
    // 37 rows of 80: 2960 elements, not whole int4 super-blocks, so nothing may follow it.
    expect(() => allocatePlaced(ctx, [p('odd.weight', 'int4'), p('odd.weight', 'int4')], 'x')).toThrow(
      InvalidInputError,
    );
    expect(() =>
      allocatePlaced(
        ctx,
        [p('l.self_attn.q_proj.weight', 'int4'), p('l.self_attn.k_proj.weight', 'int8')],
        'x',
      ),
    ).toThrow(InvalidInputError);
    expect(() => allocatePlaced(ctx, [p('odd.weight', 'int8'), p('odd.weight', 'int8')], 'x', true)).toThrow(
      InvalidInputError,
    );
  });
});

/**
 * The weights as the loader placed them before streaming: each matrix packed whole (readPacked as
 * stored, else packLinear of its whole f32), then uploadMatrix, q | k | v by concatRows and gate |
 * up by uploadGatedPair where they allow, else one by one.
 */
async function placeWhole(ctx: GpuContext, opened: OpenedModel, quant: Quant, rotate: RotationChoice) {
  const { spec, weights } = opened;
  const asStored = loadsAsStored(opened.packed, quant, rotate);
  const packed = async (name: string, rows: number, cols: number) => {
    const r = isRotatedLinear(name) ? rotationFor(rotate, cols) : 'none';
    const pad = placedPad(name, rows, cols, rotate);
    const format = placedFormat(weights, name, quant, asStored);
    const stored = await weights.readPacked?.(name, { format, rows: pad.rows, cols: pad.cols, rotation: r });
    return stored ?? packLinear(await weights.readF32(name), rows, cols, pad, format, r);
  };
  const tryOr = <T, U>(f: () => T, g: () => U): T | U => {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof InvalidInputError)) throw e;
      return g();
    }
  };
  const { qWidth, kvWidth } = deriveSizes(spec);
  const [H, I, V] = [spec.hidden, spec.intermediate, spec.vocabSize];
  const embed = uploadMatrix(ctx, await packed('model.embed_tokens.weight', V, H), 'embed');
  const layers: {
    qkv: GpuMatrix | readonly GpuMatrix[];
    o: GpuMatrix;
    gateUp: GpuMatrix | readonly GpuMatrix[];
    down: GpuMatrix;
  }[] = [];
  for (let i = 0; i < spec.layers; i++) {
    const p = `model.layers.${i}`;
    const [q, k, v] = [
      await packed(`${p}.self_attn.q_proj.weight`, qWidth, H),
      await packed(`${p}.self_attn.k_proj.weight`, kvWidth, H),
      await packed(`${p}.self_attn.v_proj.weight`, kvWidth, H),
    ];
    const o = uploadMatrix(ctx, await packed(`${p}.self_attn.o_proj.weight`, H, qWidth), 'o');
    const [gate, up] = [
      await packed(`${p}.mlp.gate_proj.weight`, I, H),
      await packed(`${p}.mlp.up_proj.weight`, I, H),
    ];
    layers.push({
      qkv: tryOr(
        () => uploadMatrix(ctx, concatRows([q, k, v]), 'qkv'),
        () => [q, k, v].map((m) => uploadMatrix(ctx, m, 'x')),
      ),
      o,
      gateUp: tryOr(
        () => {
          if (quant === 'w8a8') throw new InvalidInputError('w8a8');
          return uploadGatedPair(ctx, gate, up, 'gate_up');
        },
        () => [gate, up].map((m) => uploadMatrix(ctx, m, 'x')),
      ),
      down: uploadMatrix(ctx, await packed(`${p}.mlp.down_proj.weight`, H, I), 'down'),
    });
  }
  const lmHead = spec.tiedEmbeddings
    ? embed
    : uploadMatrix(ctx, await packed('lm_head.weight', V, H), 'lm_head');
  return { embed, layers, lmHead };
}

/** Every matrix of `w` equals the whole placement's, buffer for buffer (labels aside). */
async function expectSameWeights(
  ctx: GpuContext,
  w: GpuWeights,
  want: Awaited<ReturnType<typeof placeWhole>>,
  what: string,
) {
  const list = (m: GpuMatrix | readonly GpuMatrix[]) => ('parts' in m ? [m] : [...m]);
  const strip = async (m: GpuMatrix) => {
    const b = await partBytes(ctx, m);
    return {
      ...b,
      parts: b.parts.map((p) => ({
        ...p,
        data: p.data && { ...p.data, label: '' },
        scales: p.scales && { ...p.scales, label: '' },
      })),
    };
  };
  const pairs: [string, GpuMatrix | readonly GpuMatrix[], GpuMatrix | readonly GpuMatrix[]][] = [
    ['embed', w.embed, want.embed],
    ['lm_head', w.lmHead, want.lmHead],
  ];
  // The blocks in forward order: each layer's attention block (its matrices q|k|v, o), then its
  // MLP (gate|up, down).
  w.blocks.forEach((b, j) => {
    const i = Math.floor(j / 2);
    const v = want.layers[i]!;
    const exp = j % 2 === 0 ? [...list(v.qkv), v.o] : [...list(v.gateUp), v.down];
    pairs.push([`${i}.${j % 2 === 0 ? 'attention' : 'mlp'}`, b.matrices, exp]);
  });
  for (const [name, got, exp] of pairs) {
    const [g, e] = [list(got), list(exp)];
    expect(g.length, `${what} ${name}: matrices`).toBe(e.length);
    for (let j = 0; j < g.length; j++)
      expect(await strip(g[j]!), `${what} ${name}[${j}]`).toEqual(await strip(e[j]!));
  }
  // Every matrix a block counts once is one of those compared.
  expect(w.blocks.flatMap((b) => b.matrices).length).toBe(
    want.layers.flatMap((l) => [...list(l.qkv), l.o, ...list(l.gateUp), l.down]).length,
  );
}

/** A tiny llama of `family` with the demo draft's MLP width (344: padded to 352, or further when rotated). */
function paddedMlpFiles(family: ModelFamily): Map<string, Uint8Array> {
  const { files } = fixtureFiles(family, 'bf16', 5);
  const config = { ...tinyConfig(family), intermediate_size: 344 };
  const next = new Map(files);
  next.set('config.json', new TextEncoder().encode(JSON.stringify(config)));
  return next;
}

/** A tiny qwen3 converted to a weft-q checkpoint at `quant` and `rotate`, opened as a model folder. */
async function weftModel(quant: QuantFormat, rotate: 'none' | 'hadamard'): Promise<OpenedModel> {
  const { files } = fixtureFiles('qwen3', 'f32', 4);
  const source = await openModel(memoryModelFiles('m', files));
  const bytes = await weftCheckpointBytes(source.weights, { quant, rotate });
  const weft = new Map(files);
  weft.delete('model.safetensors');
  weft.set(WEFT_WEIGHTS, bytes);
  return openModel(memoryModelFiles('w', weft));
}

/** `reader` with every whole `readF32` recorded (by tensor name) in `read`. */
function recordingWholeReads(reader: TensorReader): { weights: TensorReader; read: string[] } {
  const read: string[] = [];
  const weights: TensorReader = {
    ...reader,
    readF32: (name) => {
      read.push(name);
      return reader.readF32(name);
    },
  };
  return { weights, read };
}

describe('placeWeights streams every matrix into the buffers a whole upload gives', () => {
  it.each([
    ['int4', 'none'],
    ['int2', 'hadamard'],
    ['f16', 'none'],
    ['w8a8', 'auto'],
  ] as const)('safetensors (MLP 344) at %s, rotation %s', async (quant, rotate) => {
    const ctx = await gpu();
    const files = paddedMlpFiles('llama');
    const spec = specFromConfig(JSON.parse(new TextDecoder().decode(files.get('config.json'))));
    files.set('model.safetensors', safetensorsBytes(randomTensors(spec, 9), 'BF16'));
    const opened = await openModel(memoryModelFiles('m', files));
    const events: number[] = [];
    const before = ctx.counter.snapshot();
    // Waits for the device after every 2 KiB written: placing is the same, with bounded staging.
    const w = await placeWeights(ctx, opened, {
      quant,
      rotate,
      sliceElements: 1000,
      uploadBytesInFlight: 2048,
      onProgress: (e) => events.push(e.peakTransientBytes),
    });
    const waits = ctx.counter.snapshot().submits - before.submits;
    const want = await placeWhole(ctx, opened, quant, rotate);
    await expectSameWeights(ctx, w, want, `${quant} ${rotate}`);
    // At most the limit and one slice's packed words (under its transient bytes) written and not
    // yet done; a wait at every 2 KiB of the model's packed bytes.
    expect(w.peakUploadBytes).toBeGreaterThan(0);
    expect(w.peakUploadBytes).toBeLessThan(2048 + w.peakTransientBytes);
    expect(waits).toBeGreaterThan(4);
    // The peak: one slice (≤ 1000 f32 elements rounded up to an aligned step of rows, its padded or
    // rotated copy, its packed words) or a repeated bias, never a whole matrix's f32.
    const { vocabSize: V, hidden: H } = opened.spec;
    expect(w.peakTransientBytes).toBeGreaterThan(0);
    expect(w.peakTransientBytes).toBeLessThan(4 * V * H);
    expect(events.at(-1)).toBe(w.peakTransientBytes);
    expect(events.every((b, i) => i === 0 || b >= events[i - 1]!)).toBe(true);
    destroyWeights(w);
  });

  it('a reader without row reads holds each matrix whole, and says so', async () => {
    const ctx = await gpu();
    const { files } = fixtureFiles('qwen2', 'f32', 3);
    const opened = await openModel(memoryModelFiles('m', files));
    const whole = { ...opened, weights: wholeOnly(opened.weights) };
    const { vocabSize: V, hidden: H } = opened.spec;
    const w = await placeWeights(ctx, whole, { quant: 'int4', rotate: 'none', sliceElements: 1000 });
    await expectSameWeights(ctx, w, await placeWhole(ctx, opened, 'int4', 'none'), 'whole reads');
    expect(w.peakTransientBytes).toBeGreaterThanOrEqual(4 * V * H);
    destroyWeights(w);
    const sliced = await placeWeights(ctx, opened, { quant: 'int4', rotate: 'none', sliceElements: 1000 });
    expect(sliced.peakTransientBytes).toBeLessThan(4 * V * H);
    expect(sliced.peakTransientBytes).toBeLessThan(4 * 2000 + packedBytes('int4', V, H));
    destroyWeights(sliced);
  });

  it.each(['f32', 'f16', 'int8', 'int4', 'int2'] as const)(
    'weft-q at %s (hadamard): copied a slice of stored words at a time',
    async (quant) => {
      const ctx = await gpu();
      const opened = await weftModel(quant, 'hadamard');
      expect(opened.packed).toEqual({ format: quant, rotation: 'hadamard' });
      // Only vectors are read as f32: every matrix is copied as stored.
      const { weights, read } = recordingWholeReads(opened.weights);
      const w = await placeWeights(
        ctx,
        { ...opened, weights },
        { quant, rotate: 'hadamard', sliceElements: 1000 },
      );
      expect(read.filter((name) => opened.weights.tensors.get(name)!.shape.length === 2)).toEqual([]);
      expect(read.length).toBeGreaterThan(0);
      await expectSameWeights(ctx, w, await placeWhole(ctx, opened, quant, 'hadamard'), `weft-q ${quant}`);
      destroyWeights(w);
    },
  );

  it.each([
    ['int4', 'hadamard', 'int8', 'none'],
    ['int2', 'none', 'f16', 'hadamard'],
    ['f16', 'hadamard', 'int4', 'hadamard'],
  ] as const)(
    'weft-q stored at %s (%s), placed at %s (%s): decoded a slice of rows at a time',
    async (stored, storedRotate, quant, rotate) => {
      const ctx = await gpu();
      const opened = await weftModel(stored, storedRotate);
      // No matrix is read whole: each is dequantized from its stored words a slice of rows at a time.
      const { weights, read } = recordingWholeReads(opened.weights);
      const w = await placeWeights(ctx, { ...opened, weights }, { quant, rotate, sliceElements: 1000 });
      expect(read.filter((name) => opened.weights.tensors.get(name)!.shape.length === 2)).toEqual([]);
      const { vocabSize: V, hidden: H } = opened.spec;
      expect(w.peakTransientBytes).toBeLessThan(4 * V * H);
      await expectSameWeights(
        ctx,
        w,
        await placeWhole(ctx, opened, quant, rotate),
        `weft-q ${stored} as ${quant}`,
      );
      destroyWeights(w);
    },
  );

  it.each([
    ['llama', 'Q4_0', 'q4_0'],
    ['llama', 'Q8_0', 'int8'],
    ['llama', 'Q4_K', 'int4'],
    ['qwen2', 'F16', 'f16'],
    ['qwen3', 'F32', 'f32'],
    ['llama', 'Q6_K', 'int4'],
    ['llama', 'Q6_K', 'q6_k'],
    ['qwen3', 'Q5_0', 'q5_0'],
  ] as const)(
    'GGUF %s %s placed as %s: stored blocks copied by rows, others decoded by rows',
    async (family, variant, quant) => {
      const ctx = await gpu();
      const { bytes } = ggufFixture(family, variant as GgufVariant, 6);
      const opened = await openModel(memoryModelFiles('g', new Map([['model.gguf', bytes]])));
      const w = await placeWeights(ctx, opened, { quant, rotate: 'none', sliceElements: 1000 });
      // Whatever was decoded to f32 was decoded a slice at a time (a file placed at another format
      // than its own; F16 and F32 matrices are read by rows), and blocks stored in the chosen
      // format not at all (q6_k: slices on pairs of super-blocks, q5_0: on chunks of 128).
      const { vocabSize: V, hidden: H } = opened.spec;
      const stats = { ...opened.weights.stats! };
      expect(stats.largestF32).toBeLessThan(V * H);
      if (opened.packed?.format === quant) expect(stats.largestF32).toBeLessThan(H * H);
      await expectSameWeights(ctx, w, await placeWhole(ctx, opened, quant, 'none'), `gguf ${variant}`);
      destroyWeights(w);
    },
  );
});
