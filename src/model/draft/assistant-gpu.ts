// Gemma 4's assistant beside a GPU target (assistant.ts has the architecture): an AssistantTarget
// over a GpuRunner on the same device. Per assistant forward it copies back, in one submission
// each, the rows' target embeddings (the target's own table, gathered and scaled by √Hb by the
// Embedding kernel: the same values as the target's embedding stage) and, per target layer the
// assistant attends over, the K and V slots its rows read (the committed slots [from, P): the
// whole context on full layers, the window + 1 newest on sliding ones, read out of the ring) that
// it does not hold yet: committed rows do not change until the target drops some
// (GpuRunner.trims), so it keeps what it read, and a draft forward after the first copies back
// only the slots the target committed since. The features come back through GpuRunner.features.
// The assistant's step then runs on the host (assistantStep): a host round trip per draft
// forward (one per depth of a chain or a tree's wave group), and no assistant weights on the
// device.
import { InvalidInputError } from '../../errors.js';
import { createBuffer, writeBuffer } from '../../gpu/buffers.js';
import { BindGroupCache } from '../../kernels/bind.js';
import { Embedding } from '../../kernels/embed/embed.js';
import { decodeKvWords, type KvShape, kvRowOf, kvWordsPerSlot } from '../../kernels/kv/kv.js';
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
 * Writes slots [from, to) of a cache of `shape`, from `words` (the rows of {@link kvRuns} back to
 * back, in the cache's format), into `out` [≥ to, kvHeads · headDim] as f32 by slot (`keys` of a
 * rotated cache turned back: the host's queries are plain).
 */
export function kvSlotsInto(
  shape: KvShape,
  words: Uint32Array,
  from: number,
  to: number,
  out: Float32Array,
  keys: boolean,
): void {
  const n = (to - from) * kvWordsPerSlot(shape);
  out.set(decodeKvWords(shape, words.subarray(0, n), keys), from * shape.kvHeads * shape.headDim);
}

/** A layer's K and V as read so far: [capacity, kvHeads · headDim] by slot, valid at [lo, hi). */
interface HeldKv {
  keys: Float32Array;
  values: Float32Array;
  lo: number;
  hi: number;
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
  const held = new Map<number, HeldKv>();
  let trims = runner.trims;
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
      // Committed rows never change until a trim drops some: until then what was read is kept,
      // and a read copies only the slots asked for that it does not hold.
      if (runner.trims !== trims) {
        held.clear();
        trims = runner.trims;
      }
      const plan = [...ranges].flatMap(([layer, [from, to]]) => {
        const cache = runner.kvCache(layer);
        if (!cache)
          throw new InvalidInputError(
            `draft assistant ${name}: the target's layer ${layer} holds no KV cache`,
          );
        if (to > runner.kvLength)
          throw new InvalidInputError(
            `draft assistant ${name}: slots up to ${to} asked, the target holds ${runner.kvLength}`,
          );
        const { shape } = cache;
        let h = held.get(layer);
        if (!h) {
          const size = shape.capacity * shape.kvHeads * shape.headDim;
          h = { keys: new Float32Array(size), values: new Float32Array(size), lo: 0, hi: 0 };
          held.set(layer, h);
        }
        // The slots past those held when [from, to) joins them, else [from, to) afresh.
        const joins = from >= h.lo && from <= h.hi;
        const start = joins ? Math.max(h.hi, from) : from;
        if (start >= to) return [];
        return [{ h, cache, from: start, to, lo: joins ? h.lo : from, runs: kvRuns(shape, start, to) }];
      });
      const kv: { keys: Float32Array[]; values: Float32Array[] } = { keys: [], values: [] };
      for (const [l, h] of held) {
        kv.keys[l] = h.keys;
        kv.values[l] = h.values;
      }
      if (plan.length === 0) return kv;
      // Every layer's K runs then V runs, back to back in one staging buffer: one readback.
      const slotBytes = (shape: KvShape) => kvWordsPerSlot(shape) * 4;
      const total = plan.reduce((n, p) => n + 2 * (p.to - p.from) * slotBytes(p.cache.shape), 0);
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
        kvSlotsInto(p.cache.shape, words.subarray(at, at + n), p.from, p.to, p.h.keys, true);
        kvSlotsInto(p.cache.shape, words.subarray(at + n, at + 2 * n), p.from, p.to, p.h.values, false);
        p.h.lo = p.lo;
        p.h.hi = p.to;
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
