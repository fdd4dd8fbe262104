// What a decode step asks of the GPU, counted (GpuCounter) and checked against the forward's
// structure written out here from the model shape. On a real GPU a batch-1 decode step costs the
// weight bytes it reads plus a fixed price per dispatch, per buffer write and per CPU round trip:
// these figures are what the decode fast path holds (at most 7 dispatches per layer and 4 per token,
// one buffer write and one 4-byte readback per plain decode step). Adding a dispatch or a write to
// the forward fails this test until the formula below says why. The project's kernel forms decide
// the sampler: one workgroup per row (serial forms), or split over chunks of the vocabulary and
// merged (GPU forms: two dispatches, three when a top-k / top-p / min-p filter is on).
import { describe, expect, it } from 'vitest';
import { Engine } from '../../../src/engine/engine.js';
import type { TextCodec } from '../../../src/engine/types.js';
import { memoryModelFiles } from '../../../src/formats/io/files.js';
import { readBuffer } from '../../../src/gpu/buffers.js';
import { countsSince } from '../../../src/gpu/counters.js';
import type { KernelForms } from '../../../src/gpu/device.js';
import { defineUniforms } from '../../../src/gpu/uniforms.js';
import { UNIFORM_POOL, UniformSlot } from '../../../src/kernels/bind.js';
import type { ModelFamily } from '../../../src/model/families/index.js';
import { createGpuRunner } from '../../../src/model/gpu/runner.js';
import { openModel } from '../../../src/model/load.js';
import { GREEDY, type SamplerSpec } from '../../../src/model/runner.js';
import { deriveSizes, type ModelSpec } from '../../../src/model/spec/spec.js';
import { fixtureFiles } from '../../fixtures/write.js';
import { gpu } from '../../helpers/gpu.js';

const ids: TextCodec = { encode: () => [], decode: () => '', eosIds: [] };

/** Bytes per weight as packed: f16 halves; int4 Q4_K super-blocks of 256 (4.5 bits). */
const BYTES_PER_WEIGHT = { f16: 2, int4: 4.5 / 8 } as const;

/** The sampler's dispatches and uniform block bytes for these forms and settings. */
function samplerShape(forms: KernelForms, sampler: SamplerSpec): { dispatches: number; blockBytes: number } {
  if (forms === 'serial') return { dispatches: 1, blockBytes: 32 }; // sample.wgsl: 7 fields
  const filtered = sampler.temperature > 0 && ((sampler.topK ?? 0) > 0 || (sampler.topP ?? 1) < 1);
  return { dispatches: filtered ? 3 : 2, blockBytes: 48 }; // topk.wgsl: 10 fields
}

/**
 * One forward pass of T tokens scoring R rows, written out from GpuRunner.encodePass (the fused
 * path, no rotation): each kernel encode is one dispatch and every weight matrix is one part.
 * Writes: the pass's small u32 inputs (ids, positions, slots, visibility masks of two words per
 * row, scored rows, sample positions) in one buffer, then each kernel instance's uniform block (16
 * bytes; 32 for the matmul blocks of 8 fields and the embedding's of 5) only when its values changed since it was last
 * written (UniformSlot). The fused q|k|v kernel and the attention write their blocks once, when they
 * are made, and read the context base from the slots buffer. `uniforms` says which blocks changed:
 * 'all' (a fresh runner), 'shape' (T changed: every block that holds T; the LM head and sampler
 * hold R only) or 'steady' (a decode step like the one before: none).
 */
