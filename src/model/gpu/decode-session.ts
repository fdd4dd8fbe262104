// The GPU runner's decode session: one token per step, each step queued before the CPU waits for
// the one before it, ids read back through a ring of two 4-byte buffers.
import { InvalidInputError } from '../../errors.js';
import { mapForRead } from '../../gpu/buffers.js';
import { countsSince, type GpuCounts } from '../../gpu/counters.js';
import type { GpuTimer } from '../../gpu/timing.js';
import type { DecodeSession, SamplerSpec } from '../runner.js';
import {
  assertNoSession,
  DECODE_VIS,
  encodePass,
  type RunnerCursor,
  type RunnerParts,
  stageInputs,
} from './pass.js';

/** What else {@link openDecodeSession} is told by its runner. */
export interface DecodeSessionHooks {
  /** KV cache slots of the runner. */
  capacity: number;
  /** The runner's profiler at each step's encoding, when one is set. */
  profiler: () => GpuTimer | undefined;
  /** What the device was asked between the last two ids returned (see GpuRunner.lastForward). */
  onCounts: (counts: GpuCounts) => void;
}

/**
 * Opens a decode session (see ModelRunner.decode). Step n runs one token at position start + n:
 * step 0 the CPU's `first`, every later step the id the step before it sampled, copied on the GPU
 * (`out → ids`). `next()` submits step n + 1 before it waits for step n's 4-byte readback, so the
 * GPU always has the next step queued while the CPU reads, streams and checks stop conditions; ids
 * come back through a ring of two MAP_READ buffers. A step writes one buffer (its positions and
 * slots); attention reads the context base from the slots.
 */
export function openDecodeSession(
  parts: RunnerParts,
  cur: RunnerCursor,
  first: number,
  sampler: SamplerSpec,
  steps: number,
  hooks: DecodeSessionHooks,
): DecodeSession {
  const { ctx, a, spec } = parts;
  ctx.assertAlive();
  assertNoSession(cur, 'decode');
  if (!Number.isInteger(first) || first < 0 || first >= spec.vocabSize)
    throw new InvalidInputError(`decode: token id ${first} is outside the vocabulary of ${spec.vocabSize}`);
  if (!Number.isInteger(steps) || steps < 1)
    throw new InvalidInputError(`decode: steps must be an integer >= 1, got ${steps}`);
  const start = cur.committed;
  // Step n reads the recurrent state of version v0 + n and writes the next: a step run
  // ahead and dropped leaves the committed state as it was.
  const v0 = cur.version;
  if (start + steps > hooks.capacity)
    throw new InvalidInputError(
      `decode: ${start} cached + ${steps} steps exceed the KV cache of ${hooks.capacity}`,
    );
  const session = {};
  cur.session = session;
  cur.lastTokens = 0;
  cur.lastRows = 0;
  const ring = [a.stepStaging0, a.stepStaging1];
  let before = ctx.counter.snapshot();
  // Step n: one token at position and slot start + n, its successor sampled at start + n + 1.
  const submit = (n: number): void => {
    const base = start + n;
    const enc = ctx.device.createCommandEncoder({ label: `decode-step-${n}` });
    stageInputs(ctx, a, enc, {
      ...(n === 0 ? { ids: [first] } : {}),
      positions: [base],
      slots: [base],
      vis: DECODE_VIS,
      rows: [0],
      samplePositions: [base + 1],
    });
    encodePass(parts, hooks.profiler(), enc, 1, 1, base, sampler, { version: v0 + n });
    enc.copyBufferToBuffer(a.out, 0, ring[n % 2]!, 0, 4);
    ctx.counter.submit([enc.finish()]);
  };
  submit(0);
  let returned = 0;
  let busy = false;
  return {
    next: async () => {
      if (cur.session !== session) throw new InvalidInputError('decode: the session is closed');
      if (busy) throw new InvalidInputError('decode: next() called before the last one returned');
      if (returned >= steps) throw new InvalidInputError(`decode: all ${steps} steps were read`);
      busy = true;
      try {
        const n = returned;
        const staging = ring[n % 2]!;
        const mapped = mapForRead(ctx, staging, 0, 4);
        mapped.catch(() => {}); // awaited below; a throw in submit must not leave it unhandled
        // Step n + 1 reads step n's id on the GPU: queue it before waiting for step n.
        if (n + 1 < steps) submit(n + 1);
        await mapped;
        const id = new Uint32Array(staging.getMappedRange(0, 4))[0]!;
        staging.unmap();
        if (cur.session === session) {
          returned++;
          cur.committed = start + returned;
          cur.version = v0 + returned;
        }
        const now = ctx.counter.snapshot();
        hooks.onCounts(countsSince(now, before));
        before = now;
        return id;
      } finally {
        busy = false;
      }
    },
    close: () => {
      if (cur.session === session) cur.session = undefined;
    },
  };
}
