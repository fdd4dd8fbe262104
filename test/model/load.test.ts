// openModel on broken checkpoints and files: every fault is a ModelFormatError naming the file
// (as `<model>/<file>`, or the GGUF file), the field or tensor, and the shapes or the problem.
import { describe, expect, it } from 'vitest';
import { exportGguf } from '../../src/convert/gguf-export.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { convert } from '../../src/formats/weft-checkpoint.js';
import { openModel, WEFT_WEIGHTS } from '../../src/model/load.js';
import { placedFormat } from '../../src/model/quantized.js';
import {
  type FixtureTensor,
  fixtureFiles,
  ggufFixture,
  randomTensors,
  safetensorsBytes,
  shardedSafetensors,
} from '../fixtures/write.js';

async function formatError(p: Promise<unknown>): Promise<ModelFormatError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof ModelFormatError) return e;
    throw e;
  }
  throw new Error('expected a ModelFormatError');
}

const text = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));

/** A qwen2 f32 fixture whose weights are replaced by `tensors` as one safetensors file. */
function withWeights(tensors: readonly FixtureTensor[]): Map<string, Uint8Array> {
  const { files } = fixtureFiles('qwen2', 'f32', 3);
  files.set('model.safetensors', safetensorsBytes(tensors, 'F32'));
  return files;
}

const fixture = () => fixtureFiles('qwen2', 'f32', 3);
const without = (tensors: readonly FixtureTensor[], name: string) => tensors.filter((t) => t.name !== name);
/** `name` stored transposed: `[a, b]` becomes `[b, a]` (same values, wrong shape). */
const transposed = (tensors: readonly FixtureTensor[], name: string) =>
  tensors.map((t) => (t.name === name ? { ...t, shape: [...t.shape].reverse() } : t));