function expectedPass(
  spec: ModelSpec,
  T: number,
  R: number,
  uniforms: 'all' | 'shape' | 'steady',
  forms: KernelForms,
  sampler: SamplerSpec = GREEDY,
) {
  // Per layer, Llama and Qwen alike: the stacked q|k|v matmul (input norm folded in), QkvRope
  // (bias, QK-norm, RoPE and the KV write), attention (one dispatch while every key sits in its
  // first chunk of 256 slots: the fixture's cache holds 64), o (residual add in its epilogue), the
  // gated gate·up matmul (post-attention norm and SiLU folded in), down (residual add).
  const matmuls = 4;
  const perLayer = matmuls + 2;
  // Once: embedding, LM head (the final norm folded in), the sampler's dispatches; the row gather
  // when fewer rows are scored.
  const gather = R < T ? 1 : 0;
  const sample = samplerShape(forms, sampler);
  const fixed = 2 + sample.dispatches + gather;
  const dispatches = perLayer * spec.layers + fixed;
  // Instances whose blocks hold T: each layer's matmuls (32 B); the embedding (32 B: 5 fields, its
  // scale among them).
  const shapedBytes = spec.layers * matmuls * 32 + 32;
  const shapedWrites = spec.layers * matmuls + 1;
  // Instances whose blocks hold R only: the LM head (32 B), the sampler, the gather (16 B).
  const uniformWrites = { all: shapedWrites + 2 + gather, shape: shapedWrites, steady: 0 }[uniforms];
  const uniformBytes = {
    all: shapedBytes + 32 + sample.blockBytes + gather * 16,
    shape: shapedBytes,
    steady: 0,
  }[uniforms];
  return {
    perLayer,
    fixed,
    sampleBlockBytes: sample.blockBytes,
    counts: {
      dispatches,
      writes: 1 + uniformWrites,
      writeBytes: 4 * (5 * T + 2 * R) + uniformBytes,
      readbacks: 1,
      readbackBytes: 4 * R,
      submits: 1,
    },
  };
}

/** Weight bytes one pass reads: every layer's linears, the LM head, one embedding row. */
function expectedWeightBytes(spec: ModelSpec, quant: keyof typeof BYTES_PER_WEIGHT): number {
  const { qWidth, kvWidth } = deriveSizes(spec);
  const H = spec.hidden;
  const I = spec.intermediate;
  const perLayer = qWidth * H + 2 * kvWidth * H + H * qWidth + 3 * I * H;
  const b = BYTES_PER_WEIGHT[quant];
  return (spec.layers * perLayer + spec.vocabSize * H + H) * b;
}

async function runnerOf(family: ModelFamily, quant: 'f16' | 'int4') {
  const { files } = fixtureFiles(family, 'f32', 7);
  const opened = await openModel(memoryModelFiles(family, files));
  return createGpuRunner(opened, { quant, capacity: 64, gpu: await gpu() });
}

