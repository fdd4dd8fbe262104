// `weft convert` / `weft export-gguf` through their CLI functions on the fixture checkpoints, and
// openModel on what they write: schemes, metadata, checksums, packed bits, argument errors, and
// that a failed conversion leaves nothing behind.
import { truncateSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConvertArgs, parseExportGgufArgs, runConvert, runExportGguf } from '../../src/cli/convert.js';
import { calibrationWindows, collectHessians } from '../../src/convert/calibrate.js';
import { exportGguf } from '../../src/convert/gguf-export.js';
import { createEngine } from '../../src/engine/create.js';
import { InvalidInputError } from '../../src/errors.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { type ModelFiles, memoryModelFiles, urlModelFiles } from '../../src/formats/io/files.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openSafetensors, writeSafetensors } from '../../src/formats/safetensors.js';
import { linearPad, openWeftCheckpoint, sourceChecksum } from '../../src/formats/weft-checkpoint.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import {
  configFromSpec,
  ggufTensorName,
  specFromConfig,
  storedForm,
} from '../../src/model/families/index.js';
import { storedValues } from '../../src/model/families/stored.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { weightShapes } from '../../src/model/tensors.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { dequantize, quantize } from '../../src/quant/formats.js';
import { GGML_BLOCKS, GgmlType, quantizeGgml } from '../../src/quant/ggml/blocks.js';
import { hadamardRef } from '../../src/quant/hadamard.js';
import {
  isRotatedLinear,
  packLinear,
  type Quant,
  ROTATION_SEED,
  type Rotation,
  zeroPad,
} from '../../src/quant/pack.js';
import {
  ggufFixture,
  randomTensors,
  roundTrip,
  sameF32,
  tinyConfig,
  tinyQwen35TextConfig,
} from '../fixtures/write.js';
import { writeFixtureDir } from '../fixtures/write-dir.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'weft-convert-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const quiet = () => {};
const FAMILIES: ModelFamily[] = ['llama', 'qwen2', 'qwen3'];

/** Converts `src` through the CLI functions and opens the result. */
async function convertAndOpen(src: string, out: string, extra: string[]) {
  const lines: string[] = [];
  await runConvert(parseConvertArgs([src, out, ...extra]), (l) => lines.push(l));
  const files = await pathModel(out);
  const opened = await openModel(files);
  return { opened, files, lines };
}

