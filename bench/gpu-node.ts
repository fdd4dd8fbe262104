// bench/gpu-run.sh's sections 1-5 in Node, through Dawn (npm `webgpu`) on the Vulkan driver the
// caller chose: what `bench/gpu-cli.mjs --vulkan` runs here, and what the device kit
// (bench/device-kit.sh) bundles for a lent GPU machine, which has no Chromium to run the page.
// The random checkpoints (test/fixtures/scale-dir.ts) are written once into a cache folder and
// served over HTTP with Range, as for the page, so the runner reads them as it reads a hub.
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { GpuContext } from '../src/gpu/device.js';
import { LFM2_8B_A1B_LAYERS, type ScaleShape } from '../test/fixtures/scale.js';
import { writeScaleDir } from '../test/fixtures/scale-dir.js';
import { cachedPackedScaleDir } from '../test/fixtures/scale-packed.js';
import { serveDir } from '../test/scale/serve-dir.js';
import { runFamiliesPart, runGemma4Part, runKernelsPart, runModelPart, runMoePart } from './gpu-sections.js';

/** Config keys the smoke model overrides in Llama-3.2-1B's config.json. */
export const SMOKE_CONFIG = {
  hidden_size: 256,
  intermediate_size: 1024,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 64,
  vocab_size: 4096,
};

/** Shapes of section 5, and the keys their smoke models override (4 layers: Qwen3.5's 3 + 1). */
const SMOKE_FAMILY = {
  hidden_size: 256,
  intermediate_size: 512,
  num_hidden_layers: 4,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 64,
  vocab_size: 4096,
};
export const FAMILIES: [ScaleShape, Record<string, unknown>][] = [
  ['qwen3-0.6b', SMOKE_FAMILY],
  [
    'qwen3.5-0.8b',
    {
      ...SMOKE_FAMILY,
      linear_num_key_heads: 2,
      linear_num_value_heads: 2,
      linear_key_head_dim: 64,
      linear_value_head_dim: 64,
    },
  ],
];

/**
 * The mixture section's models: LFM2-8B-A1B as published (8.34B weights, 1.56B active), and a
 * dense LFM2 of its active size: the same hidden 2048, 24 layers of the same kinds, heads and
 * vocabulary, with one SwiGLU MLP of 7168 in every layer, as wide as the 4 chosen experts of 1792
 * together and as the mixture's 2 dense layers, so its 1.556B weights are the mixture's active
 * ones but for the routers (22 × 32 × 2048). Smoke: hidden 256, 4 layers (1 dense), 8 experts of
 * 256 (2 chosen), the dense twin's MLP 512; vocab 4096.
 */
const SMOKE_MOE = {
  hidden_size: 256,
  num_hidden_layers: 4,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  layer_types: ['conv', 'conv', 'full_attention', 'conv'],
  vocab_size: 4096,
};
export const MOE_MODELS: {
  name: string;
  shape: ScaleShape;
  config: Record<string, unknown>;
  smoke: Record<string, unknown>;
}[] = [
  {
    name: 'lfm2-8b-a1b',
    shape: 'lfm2-8b-a1b',
    config: {},
    smoke: {
      ...SMOKE_MOE,
      intermediate_size: 512,
      moe_intermediate_size: 256,
      num_experts: 8,
      num_experts_per_tok: 2,
      num_dense_layers: 1,
    },
  },
  {
    name: 'lfm2-a1b-dense',
    shape: 'lfm2-350m',
    config: {
      hidden_size: 2048,
      block_dim: 2048,
      block_ff_dim: 7168,
      block_auto_adjust_ff_dim: false,
      num_hidden_layers: 24,
      num_attention_heads: 32,
      num_key_value_heads: 8,
      layer_types: LFM2_8B_A1B_LAYERS,
    },
    smoke: { ...SMOKE_MOE, block_dim: 256, block_ff_dim: 512, block_auto_adjust_ff_dim: false },
  },
];

/**
 * The Gemma 4 section's models, both written packed at int4: Gemma 4 E2B as published (5.1B
 * weights, 2.3B of them its per-layer table, of which a token reads one row) beside Gemma 3 1B
 * as published, the nearest dense Gemma of what E2B multiplies per token. Smoke: hidden 256, vocab
 * 4096; E2B 5 layers (2 KV-shared), per-layer inputs of 64; Gemma 3 4 layers.
 */
const SMOKE_GEMMA = {
  hidden_size: 256,
  intermediate_size: 512,
  num_attention_heads: 4,
  vocab_size: 4096,
};
export const GEMMA4_MODELS: {
  name: string;
  shape: ScaleShape;
  smoke: Record<string, unknown>;
}[] = [
  {
    name: 'gemma-4-e2b',
    shape: 'gemma-4-e2b',
    smoke: {
      ...SMOKE_GEMMA,
      num_hidden_layers: 5,
      num_kv_shared_layers: 2,
      hidden_size_per_layer_input: 64,
      vocab_size_per_layer_input: 4096,
      layer_types: [
        'sliding_attention',
        'sliding_attention',
        'full_attention',
        'sliding_attention',
        'full_attention',
      ],
    },
  },
  { name: 'gemma-3-1b', shape: 'gemma-3-1b', smoke: { ...SMOKE_GEMMA, num_hidden_layers: 4 } },
];

/**
 * Writes the random checkpoint of `shape` (with `smokeConfig` over its config in a smoke run) into
 * <cache>/<shape>-random (or -smoke) unless a finished one is there (its `written.json` is the
 * last file written); returns the folder.
 */