describe.each(['llama', 'qwen3'] as const)('GPU work counted, %s', (family) => {
  it.each(['f16', 'int4'] as const)('%s: a decode step is what the forward encodes', async (quant) => {
    const dev = await runnerOf(family, quant);
    const { spec } = dev;
    const forms = dev.gpu.kernels;
    const prompt = [5, 17, 99, 3, 250];
    await dev.forward({ tokens: prompt }, GREEDY, 'last');
    // A prefill chunk scores its last row only: the gather joins, and still one 4-byte id comes back.
    expect(dev.lastForward).toEqual(expectedPass(spec, prompt.length, 1, 'all', forms).counts);
    dev.commit(prompt.map((_, i) => i));

    const seeded = { temperature: 0.8, topP: 0.9, topK: 0, seed: 3 };
    const shape = expectedPass(spec, 1, 1, 'shape', forms).counts;
    const want = expectedPass(spec, 1, 1, 'steady', forms);
    const sampled = expectedPass(spec, 1, 1, 'steady', forms, seeded);
    const steps = [
      // The first step after a prefill rewrites every block that holds T.
      { sampler: GREEDY, counts: shape },
      { sampler: GREEDY, counts: want.counts },
      // The Gumbel sampler's block is written the first time it runs, then kept.
      {
        sampler: seeded,
        counts: {
          ...sampled.counts,
          writes: 2,
          writeBytes: sampled.counts.writeBytes + sampled.sampleBlockBytes,
        },
      },
      { sampler: seeded, counts: sampled.counts },
      { sampler: GREEDY, counts: want.counts },
    ];
    for (const { sampler, counts } of steps) {
      const before = dev.deviceCounts();
      const [next] = await dev.forward({ tokens: [42] }, sampler, 'last');
      dev.commit([0]); // a chain's row is already in place: no GPU work
      expect(next).toBeGreaterThanOrEqual(0);
      expect(dev.lastForward).toEqual(counts);
      expect(countsSince(dev.deviceCounts(), before)).toEqual(counts);
    }
    // The GPU-resident loop: between two ids read back, the device runs one step whose id comes
    // from the step before it (no id written: 4 bytes fewer) and reads back 4 bytes.
    const piped = { ...want.counts, writeBytes: want.counts.writeBytes - 4 };
    const session = dev.decode(42, GREEDY, 6);
    for (let i = 0; i < 5; i++) {
      const before = dev.deviceCounts();
      await session.next();
      if (i > 0) expect(countsSince(dev.deviceCounts(), before)).toEqual(piped);
      if (i > 0) expect(dev.lastForward).toEqual(piped);
    }
    session.close();
    expect(dev.weightBytesPerPass).toBe(expectedWeightBytes(spec, quant));
    expect(want.counts.writes).toBe(1);
    expect(want.perLayer).toBeLessThanOrEqual(7);
    expect(want.fixed).toBeLessThanOrEqual(4);

    const c = want.counts;
    console.log(
      `[counters] ${family} ${quant} decode step (${forms} kernels): ${want.perLayer} dispatches/layer × ${spec.layers} + ${want.fixed} = ${c.dispatches}; ` +
        `${c.writes} write (the pass's inputs: ${c.writeBytes} B, ${piped.writeBytes} B pipelined; ` +
        `${shape.writes} on the first step after a prefill); ${c.submits} submit; ${c.readbacks} readback (${c.readbackBytes} B); ` +
        `weights ${dev.weightBytesPerPass} B/pass`,
    );
    dev.dispose();
  });
});

describe('GPU work in GenerationStats', () => {
  it('plain decoding: the per-step figures, one 4-byte readback per pass', async () => {
    const dev = await runnerOf('llama', 'int4');
    const engine = new Engine({ id: 'gpu', runner: dev, codec: ids });
    for await (const _ of engine.generate([5, 17, 99, 3, 250], { maxTokens: 9 })) {
    }
    const s = engine.lastStats!;
    // The first token comes from prefill; each of the 8 decode steps produces one. The engine runs
    // them in the GPU-resident loop: the first step takes its id from the CPU and rewrites the
    // blocks that hold T (the prefill ran 5 tokens); the 7 after it take their ids from the GPU
    // and write their inputs only. With max tokens reached, no step runs ahead.
    const first = expectedPass(dev.spec, 1, 1, 'shape', dev.gpu.kernels).counts;
    const step = expectedPass(dev.spec, 1, 1, 'steady', dev.gpu.kernels).counts;
    expect(s.decode_counts).toEqual({
      passes: 8,
      tokens: 8,
      dispatches: 8 * step.dispatches,
      writes: first.writes + 7 * step.writes,
      write_bytes: first.writeBytes + 7 * (step.writeBytes - 4),
      readbacks: 8,
      readback_bytes: 32,
      submits: 8,
    });
    expect(step.writes).toBe(1);
    expect(s.dispatches_per_token).toBe(step.dispatches);
    expect(s.writes_per_token).toBe((first.writes + 7 * step.writes) / 8);
    expect(s.readbacks_per_pass).toBe(1);
    expect(s.readback_bytes_per_pass).toBe(4);
    expect(s.weight_bytes_per_pass).toBe(expectedWeightBytes(dev.spec, 'int4'));
    await engine.unload();
  });

  it('n-gram speculation: one readback per step, per-token figures from the totals', async () => {
    const dev = await runnerOf('llama', 'f16');
    const engine = new Engine({ id: 'gpu', runner: dev, codec: ids });
    const prompt = [5, 17, 99, 3, 5, 17, 99, 3, 5, 17];
    for await (const _ of engine.generate(prompt, { maxTokens: 12, drafter: 'ngram', treeBudget: 4 })) {
    }
    const s = engine.lastStats!;
    const d = s.decode_counts!;
    // One verify forward per step (the n-gram drafter runs on the CPU), each reading back one id
    // per tree node; commits of a tree path add a compaction pass of their own.
    expect(d.passes).toBeGreaterThan(0);
    expect(d.readbacks).toBe(d.passes);
    expect(d.readback_bytes).toBeGreaterThanOrEqual(4 * d.passes);
    expect(s.readbacks_per_pass).toBe(1);
    expect(s.dispatches_per_token).toBeCloseTo(d.dispatches / d.tokens, 9);
    // Sampling at T = 1 verifies the same way: one readback of the tree's sampled ids per step.
    for await (const _ of engine.generate(prompt, {
      maxTokens: 12,
      drafter: 'ngram',
      temperature: 1,
      seed: 2,
    })) {
    }
    const t1 = engine.lastStats!.decode_counts!;
    expect(t1.readbacks).toBe(t1.passes);
    expect(t1.readback_bytes).toBeLessThanOrEqual(t1.passes * 4 * 33);
    console.log(
      `[counters] llama f16 n-gram decode: ${s.tokens_per_pass.toFixed(2)} tokens/pass, ` +
        `${s.dispatches_per_token!.toFixed(1)} dispatches/token, ${s.writes_per_token!.toFixed(1)} writes/token, ` +
        `${s.readback_bytes_per_pass!.toFixed(1)} B read back/pass`,
    );
    await engine.unload();
  });
});