/** Every packed matrix equals packLinear of the source, and the reader's f32 view has HF shapes. */
async function expectRunnerPacking(
  src: string,
  out: string,
  quant: 'int8' | 'int4' | 'int2',
  rotate: Rotation,
): Promise<void> {
  const srcFiles = await pathModel(src);
  const source = await openModel(srcFiles);
  const { opened, files, lines } = await convertAndOpen(src, out, [
    '--quant',
    quant,
    ...(rotate === 'none' ? [] : ['--rotate', rotate]),
  ]);
  expect(lines.at(-1)).toMatch(/^weft convert: wrote .* \(\d+\.\d MiB/);
  expect(opened.format).toBe('weft-q');
  expect(opened.packed).toEqual({ format: quant, rotation: rotate });
  expect(opened.spec).toEqual(source.spec);
  for (const [name, shape] of weightShapes(source.spec)) {
    expect(opened.weights.tensors.get(name)?.shape).toEqual(shape);
    const [rows = 0, cols = 0] = shape;
    if (shape.length !== 2) {
      expect(sameF32(await opened.weights.readF32(name), await source.weights.readF32(name))).toBeUndefined();
      continue;
    }
    const r = isRotatedLinear(name) ? rotate : 'none';
    const pad = linearPad(name, rows, cols, r);
    const want = packLinear(await source.weights.readF32(name), rows, cols, pad, quant, r);
    const got = await opened.weights.readPacked?.(name, { format: quant, ...pad, rotation: r });
    expect(got).toEqual(want);
    // Another format or rotation is not served from the file: the runner packs those itself.
    expect(await opened.weights.readPacked?.(name, { format: 'f16', ...pad, rotation: r })).toBeUndefined();
  }
  await files.close?.();
  await srcFiles.close?.();
}

describe.each(FAMILIES)('weft convert, %s', (family) => {
  it.each(['int8', 'int4', 'int2'] as const)(
    '%s: packed like the GPU runner, small files copied, source checksum recorded',
    async (quant) => {
      const src = join(dir, `${family}-src`);
      await writeFixtureDir(src, family, 'sharded', 5);
      const out = join(dir, `${family}-${quant}`);
      await expectRunnerPacking(src, out, quant, 'none');
      for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'])
        expect(await readFile(join(out, f), 'utf8')).toBe(await readFile(join(src, f), 'utf8'));
      expect((await readdir(out)).sort()).toEqual(
        [
          'config.json',
          'generation_config.json',
          WEFT_WEIGHTS,
          'tokenizer.json',
          'tokenizer_config.json',
        ].sort(),
      );
      // The checksum covers the source's content, whatever its layout (here: two BF16 shards).
      const srcFiles = await pathModel(src);
      const want = await sourceChecksum((await openModel(srcFiles)).weights);
      await srcFiles.close?.();
      const ck = await openSafetensors(memoryBytes(await readFile(join(out, WEFT_WEIGHTS)), WEFT_WEIGHTS));
      expect(ck.metadata).toMatchObject({
        format: 'weft-q',
        version: '3',
        rotation: 'none',
        source_sha256: want,
      });
      await rm(src, { recursive: true, force: true });
    },
  );
});

describe('weft convert --rotate hadamard', () => {
  it.each(FAMILIES)(
    '%s int4: linears packed as W·Rᵀ exactly as packLinear does, seed recorded',
    async (family) => {
      const src = join(dir, `rot-${family}`);
      await writeFixtureDir(src, family, 'f32', 6);
      const out = join(dir, `rot-${family}-int4`);
      await expectRunnerPacking(src, out, 'int4', 'hadamard');
      const ck = await openSafetensors(memoryBytes(await readFile(join(out, WEFT_WEIGHTS)), WEFT_WEIGHTS));
      expect(ck.metadata.rotation).toBe('hadamard');
      expect(ck.metadata.rotation_seed).toMatch(/^\d+$/);
      // readF32 undoes the rotation: the values stay within int4's rounding of the source.
      const files = await pathModel(out);
      const opened = await openModel(files);
      const name = 'model.layers.1.mlp.down_proj.weight';
      const got = await opened.weights.readF32(name);
      const srcFiles = await pathModel(src);
      const want = await (await openModel(srcFiles)).weights.readF32(name);
      await srcFiles.close?.();
      let err = 0;
      for (let i = 0; i < want.length; i++) err = Math.max(err, Math.abs(got[i]! - want[i]!));
      expect(err).toBeGreaterThan(0);
      expect(err).toBeLessThan(0.5);
      await files.close?.();
    },
  );
});

describe('weft convert from GGUF', () => {
  it.each(['F16', 'Q8_0'] as const)('%s: spec, tokenizer and weights come from the file', async (variant) => {
    const { bytes, spec } = ggufFixture('qwen2', variant, 8);
    const gguf = join(dir, `qwen2-${variant}.gguf`);
    await writeFile(gguf, bytes);
    const ggufFiles = await pathModel(gguf);
    const source = await openModel(ggufFiles);
    expect(source.format).toBe('gguf');
    expect({ ...source.spec, eosIds: [], bosId: undefined }).toEqual({
      ...spec,
      eosIds: [],
      bosId: undefined,
    });
    const out = join(dir, `from-gguf-${variant}`);
    const { opened, files } = await convertAndOpen(gguf, out, ['--quant', 'int8']);
    expect(opened.spec).toEqual(source.spec);
    const text = 'the cat sat on the mat';
    expect(opened.tokenizer.encode(text)).toEqual(source.tokenizer.encode(text));
    expect(opened.tokenizer.encode(text).length).toBeGreaterThan(3);
    const name = 'model.layers.0.self_attn.q_proj.weight';
    const [rows = 0, cols = 0] = opened.weights.tensors.get(name)!.shape;
    const want = packLinear(await source.weights.readF32(name), rows, cols, { rows, cols }, 'int8', 'none');
    const got = await opened.weights.readPacked?.(name, { format: 'int8', rows, cols, rotation: 'none' });
    expect(got?.data).toEqual(want.data);
    await files.close?.();
    await ggufFiles.close?.();
  });

  it('a config written from a spec reads back as the same spec (llama with Llama 3 RoPE scaling)', () => {
    const spec = specFromConfig(tinyConfig('llama'));
    expect(spec.rope.scaling).toBeDefined();
    expect(specFromConfig(configFromSpec(spec))).toEqual(spec);
    const qwen3 = specFromConfig(tinyConfig('qwen3'));
    expect(specFromConfig(configFromSpec(qwen3))).toEqual(qwen3);
  });
});

describe('openModel on a GGUF file', () => {
  it('a .gguf name, in memory or in a folder as model.gguf, loads spec, tokenizer and HF tensors', async () => {
    const { bytes, spec, tensors } = ggufFixture('llama', 'F16', 9);
    const named = await openModel(memoryModelFiles('tiny.gguf', new Map([['tiny.gguf', bytes]])));
    const inFolder = await openModel(memoryModelFiles('folder', new Map([['model.gguf', bytes]])));
    for (const opened of [named, inFolder]) {
      expect(opened.format).toBe('gguf');
      expect(opened.spec.hidden).toBe(spec.hidden);
      expect(opened.spec.rope).toEqual(spec.rope);
      // F16 values, llama Q/K rows un-permuted back to HF order.
      for (const t of tensors) {
        const want = t.shape.length === 2 ? roundTrip(t, 'F16') : t.data;
        expect(sameF32(await opened.weights.readF32(t.name), want), t.name).toBeUndefined();
      }
    }
    expect(named.tokenizer.encode('the sat')).toEqual(inFolder.tokenizer.encode('the sat'));
  });
});

describe('weft export-gguf', () => {
  it('writes a GGUF that loads with the same spec, tokenizer and (F16-rounded) tensors', async () => {
    const src = join(dir, 'export-src');
    const { tensors } = await writeFixtureDir(src, 'qwen3', 'f32', 10);
    const out = join(dir, 'export.gguf');
    const lines: string[] = [];
    await runExportGguf(parseExportGgufArgs([src, out, '--type', 'f16']), (l) => lines.push(l));
    expect(lines[0]).toMatch(/wrote .*export\.gguf/);
    const srcFiles = await pathModel(src);
    const source = await openModel(srcFiles);
    const files = await pathModel(out);
    const opened = await openModel(files);
    // GGUF lists the stop ids tokenizer EOS first.
    const sorted = (ids: readonly number[]) => [...ids].sort((a, b) => a - b);
    expect({ ...opened.spec, eosIds: sorted(opened.spec.eosIds) }).toEqual({
      ...source.spec,
      eosIds: sorted(source.spec.eosIds),
    });
    const text = 'the cat<|im_end|> on the mat';
    expect(opened.tokenizer.encode(text)).toEqual(source.tokenizer.encode(text));
    for (const t of tensors) {
      const want = t.shape.length === 2 ? roundTrip(t, 'F16') : t.data;
      expect(sameF32(await opened.weights.readF32(t.name), want), t.name).toBeUndefined();
    }
    await files.close?.();
    await srcFiles.close?.();
  });
});

describe('weft export-gguf --type q4_k_m', () => {
  it('writes llama-quantize’s per-tensor types, falling back where a row is no whole super-block', async () => {
    // qwen3's tiny fixture: rows of 64 (hidden) and 96 (MLP), no whole super-block of 256, and a
    // tied embedding; 2 layers, so layer 1's attn_v and ffn_down want Q6_K (use_more_bits).
    const src = join(dir, 'mix-src');
    await writeFixtureDir(src, 'qwen3', 'f32', 12);
    const out = join(dir, 'mix.gguf');
    const args = parseExportGgufArgs([src, out, '--type', 'q4_k_m']);
    expect(args.type).toBe('Q4_K_M');
    await runExportGguf(args, quiet);
    const file = await openGguf(memoryBytes(new Uint8Array(await readFile(out)), 'mix.gguf'));
    const type = (name: string) => GGML_BLOCKS.get(file.tensors.get(name)!.type)!.name;
    // Q6_K → Q8_0 and Q4_K → Q5_0 (tensor_type_fallback); the tied embedding Q8_0 (its rule).
    expect(type('token_embd.weight')).toBe('Q8_0');
    expect([type('blk.1.attn_v.weight'), type('blk.1.ffn_down.weight')]).toEqual(['Q8_0', 'Q8_0']);
    expect([type('blk.0.attn_v.weight'), type('blk.0.ffn_down.weight')]).toEqual(['Q5_0', 'Q5_0']);
    expect([type('blk.0.attn_q.weight'), type('blk.1.ffn_up.weight')]).toEqual(['Q5_0', 'Q5_0']);
    expect(type('blk.0.attn_norm.weight')).toBe('F32');
    const opened = await openModel(await pathModel(out));
    expect(opened.packed).toEqual({ format: 'q5_0', rotation: 'none' });
  });
});

describe('weft export-gguf --calibrate', () => {
  it('weighs each weight’s columns by their energy on the text (diag H), records it, and warns without it', async () => {
    const src = join(dir, 'iq-src');
    const { tensors } = await writeFixtureDir(src, 'llama', 'f32', 14);
    const textFile = join(dir, 'iq-cal.txt');
    const text = 'In the beginning God created the heaven and the earth. '.repeat(12);
    await writeFile(textFile, text);
    const out = join(dir, 'iq.gguf');
    const args = parseExportGgufArgs([src, out, '--type', 'iq2_xs', '--calibrate', textFile]);
    expect(args).toMatchObject({ type: 'IQ2_XS', calibrate: textFile });
    const lines: string[] = [];
    await runExportGguf(args, (l) => lines.push(l));
    expect(lines.some((l) => /^weft export-gguf: calibrate \d+%/.test(l))).toBe(true);
    expect(lines.at(-1)).toContain(`calibrated on ${textFile}`);
    expect(lines.some((l) => l.includes('warning'))).toBe(false);

    // The statistics the exporter measured: H of every linear's input on the same windows.
    const srcFiles = await pathModel(src);
    const source = await openModel(srcFiles);
    const windows = calibrationWindows(source.tokenizer, text, source.spec.bosId!);
    const hessians = collectHessians(source.spec, mapWeights(await readAllF32(source.weights)), windows, {
      rotate: 'none',
    });
    const file = await openGguf(memoryBytes(new Uint8Array(await readFile(out)), 'iq.gguf'));
    expect(file.metadata.get('quantize.imatrix.file')).toBe('iq-cal.txt');
    expect(file.metadata.get('quantize.imatrix.chunks_count')).toBe(windows.length);
    expect(file.metadata.get('quantize.imatrix.entries_count')).toBe(hessians.size);
    for (const [hf, gguf] of [
      ['model.layers.0.mlp.down_proj.weight', 'blk.0.ffn_down.weight'],
      ['model.layers.1.self_attn.v_proj.weight', 'blk.1.attn_v.weight'],
    ] as const) {
      const info = file.tensors.get(gguf)!;
      // Rows of 96 and 64 are no IQ2_XS super-block: llama.cpp's fallback, IQ4_NL, which weighs too.
      expect(info.type).toBe(GgmlType.IQ4_NL);
      const t = tensors.find((x) => x.name === hf)!;
      const H = hessians.get(hf)!;
      const n = Math.sqrt(H.length);
      const importance = Float32Array.from({ length: t.shape[1]! }, (_, k) => H[k * n + k]!);
      const stored = await info.bytes.read(info.offset, info.byteLength);
      expect(stored).toEqual(quantizeGgml(GgmlType.IQ4_NL, t.data, importance));
      expect(stored).not.toEqual(quantizeGgml(GgmlType.IQ4_NL, t.data));
    }
    await srcFiles.close?.();

    // Without --calibrate the file is written unweighted, with one warning line.
    const warned: string[] = [];
    await runExportGguf(parseExportGgufArgs([src, join(dir, 'iq-plain.gguf'), '--type', 'iq2_xs']), (l) =>
      warned.push(l),
    );
    expect(warned.filter((l) => l.includes('warning'))).toEqual([
      expect.stringMatching(/warning: IQ2_XS without --calibrate is encoded unweighted/),
    ]);
    expect(() =>
      parseExportGgufArgs([src, out, '--type', 'iq4_xs', '--calibrate', join(dir, 'nope.txt')]),
    ).toThrow(/--calibrate: ".*nope.txt" is not a text file/);
  }, 60_000);

  it('a fused Phi-3 projection takes its first part’s importance, Qwen3.5’s out_proj its columns’ in stored order', async () => {
    const tensorBytes = async (bytes: Uint8Array, name: string) => {
      const info = (await openGguf(memoryBytes(bytes, 'x.gguf'))).tensors.get(name)!;
      return info.bytes.read(info.offset, info.byteLength);
    };
    const ramp = (cols: number) => Float32Array.from({ length: cols }, (_, k) => 1 + ((5 * k) % 17));
    // Phi-3: q, k and v (gate and up) read one input; the writer fuses them into attn_qkv (ffn_up).
    const phi3 = specFromConfig(tinyConfig('phi3'));
    const phiTensors = randomTensors(phi3, 3);
    const asked: string[] = [];
    const cols = new Map(phiTensors.map((t) => [t.name, t.shape[1]]));
    const importance = (name: string) => {
      asked.push(name);
      const c = cols.get(name);
      return c === undefined ? undefined : ramp(c);
    };
    const phiBytes = exportGguf(phi3, phiTensors, 'IQ4_NL', [], { importance });
    const p = 'model.layers.0';
    expect(asked).toContain(`${p}.self_attn.q_proj.weight`);
    expect(asked).toContain(`${p}.mlp.gate_proj.weight`);
    for (const part of [
      'self_attn.k_proj',
      'self_attn.v_proj',
      'mlp.up_proj',
      'self_attn.qkv_proj',
      'mlp.gate_up_proj',
    ])
      expect(asked).not.toContain(`${p}.${part}.weight`);
    const qkv = ['q_proj', 'k_proj', 'v_proj'].map(
      (n) => phiTensors.find((t) => t.name === `${p}.self_attn.${n}.weight`)!,
    );
    const fused = Float32Array.from(qkv.flatMap((t) => [...t.data]));
    expect(await tensorBytes(phiBytes, 'blk.0.attn_qkv.weight')).toEqual(
      quantizeGgml(GgmlType.IQ4_NL, fused, ramp(phi3.hidden)),
    );

    // Qwen3.5 stores out_proj's columns with its value heads tiled (value heads of 16, so its 64
    // columns are whole IQ4_NL blocks).
    const qwen = specFromConfig({ ...tinyQwen35TextConfig(), linear_value_head_dim: 16 });
    const qwenTensors = randomTensors(qwen, 4);
    const hf = 'model.layers.0.linear_attn.out_proj.weight';
    const t = qwenTensors.find((x) => x.name === hf)!;
    const [, width = 0] = t.shape;
    const form = storedForm(qwen, hf, t.shape);
    const hfCol = form.hfCol!;
    expect(Array.from({ length: width }, (_, c) => hfCol(c)).some((h, c) => h !== c)).toBe(true);
    const qwenBytes = exportGguf(qwen, qwenTensors, 'IQ4_NL', [], {
      importance: (name) => (name === hf ? ramp(width) : undefined),
    });
    const got = await tensorBytes(qwenBytes, ggufTensorName(hf, qwen)!);
    const data = storedValues(form, t.data, width);
    const inStoredOrder = Float32Array.from({ length: width }, (_, c) => ramp(width)[hfCol(c)]!);
    expect(got).toEqual(quantizeGgml(GgmlType.IQ4_NL, data, inStoredOrder));
    expect(got).not.toEqual(quantizeGgml(GgmlType.IQ4_NL, data, ramp(width)));
    // One weight per column, or the writer refuses.
    expect(() =>
      exportGguf(qwen, qwenTensors, 'IQ4_NL', [], { importance: (n) => (n === hf ? ramp(3) : undefined) }),
    ).toThrow(/importance of .*out_proj.weight has 3 values for its 64 columns/);
  });
});

describe('weft convert --calibrate', () => {
  it.each(['none', 'hadamard'] as const)(
    'int2, rotate %s: GPTQ codes from the calibration text, recorded, with less output error than round-to-nearest',
    async (rotate) => {
      const src = join(dir, `cal-${rotate}`);
      await writeFixtureDir(src, 'llama', 'f32', 8);
      const textFile = join(dir, `cal-${rotate}.txt`);
      const text =
        'In the beginning God created the heaven and the earth. And the earth was without form. '.repeat(30);
      await writeFile(textFile, text);
      const out = join(dir, `cal-${rotate}-int2`);
      const { opened, files, lines } = await convertAndOpen(src, out, [
        '--quant',
        'int2',
        '--rotate',
        rotate,
        '--calibrate',
        textFile,
      ]);
      expect(lines.some((l) => /^weft convert: calibrate \d+%/.test(l))).toBe(true);
      expect(lines.at(-1)).toContain(`calibrated on ${textFile}`);
      const ck = await openSafetensors(memoryBytes(await readFile(join(out, WEFT_WEIGHTS)), WEFT_WEIGHTS));
      const calibration = JSON.parse(ck.metadata.calibration ?? '{}');
      expect(calibration).toMatchObject({ method: 'gptq', text: `cal-${rotate}.txt` });
      expect(calibration.tokens).toBeGreaterThan(256);

      // The same statistics the converter measured: H of every linear's padded, rotated input.
      const srcFiles = await pathModel(src);
      const source = await openModel(srcFiles);
      const tensors = await readAllF32(source.weights);
      const windows = calibrationWindows(source.tokenizer, text, source.spec.bosId!);
      const hessians = collectHessians(source.spec, mapWeights(tensors), windows, { rotate });
      for (const name of ['model.layers.0.self_attn.q_proj.weight', 'model.layers.1.mlp.down_proj.weight']) {
        const [rows = 0, cols = 0] = tensors[name]!.shape;
        const pad = linearPad(name, rows, cols, rotate);
        const H = hessians.get(name)!;
        // Σ over rows of (m − m̂)ᵀ H (m − m̂): the squared output error on the calibration inputs.
        let m = zeroPad(tensors[name]!.data, rows, cols, pad.rows, pad.cols);
        if (rotate === 'hadamard') m = hadamardRef(m, pad.rows, pad.cols, ROTATION_SEED);
        const outputError = (q: Float32Array) => {
          let e = 0;
          const d = new Float64Array(pad.cols);
          for (let r = 0; r < pad.rows; r++) {
            for (let k = 0; k < pad.cols; k++) d[k] = m[r * pad.cols + k]! - q[r * pad.cols + k]!;
            for (let i = 0; i < pad.cols; i++) {
              let hi = 0;
              for (let k = 0; k < pad.cols; k++) hi += H[i * pad.cols + k]! * d[k]!;
              e += d[i]! * hi;
            }
          }
          return e;
        };
        const stored = await opened.weights.readPacked?.(name, { format: 'int2', ...pad, rotation: rotate });
        expect(stored).toEqual(packLinear(tensors[name]!.data, rows, cols, pad, 'int2', rotate, H));
        const rtn = packLinear(tensors[name]!.data, rows, cols, pad, 'int2', rotate);
        const calibrated = outputError(dequantize(stored!));
        const nearest = outputError(dequantize(rtn));
        console.log(
          `[convert --calibrate] ${rotate} ${name}: output error GPTQ / nearest = ${(calibrated / nearest).toFixed(3)}`,
        );
        expect(calibrated).toBeLessThan(nearest);
      }
      await srcFiles.close?.();
      await files.close?.();
    },
    60_000, // Hessians, GPTQ and the K-quant refinement: seconds of CPU, more on a loaded machine
  );

  it('refuses a calibration file that does not exist, naming it', () => {
    expect(() =>
      parseConvertArgs(['a', 'b', '--quant', 'int4', '--calibrate', join(dir, 'missing.txt')]),
    ).toThrow(/--calibrate: ".*missing.txt" is not a text file/);
  });
});

describe('bad arguments and failures', () => {
  it('argument errors are InvalidInputError naming the argument and the value', () => {
    const cases: [string[], RegExp][] = [
      [['a', 'b'], /--quant: "" is not one of int8, int4, int2/],
      [['a', 'b', '--quant', 'int3'], /--quant: "int3"/],
      // Groups are part of each format now (Q8_0, Q4_K, Q2_K blocks): no --group.
      [['a', 'b', '--quant', 'int4', '--group', '32'], /--group/],
      [['a', 'b', '--quant', 'int4', '--rotate', 'spin'], /--rotate: "spin"/],
      [['a', '--quant', 'int4'], /convert needs <source> and <out-dir>/],
      [['a', 'b', '--quant', 'int4', '--bogus', '1'], /bogus/],
    ];
    for (const [argv, message] of cases) {
      expect(() => parseConvertArgs(argv)).toThrow(InvalidInputError);
      expect(() => parseConvertArgs(argv)).toThrow(message);
    }
    expect(() => parseExportGgufArgs(['a', 'b.gguf', '--type', 'iq1_s'])).toThrow(/--type: "iq1_s"/);
    expect(() => parseExportGgufArgs(['a', 'b.bin', '--type', 'f16'])).toThrow(/<out.gguf>: "b.bin"/);
  });

  it('a missing source or an existing output is refused before anything is written', async () => {
    const missing = join(dir, 'nope');
    await expect(
      runConvert(parseConvertArgs([missing, join(dir, 'x'), '--quant', 'int8']), quiet),
    ).rejects.toThrow(new RegExp(`<source>: "${missing}"`));
    const src = join(dir, 'exists-src');
    await writeFixtureDir(src, 'llama', 'f32', 2);
    await expect(runConvert(parseConvertArgs([src, src, '--quant', 'int8']), quiet)).rejects.toThrow(
      /<out-dir>: .* already exists/,
    );
  });

  async function leftovers(parent: string, out: string): Promise<string[]> {
    return (await readdir(parent)).filter((f) => f.includes(out));
  }

  it('a read failing mid-stream (source truncated while packing) leaves no files', async () => {
    const parent = await mkdtemp(join(dir, 'fail-'));
    const src = join(parent, 'src');
    await writeFixtureDir(src, 'qwen2', 'f32', 2);
    const log: string[] = [];
    const err = await runConvert(parseConvertArgs([src, join(parent, 'out'), '--quant', 'int4']), (line) => {
      log.push(line);
      // Called just before the packing pass reads its first tensor.
      if (line.includes(' pack ') && log.filter((l) => l.includes(' pack ')).length === 1)
        truncateSync(join(src, 'model.safetensors'), 4096);
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(log.some((l) => l.includes('checksum'))).toBe(true);
    expect(await leftovers(parent, 'out')).toEqual([]);
  });
});

describe('weft-q versions and metadata faults', () => {
  const int8 = quantize(
    Float32Array.from({ length: 32 }, (_, i) => Math.sin(i)),
    2,
    16,
    'int8',
  );
  const bytes = (meta: Record<string, string>) =>
    writeSafetensors(
      [
        { name: 'w', dtype: 'I32', shape: [8], data: new Uint8Array(int8.data.buffer) },
        { name: 'w.scales', dtype: 'I32', shape: [1], data: new Uint8Array(int8.scales!.buffer) },
      ],
      meta,
    );
  const scheme = (extra: Record<string, unknown>) =>
    JSON.stringify({ w: { format: 'int8', rows: 2, cols: 16, shape: [2, 16], rotation: 'none', ...extra } });

  it('version 3 reads back the packed arrays as written', async () => {
    const ck = await openWeftCheckpoint(
      memoryBytes(bytes({ format: 'weft-q', version: '3', schemes: scheme({}) }), 'v3'),
    );
    expect(ck.schemes.w).toMatchObject({ shape: [2, 16], rotation: 'none' });
    expect(sameF32(await ck.readF32('w'), dequantize(int8))).toBeUndefined();
    expect(await ck.readPacked?.('w', { format: 'int8', rows: 2, cols: 16, rotation: 'none' })).toEqual(int8);
  });

  it('refuses versions 1 and 2 (old layouts): written by an older weft, run weft convert again', async () => {
    for (const version of ['1', '2']) {
      const err = await openWeftCheckpoint(
        memoryBytes(bytes({ format: 'weft-q', version, schemes: scheme({}) }), 'old'),
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ModelFormatError);
      expect(String(err)).toMatch(
        new RegExp(
          `old: __metadata__.version = "${version}": written by an older weft.*run \`weft convert\` again`,
        ),
      );
    }
  });

  it('refuses an unknown version, a foreign rotation seed, a shape outside the packed matrix and wrong array sizes', async () => {
    const open = (meta: Record<string, string>) => openWeftCheckpoint(memoryBytes(bytes(meta), 'm'));
    await expect(open({ format: 'weft-q', version: '4', schemes: scheme({}) })).rejects.toThrow(
      /m: __metadata__.version = "4": unsupported version/,
    );
    await expect(
      open({ format: 'weft-q', version: '3', rotation: 'hadamard', rotation_seed: '1', schemes: scheme({}) }),
    ).rejects.toThrow(/m: __metadata__.rotation_seed = "1"/);
    await expect(
      open({ format: 'weft-q', version: '3', schemes: scheme({ shape: [3, 16] }) }),
    ).rejects.toThrow(/m: __metadata__.schemes.w.shape = \[3,16\]: must be \[r, c\] within \[2, 16\]/);
    await expect(
      open({ format: 'weft-q', version: '3', schemes: scheme({ rotation: 'spin' }) }),
    ).rejects.toThrow(ModelFormatError);
    // 2 × 48 int8 needs 24 data words and 2 scale words: the file holds 8 and 1.
    await expect(open({ format: 'weft-q', version: '3', schemes: scheme({ cols: 48 }) })).rejects.toThrow(
      /m: w .*expected I32 \[24\]/,
    );
  });
});

describe('createEngine on converted and GGUF models', () => {
  async function greedy(model: ModelFiles, quant?: Quant): Promise<number[]> {
    const engine = await createEngine({
      model,
      device: 'cpu',
      contextLength: 64,
      ...(quant ? { quant } : {}),
    });
    const ids: number[] = [];
    for await (const c of engine.generate([5, 17, 99, 3], { maxTokens: 12 })) ids.push(...c.ids);
    await engine.unload();
    return ids;
  }

  it('a weft-q folder defaults to its own format and matches the source at that --quant (CPU)', async () => {
    const src = join(dir, 'engine-src');
    await writeFixtureDir(src, 'llama', 'f32', 31);
    const out = join(dir, 'engine-int4');
    await runConvert(parseConvertArgs([src, out, '--quant', 'int4']), quiet);
    const want = await greedy(await pathModel(src), 'int4');
    expect(want.length).toBeGreaterThan(0);
    expect(await greedy(await pathModel(out))).toEqual(want);
  });

  it('a .gguf URL is one GGUF file: only ranges of it are fetched', async () => {
    const { bytes } = ggufFixture('qwen3', 'F32', 32);
    const seen: string[] = [];
    const fetchFn: typeof fetch = async (input, init) => {
      const url = String(input);
      seen.push(url);
      if (url !== 'https://host/m/tiny.gguf') return new Response(null, { status: 404 });
      if (init?.method === 'HEAD')
        return new Response(null, { headers: { 'content-length': `${bytes.length}` } });
      const [, a = '0', b = '0'] =
        /bytes=(\d+)-(\d+)/.exec(new Headers(init?.headers).get('range') ?? '') ?? [];
      return new Response(bytes.slice(Number(a), Number(b) + 1), { status: 206 });
    };
    const files = urlModelFiles('https://host/m/tiny.gguf', fetchFn);
    expect(files.gguf).toBe('tiny.gguf');
    const opened = await openModel(files);
    expect(opened.format).toBe('gguf');
    expect(opened.spec.family).toBe('qwen3');
    expect(new Set(seen)).toEqual(new Set(['https://host/m/tiny.gguf']));
  });
});