export async function writeModel(
  cache: string,
  shape: ScaleShape,
  smokeConfig: Record<string, unknown>,
  smoke: boolean,
  log: (line: string) => void,
): Promise<string> {
  const dir = join(cache, `${shape}-${smoke ? 'smoke' : 'random'}`);
  const marker = `${dir}/written.json`;
  const config = smoke ? smokeConfig : {};
  const wanted = JSON.stringify({ shape, seed: 1, config });
  if ((await readFile(marker, 'utf8').catch(() => '')) === wanted) return dir;
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const t0 = performance.now();
  const { weightBytes } = await writeScaleDir(dir, shape, 1, config);
  await writeFile(marker, wanted);
  log(`wrote ${dir} (${weightBytes} bytes) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return dir;
}

/** The parts of {@link runNodeSections}: sections 1 and 3, 2 and 4, 5, the mixture's and Gemma 4's. */
export type NodePart = 'kernels' | 'model' | 'families' | 'moe' | 'gemma4';

export interface NodeSectionsOptions {
  smoke: boolean;
  parts: readonly NodePart[];
  /** Folder of the random checkpoints (bench/.cache here). */
  cache: string;
  /** Section 5's prompt and decode tokens (default 512 and 64; 16 and 8 smoke). */
  promptTokens?: number;
  tokens?: number;
  /** The mixture's and Gemma 4's prompt and decode tokens (default 16 and 8). */
  moePromptTokens?: number;
  moeTokens?: number;
  log: (line: string) => void;
  /** Called with the report so far after each part, so a run cut short keeps what it measured. */
  onPart?: (report: NodeReport) => Promise<void>;
}

/** What the page's parts return, gathered as bench/gpu-cli.mjs prints it. */
export interface NodeReport {
  smoke: boolean;
  host: 'node';
  kernels?: Record<string, unknown>;
  model: Record<string, unknown>;
}

/** Runs the chosen parts on `ctx`, in the page's order. */
export async function runNodeSections(ctx: GpuContext, o: NodeSectionsOptions): Promise<NodeReport> {
  const adapter = `${ctx.adapter.vendor} ${ctx.adapter.description}`.trim();
  const head = {
    adapter,
    kernels: ctx.kernels,
    features: ctx.features,
    timing: ctx.features.timestamps ? 'timestamp' : 'wall',
  };
  const report: NodeReport = { smoke: o.smoke, host: 'node', model: { ...head } };
  const part = { smoke: o.smoke, log: o.log };
  if (o.parts.includes('kernels')) {
    report.kernels = { ...head, ...(await runKernelsPart(ctx, part)) };
    await o.onPart?.(report);
  }
  if (o.parts.includes('model')) {
    const files = await serveDir(await writeModel(o.cache, 'llama-3.2-1b', SMOKE_CONFIG, o.smoke, o.log));
    try {
      Object.assign(report.model, await runModelPart(ctx, files.url, part));
    } finally {
      await files.close();
    }
    await o.onPart?.(report);
  }
  if (o.parts.includes('families')) {
    const served: { name: string; url: string; close(): Promise<void> }[] = [];
    try {
      for (const [shape, overrides] of FAMILIES)
        served.push({
          name: shape,
          ...(await serveDir(await writeModel(o.cache, shape, overrides, o.smoke, o.log))),
        });
      const models = served.map(({ name, url }) => ({ name, url }));
      Object.assign(
        report.model,
        await runFamiliesPart(ctx, models, { ...part, promptTokens: o.promptTokens, tokens: o.tokens }),
      );
    } finally {
      for (const m of served) await m.close();
    }
    await o.onPart?.(report);
  }
  if (o.parts.includes('moe')) {
    const served: { name: string; url: string; close(): Promise<void> }[] = [];
    try {
      for (const m of MOE_MODELS) {
        const name = `${m.name}${o.smoke ? '-smoke' : ''}`;
        const dir = await cachedPackedScaleDir(o.cache, name, m.shape, o.smoke ? m.smoke : m.config, o.log);
        served.push({ name: m.name, ...(await serveDir(dir)) });
      }
      const models: { name: string; url: string; expertBudget?: number }[] = served.map(({ name, url }) => ({
        name,
        url,
      }));
      // The mixture again with its experts paged: a GPU cache of under half of them (2 GiB of its
      // 4.36 GB at int4, 15 of 32 experts per layer; smoke: 4 of 8), the rest in CPU memory.
      const mixture = served[0]!;
      models.push({
        name: `${mixture.name}-paged`,
        url: mixture.url,
        expertBudget: o.smoke ? 1_400_000 : 2 * 2 ** 30,
      });
      Object.assign(
        report.model,
        await runMoePart(ctx, models, { ...part, promptTokens: o.moePromptTokens, tokens: o.moeTokens }),
      );
    } finally {
      for (const m of served) await m.close();
    }
    await o.onPart?.(report);
  }
  if (o.parts.includes('gemma4')) {
    const served: { name: string; url: string; close(): Promise<void> }[] = [];
    try {
      for (const m of GEMMA4_MODELS) {
        const name = `${m.name}${o.smoke ? '-smoke' : ''}`;
        const dir = await cachedPackedScaleDir(o.cache, name, m.shape, o.smoke ? m.smoke : {}, o.log);
        served.push({ name: m.name, ...(await serveDir(dir)) });
      }
      Object.assign(
        report.model,
        await runGemma4Part(
          ctx,
          served.map(({ name, url }) => ({ name, url })),
          { ...part, promptTokens: o.moePromptTokens, tokens: o.moeTokens },
        ),
      );
    } finally {
      for (const m of served) await m.close();
    }
    await o.onPart?.(report);
  }
  return report;
}