describe('UniformSlot', () => {
  it('writes only when the packed bytes differ; inside a batch, never rewrites a buffer the batch bound', async () => {
    const ctx = await gpu();
    const layout = defineUniforms('P', { a: 'u32', b: 'f32' });
    const slot = new UniformSlot(ctx, layout, 'test-params');
    const writes = () => ctx.counter.snapshot().writes;
    const w0 = writes();
    slot.write({ a: 1, b: 0.5 });
    slot.write({ a: 1, b: 0.5 }); // identical: skipped
    expect(writes() - w0).toBe(1);
    const first = slot.buffer;
    slot.write({ a: 2, b: 0.5 });
    slot.write({ a: 1, b: 0.5 }); // equal to an older write, not to the last: written
    slot.write({ a: 1, b: Math.fround(0.5) });
    expect(writes() - w0).toBe(3);
    // Outside a batch, one buffer, rewritten in place (one bind group in steady state).
    expect(slot.buffer).toBe(first);
    const held = await readBuffer(ctx, slot.buffer, 8);
    expect(Array.from(new Uint32Array(held, 0, 1))).toEqual([1]);
    expect(Array.from(new Float32Array(held, 4, 1))).toEqual([0.5]);
    // Inside a batch: each value set keeps its own buffer, so every encode of the batch reads its
    // own values after the one submit; a set already held is selected, not written.
    ctx.counter.beginBatch();
    const bound = new Map<number, GPUBuffer>();
    for (const a of [1, 2, 3, 2, 1]) {
      slot.write({ a, b: 0.5 });
      if (bound.has(a)) expect(slot.buffer).toBe(bound.get(a));
      bound.set(a, slot.buffer);
    }
    ctx.counter.endBatch();
    expect(new Set(bound.values()).size).toBe(3);
    expect(writes() - w0).toBe(5); // a = 2 and a = 3: a = 1 was held
    for (const [a, buffer] of bound)
      expect(Array.from(new Uint32Array(await readBuffer(ctx, buffer, 4)))).toEqual([a]);
    // More value sets than UNIFORM_POOL in one batch cannot be served.
    ctx.counter.beginBatch();
    expect(() => {
      for (let a = 10; a < 11 + UNIFORM_POOL; a++) slot.write({ a, b: 0 });
    }).toThrow(/value sets in one batch/);
    ctx.counter.endBatch();
    slot.destroy();
  });
});
