// The measuring half of bench/gpu-run.sh's sections 1-5, on any GpuContext: the Chromium page
// (bench/gpu-page.ts) and Node (bench/gpu-node.ts, which the device kit bundles) both call it.
//   kernels:  GEMV bandwidth per format against a copy; decode attention split vs unsplit
//   model:    a checkpoint's decode per format and its verify-cost curve
//   families: prefill and decode of each checkpoint at f16 and int4, in one run
//   moe:      the same at int4 for a mixture of experts beside a dense model of its active size
//   gemma4:   the same at int4 for Gemma 4 E2B beside Gemma 3 1B
// `smoke` shrinks every shape (a CPU adapter runs it in minutes).
import type { GpuContext } from '../src/gpu/device.js';
import { runDecodeBench, runFamilyBench } from './gpu.js';
import { runAttentionBench, runGemvBandwidthBench } from './kernels.js';

/** Llama-3.2-1B's decode GEMVs [N, K]: q/o, gate/up, down, the tied LM head; smoke: the same at hidden 256. */
const SHAPES: Record<'full' | 'smoke', [number, number][]> = {
  full: [
    [2048, 2048],
    [8192, 2048],
    [2048, 8192],
    [128256, 2048],
  ],
  smoke: [
    [96, 256],
    [384, 256],
    [256, 512],
    [1024, 256],
  ],
};

/** Options of {@link runKernelsPart}, {@link runModelPart} and {@link runFamiliesPart}. */
export interface PartOptions {
  smoke: boolean;
  log: (line: string) => void;
}

/** Section 1 and 3: GEMV bandwidth per format, attention split against unsplit. */
export async function runKernelsPart(ctx: GpuContext, o: PartOptions) {
  const gemv = await runGemvBandwidthBench(ctx, {
    shapes: SHAPES[o.smoke ? 'smoke' : 'full'],
    ...(o.smoke ? { passBytes: 1 << 20, spreadBytes: 256 << 10, reps: 2 } : {}),
    log: o.log,
  });
  const attention = await runAttentionBench(ctx, {
    quick: o.smoke,
    contexts: [512, 4096],
    ...(o.smoke ? { formats: ['f16' as const] } : {}),
    log: o.log,
  });
  return { gemv, attention };
}

/** Sections 2 and 4: the checkpoint at `model` (a folder URL) per format, and its verify-cost curve. */
export async function runModelPart(ctx: GpuContext, model: string, o: PartOptions) {
  return runDecodeBench(ctx, {
    model,
    quants: ['f16', 'int8', 'int4', 'int2'],
    prompt: [791, 4062, 1403, 2162, 927, 279, 3290, 13], // ids under the smoke vocabulary's 4096
    tokens: o.smoke ? 8 : 64,
    verifyReps: o.smoke ? 1 : 5,
    log: o.log,
  });
}

/** Section 5: each named checkpoint at f16 and int4 (default 512 prompt and 64 decode tokens). */
export async function runFamiliesPart(
  ctx: GpuContext,
  models: { name: string; url: string; expertBudget?: number }[],
  o: PartOptions & { promptTokens?: number; tokens?: number },
) {
  return {
    families: await runFamilyBench(ctx, {
      models,
      quants: ['f16', 'int4'],
      promptTokens: o.promptTokens ?? (o.smoke ? 16 : 512),
      tokens: o.tokens ?? (o.smoke ? 8 : 64),
      log: o.log,
    }),
  };
}

/**
 * The mixture section: each named checkpoint at int4 only (a mixture's are stored packed, see
 * test/fixtures/scale-packed.ts), default 16 prompt and 8 decode tokens.
 */
export async function runMoePart(
  ctx: GpuContext,
  models: { name: string; url: string; expertBudget?: number }[],
  o: PartOptions & { promptTokens?: number; tokens?: number },
) {
  return {
    moe: await runFamilyBench(ctx, {
      models,
      quants: ['int4'],
      promptTokens: o.promptTokens ?? 16,
      tokens: o.tokens ?? 8,
      log: o.log,
    }),
  };
}

/**
 * The Gemma 4 section: each named checkpoint at int4 only (written packed, as the mixture's are),
 * default 16 prompt and 8 decode tokens: E2B decodes at a CPU's pace on a software adapter.
 */
export async function runGemma4Part(
  ctx: GpuContext,
  models: { name: string; url: string }[],
  o: PartOptions & { promptTokens?: number; tokens?: number },
) {
  return {
    gemma4: await runFamilyBench(ctx, {
      models,
      quants: ['int4'],
      promptTokens: o.promptTokens ?? 16,
      tokens: o.tokens ?? 8,
      log: o.log,
    }),
  };
}