describe('openModel: missing tensors and wrong shapes', () => {
  it('safetensors: a missing tensor names the file, the tensor and its expected shape', async () => {
    const { tensors } = fixture();
    const files = withWeights(without(tensors, 'model.layers.1.self_attn.v_proj.bias'));
    const e = await formatError(openModel(memoryModelFiles('tiny', files)));
    expect(e.file).toBe('tiny/model.safetensors');
    expect(e.field).toBe('model.layers.1.self_attn.v_proj.bias');
    expect(e.message).toBe(
      'tiny/model.safetensors: model.layers.1.self_attn.v_proj.bias = undefined: missing tensor (expected shape [32])',
    );
  });

  it('safetensors: a wrong shape names the file, the tensor, its shape and the expected one', async () => {
    const { tensors } = fixture();
    const files = withWeights(transposed(tensors, 'model.layers.0.mlp.up_proj.weight'));
    const e = await formatError(openModel(memoryModelFiles('tiny', files)));
    expect(e.file).toBe('tiny/model.safetensors');
    expect(e.field).toBe('model.layers.0.mlp.up_proj.weight');
    expect(e.value).toEqual([64, 96]);
    expect(e.message).toMatch(/= \[64,96\]: wrong shape, expected \[96, 64\]$/);
  });

  it('sharded: a tensor the index does not list names the index; one its shard lacks names the shard', async () => {
    const { files, tensors } = fixtureFiles('llama', 'sharded', 3);
    const index = JSON.parse(new TextDecoder().decode(files.get('model.safetensors.index.json')!));
    delete index.weight_map['model.norm.weight'];
    files.set('model.safetensors.index.json', text(index));
    let e = await formatError(openModel(memoryModelFiles('tiny', files)));
    expect(e.file).toBe('tiny/model.safetensors.index.json');
    expect(e.field).toBe('model.norm.weight');
    expect(e.message).toMatch(/missing tensor \(expected shape \[64\]\)/);

    // The index lists every tensor, but the second shard was written without lm_head.weight.
    const { index: full, files: shards } = shardedSafetensors(tensors, 'BF16');
    const [, second] = [...shards.keys()];
    const inSecond = tensors.filter((t) => full.weight_map[t.name] === second);
    shards.set(second!, safetensorsBytes(without(inSecond, 'lm_head.weight'), 'BF16'));
    for (const [name, bytes] of shards) files.set(name, bytes);
    files.set('model.safetensors.index.json', text(full));
    e = await formatError(openModel(memoryModelFiles('tiny', files)));
    expect(e.file).toBe(second);
    expect(e.field).toBe('lm_head.weight');
    expect(e.message).toMatch(/tensor listed in the index is missing/);
  });

  it('sharded: a wrong shape names the shard holding the tensor', async () => {
    const { files, tensors } = fixtureFiles('llama', 'sharded', 3);
    const name = 'model.layers.1.mlp.down_proj.weight';
    const { index, files: shards } = shardedSafetensors(transposed(tensors, name), 'BF16');
    for (const [shard, bytes] of shards) files.set(shard, bytes);
    files.set('model.safetensors.index.json', text(index));
    const e = await formatError(openModel(memoryModelFiles('tiny', files)));
    expect(index.weight_map[name]).toBe('model-00002-of-00002.safetensors');
    expect(e.file).toBe('tiny/model-00002-of-00002.safetensors');
    expect(e.message).toMatch(/down_proj.weight = \[96,64\]: wrong shape, expected \[64, 96\]$/);
  });

  it("weft-q: a converted checkpoint missing a tensor names weft's file", async () => {
    const { files, tensors } = fixture();
    const source = without(tensors, 'model.layers.0.self_attn.q_proj.weight');
    const parts: Uint8Array[] = [];
    const reader = {
      tensors: new Map(source.map((t) => [t.name, t])),
      readF32: async (name: string) => source.find((t) => t.name === name)!.data,
    };
    await convert(reader, (c) => void parts.push(c.slice()), { quant: 'int8' });
    const weft = new Uint8Array(parts.reduce((n, c) => n + c.byteLength, 0));
    let at = 0;
    for (const c of parts) {
      weft.set(c, at);
      at += c.byteLength;
    }
    files.set(WEFT_WEIGHTS, weft);
    const e = await formatError(openModel(memoryModelFiles('tiny', files)));
    expect(e.file).toBe(`tiny/${WEFT_WEIGHTS}`);
    expect(e.field).toBe('model.layers.0.self_attn.q_proj.weight');
    expect(e.message).toMatch(/missing tensor \(expected shape \[64, 64\]\)/);
  });

  it('GGUF: a missing tensor and a wrong shape name the GGUF file and the tensor', async () => {
    const { bytes } = ggufFixture('qwen3', 'F32', 4);
    const renamed = bytes.slice();
    const at = Buffer.from(renamed).indexOf('blk.0.attn_k_norm.weight');
    renamed[at + 'blk.0.attn_k_norm'.length + 1] = 'x'.charCodeAt(0); // .weight → .xeight
    let e = await formatError(openModel(memoryModelFiles('q3.gguf', new Map([['q3.gguf', renamed]]))));
    expect(e.file).toBe('q3.gguf');
    expect(e.field).toBe('model.layers.0.self_attn.k_norm.weight');
    expect(e.message).toMatch(/missing tensor \(expected shape \[32\]\)/);

    const { spec, tensors } = ggufFixture('qwen3', 'F32', 4);
    const wrong = exportGguf(spec, transposed(tensors, 'model.layers.1.mlp.down_proj.weight'), 'F32');
    e = await formatError(openModel(memoryModelFiles('w.gguf', new Map([['w.gguf', wrong]]))));
    expect(e.file).toBe('w.gguf');
    expect(e.field).toBe('model.layers.1.mlp.down_proj.weight');
    expect(e.message).toMatch(/= \[96,64\]: wrong shape, expected \[64, 96\]$/);
  });

  it('complete checkpoints (single file, sharded, GGUF) still open', async () => {
    for (const variant of ['f32', 'sharded'] as const) {
      const opened = await openModel(memoryModelFiles('tiny', fixtureFiles('mistral', variant, 3).files));
      expect(opened.weights.tensors.size).toBe(randomTensors(opened.spec).length);
    }
    const { bytes } = ggufFixture('mistral', 'Q8_0', 3);
    const gguf = await openModel(memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]])));
    expect(gguf.format).toBe('gguf');
  });
});

