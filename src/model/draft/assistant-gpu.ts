// Gemma 4's assistant beside a GPU target (assistant.ts has the architecture): an AssistantTarget
// over a GpuRunner on the same device. Per assistant forward it copies back, in one submission
// each, the rows' target embeddings (the target's own table, gathered and scaled by √Hb by the
// Embedding kernel: the same values as the target's embedding stage) and, per target layer the
// assistant attends over, the K and V rows its rows read (the committed slots [from, P): the
// whole context on full layers, the window + 1 newest on sliding ones, read out of the ring).
// The features come back through GpuRunner.features. The assistant's step then runs on the host
// (assistantStep): a host round trip per forward, not per draft depth (a forward's waves share
// what it copied back), and no assistant weights on the device.
import { InvalidInputError } from '../../errors.js';
import { createBuffer, writeBuffer } from '../../gpu/buffers.js';
import { BindGroupCache } from '../../kernels/bind.js';
import { Embedding } from '../../kernels/embed/embed.js';
import { type KvShape, kvRowOf, kvWordsPerSlot, unpackHalves } from '../../kernels/kv/kv.js';
import { MAX_FORWARD_TOKENS } from '../blocks/gpu.js';
import { readStaging } from '../gpu/pass.js';
import { GpuRunner } from '../gpu/runner.js';
import type { ModelRunner } from '../runner.js';
import type { AssistantTarget, TargetKv } from './assistant.js';

/** A run of slots [slot, slot + count) stored at rows [row, row + count) of a layer's buffers. */
export interface KvRun {
  slot: number;
  row: number;
  count: number;
}

/**
 * The runs of rows that hold slots [from, to) of a cache of `shape`, in slot order: one run, or
 * with a ring two where the slots wrap. Throws InvalidInputError where the ring no longer holds
 * them all (to - from over its rows) or the range is not within the capacity.
 */
export function kvRuns(shape: KvShape, from: number, to: number): KvRun[] {
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || to < from || to > shape.capacity)
    throw new InvalidInputError(`kvRuns: slots [${from}, ${to}) not within [0, ${shape.capacity}]`);
  if (shape.ring && to - from > shape.ring)
    throw new InvalidInputError(`kvRuns: ${to - from} slots asked of a ring of ${shape.ring} rows`);
  const runs: KvRun[] = [];
  for (let slot = from; slot < to; ) {
    const row = kvRowOf(shape, slot);
    const count = Math.min(to - slot, shape.ring ? shape.ring - row : to - slot);
    runs.push({ slot, row, count });
    slot += count;
  }
  return runs;
}

/**
 * Slots [from, to) of a cache of `shape` as f32 [to, kvHeads · headDim] by slot (zeros below
 * `from`), from `words`: the rows of {@link kvRuns} back to back, in the cache's format.
 */
export function kvSlotsOf(shape: KvShape, words: Uint32Array, from: number, to: number): Float32Array {
  const row = shape.kvHeads * shape.headDim;
  const n = (to - from) * row;
  const values =
    shape.format === 'f16' ? unpackHalves(words, n) : new Float32Array(words.buffer, words.byteOffset, n);
  const out = new Float32Array(to * row);
  out.set(values, from * row);
  return out;
}

/**
 * `runner` as an {@link AssistantTarget} (see the header). Throws InvalidInputError, naming the
 * assistant, unless it is a GpuRunner that keeps its features (GpuRunnerOptions.features).
 */