describe('openModel: files that are not JSON', () => {
  for (const file of [
    'config.json',
    'tokenizer_config.json',
    'generation_config.json',
    'tokenizer.json',
    'model.safetensors.index.json',
  ]) {
    it(`a syntax error in ${file} names the file and says it is not valid JSON`, async () => {
      const { files } = fixtureFiles('llama', file === 'model.safetensors.index.json' ? 'sharded' : 'f32', 3);
      const good = new TextDecoder().decode(files.get(file)!);
      // A trailing comma inside the top-level object: valid up to there, then a syntax error.
      files.set(file, new TextEncoder().encode(`${good.slice(0, -1)},}`));
      const e = await formatError(openModel(memoryModelFiles('models/tiny', files)));
      expect(e.file).toBe(`models/tiny/${file}`);
      expect(e.message).toMatch(
        new RegExp(`^models/tiny/${file.replaceAll('.', '\\.')}: .*is not valid JSON`),
      );
      expect(e.cause).toBeInstanceOf(SyntaxError);
    });
  }
});

describe('a quantized GGUF opens as stored', () => {
  const open = (bytes: Uint8Array) => openModel(memoryModelFiles('m.gguf', new Map([['m.gguf', bytes]])));

  it.each([
    ['Q8_0', 'int8'],
    ['Q4_0', 'q4_0'],
    ['Q4_K', 'int4'],
    ['F16', undefined],
    ['Q6_K', 'q6_k'],
    ['Q5_K', 'q5_k'],
    ['Q5_0', 'q5_0'],
    ['Q4_K_M', 'int4'],
  ] as const)('%s: packed %s (the default quant), rotation none', async (variant, format) => {
    const opened = await open(ggufFixture('llama', variant, 5).bytes);
    expect(opened.packed).toEqual(format === undefined ? undefined : { format, rotation: 'none' });
  });

  it('a file mixing types reports its linears’ format and each matrix’s own', async () => {
    // As llama.cpp's Q4_0 files: Q4_0 linears, here with a Q8_0 head, an F16 embedding and one
    // F16 linear.
    const { bytes } = ggufFixture('llama', 'Q4_0', 5, {
      types: (name) =>
        name === 'lm_head.weight'
          ? 'Q8_0'
          : name === 'model.embed_tokens.weight' || name === 'model.layers.1.mlp.down_proj.weight'
            ? 'F16'
            : undefined,
    });
    const { packed, weights } = await open(bytes);
    expect(packed).toEqual({ format: 'q4_0', rotation: 'none' });
    expect(weights.storedFormat?.('lm_head.weight')).toBe('int8');
    expect(weights.storedFormat?.('model.embed_tokens.weight')).toBe('f16');
    expect(weights.storedFormat?.('model.layers.1.mlp.down_proj.weight')).toBe('f16');
    expect(weights.storedFormat?.('model.layers.0.self_attn.q_proj.weight')).toBe('q4_0');
    expect(weights.storedFormat?.('model.norm.weight')).toBeUndefined();
  });

  it('W8A8 takes a Q6_K linear of a Q8_0 file as int8 (its kernel has no 6-bit codes), the head as stored', async () => {
    // Rows of 256 (a Q6_K fixture's) so Q6_K blocks fit; all but the head and one down_proj Q8_0.
    const { bytes } = ggufFixture('llama', 'Q6_K', 5, {
      types: (name) =>
        name === 'lm_head.weight' || name === 'model.layers.0.mlp.down_proj.weight' ? undefined : 'Q8_0',
    });
    const { packed, weights } = await open(bytes);
    expect(packed).toEqual({ format: 'int8', rotation: 'none' });
    const down = 'model.layers.0.mlp.down_proj.weight';
    expect(weights.storedFormat?.(down)).toBe('q6_k');
    expect(placedFormat(weights, down, 'int8', true)).toBe('q6_k');
    expect(placedFormat(weights, down, 'w8a8', true)).toBe('int8');
    expect(placedFormat(weights, 'model.layers.1.mlp.down_proj.weight', 'w8a8', true)).toBe('int8');
    // The head is a weight-only matmul whatever the quant.
    expect(placedFormat(weights, 'lm_head.weight', 'w8a8', true)).toBe('q6_k');
  });
});