export async function gpuTarget(runner: ModelRunner, name: string): Promise<AssistantTarget> {
  if (!(runner instanceof GpuRunner))
    throw new InvalidInputError(
      `draft assistant ${name}: its target runs on neither the reference runner nor the GPU runner`,
    );
  if (!runner.featureStore)
    throw new InvalidInputError(
      `draft assistant ${name}: the target runner does not keep its features (features: true)`,
    );
  const ctx = runner.gpu;
  const Hb = runner.spec.hidden;
  const scale = Math.sqrt(Hb);
  await Embedding.prepare(ctx, runner.embedding.format, scale);
  const embed = new Embedding(ctx, new BindGroupCache(ctx.device), runner.embedding, { scale });
  const ids = createBuffer(
    ctx,
    MAX_FORWARD_TOKENS * 4,
    'assistant-ids',
    GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
  );
  const rows = createBuffer(
    ctx,
    MAX_FORWARD_TOKENS * Hb * 4,
    'assistant-embedded', // [MAX_FORWARD_TOKENS, Hb]
    GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
  );
  const staging = { buffer: undefined as GPUBuffer | undefined };
  /** A MAP_READ buffer of at least `bytes`, kept and grown. */
  const stagingOf = (bytes: number): GPUBuffer => {
    if (!staging.buffer || staging.buffer.size < bytes) {
      staging.buffer?.destroy();
      staging.buffer = ctx.device.createBuffer({
        label: 'assistant-readback',
        size: Math.max(bytes, 4 * Hb * MAX_FORWARD_TOKENS),
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      });
    }
    return staging.buffer;
  };
  return {
    spec: runner.spec,
    get kvLength() {
      return runner.kvLength;
    },
    features: (from, to) => runner.features(from, to),
    async embedRows(tokens) {
      // In pieces of the buffers' MAX_FORWARD_TOKENS rows: one submission and readback each.
      const out = new Float32Array(tokens.length * Hb);
      for (let at = 0; at < tokens.length; at += MAX_FORWARD_TOKENS) {
        const piece = tokens.slice(at, at + MAX_FORWARD_TOKENS);
        writeBuffer(ctx, ids, Uint32Array.from(piece));
        const bytes = piece.length * Hb * 4;
        const read = stagingOf(bytes);
        const enc = ctx.device.createCommandEncoder({ label: 'assistant-embed' });
        const pass = enc.beginComputePass({ label: 'assistant-embed' });
        embed.encode(pass, ids, rows, piece.length);
        pass.end();
        enc.copyBufferToBuffer(rows, 0, read, 0, bytes);
        ctx.counter.submit([enc.finish()]);
        out.set(new Float32Array(await readStaging(ctx, read, bytes)), at * Hb);
      }
      return out;
    },
    async kvRows(ranges) {
      // Every layer's K runs then V runs, back to back in one staging buffer: one readback.
      const plan = [...ranges].map(([layer, [from, to]]) => {
        const cache = runner.kvCache(layer);
        if (!cache)
          throw new InvalidInputError(
            `draft assistant ${name}: the target's layer ${layer} holds no KV cache`,
          );
        if (to > runner.kvLength)
          throw new InvalidInputError(
            `draft assistant ${name}: slots up to ${to} asked, the target holds ${runner.kvLength}`,
          );
        return { layer, from, to, cache, runs: kvRuns(cache.shape, from, to) };
      });
      const slotBytes = (shape: KvShape) => kvWordsPerSlot(shape) * 4;
      const total = plan.reduce((n, p) => n + 2 * (p.to - p.from) * slotBytes(p.cache.shape), 0);
      const kv: { keys: Float32Array[]; values: Float32Array[] } = { keys: [], values: [] };
      if (total === 0) return kv;
      const out = stagingOf(total);
      const enc = ctx.device.createCommandEncoder({ label: 'assistant-kv' });
      let at = 0;
      for (const p of plan)
        for (const buffer of [p.cache.buffers.k, p.cache.buffers.v])
          for (const r of p.runs) {
            const b = slotBytes(p.cache.shape);
            enc.copyBufferToBuffer(buffer, r.row * b, out, at, r.count * b);
            at += r.count * b;
          }
      ctx.counter.submit([enc.finish()]);
      const words = new Uint32Array(await readStaging(ctx, out, total));
      at = 0;
      for (const p of plan) {
        const n = ((p.to - p.from) * slotBytes(p.cache.shape)) / 4;
        kv.keys[p.layer] = kvSlotsOf(p.cache.shape, words.subarray(at, at + n), p.from, p.to);
        kv.values[p.layer] = kvSlotsOf(p.cache.shape, words.subarray(at + n, at + 2 * n), p.from, p.to);
        at += 2 * n;
      }
      return kv satisfies TargetKv;
    },
    dispose() {
      embed.destroy();
      for (const b of [ids, rows, staging.buffer]) b?.destroy();
    },
  };
}
