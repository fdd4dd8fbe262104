// Page driver of bench/gpu-run.sh's sections, for bench/gpu-cli.mjs: `?part=kernels` measures GEMV
// bandwidth per format against a copy and decode attention split vs unsplit; `?part=model&model=URL`
// decodes the checkpoint there per format and measures its verify-cost curve; `?part=families&models=
// name=URL,...` times prefill and decode of each checkpoint at f16 and int4 in one run. Rows go as JSON into
// #result (data-done when finished, data-error on failure). `?smoke=1` shrinks every shape and
// accepts a software adapter; otherwise a software adapter (SwiftShader) is refused before anything
// runs, since its figures would say nothing about a GPU.

import { createGpuContext, describeAdapter } from '../src/gpu/device.js';
import { runDecodeBench, runFamilyBench } from './gpu.js';
import { runAttentionBench, runGemvBandwidthBench } from './kernels.js';
import { reportPage } from './page-result.js';

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

reportPage(async () => {
  const params = new URLSearchParams(location.search);
  const smoke = params.get('smoke') === '1';
  const ctx = await createGpuContext();
  const adapter = describeAdapter(ctx.adapter);
  console.log(`[gpu-run] adapter: ${adapter}`);
  if (!smoke && ctx.adapter.software)
    throw new Error(`adapter is ${adapter}: a software adapter, not a GPU (use --smoke to run on it)`);
  const log = (line: string) => console.log(`[gpu-run] ${line}`);
  const part = params.get('part');
  let out: Record<string, unknown>;
  if (part === 'kernels') {
    const gemv = await runGemvBandwidthBench(ctx, {
      shapes: SHAPES[smoke ? 'smoke' : 'full'],
      ...(smoke ? { passBytes: 1 << 20, spreadBytes: 256 << 10, reps: 2 } : {}),
      log,
    });
    const attention = await runAttentionBench(ctx, {
      quick: smoke,
      contexts: [512, 4096],
      ...(smoke ? { formats: ['f16' as const] } : {}),
      log,
    });
    out = { gemv, attention };
  } else if (part === 'model') {
    const model = params.get('model');
    if (!model) throw new Error('?part=model needs ?model=<checkpoint folder URL>');
    out = await runDecodeBench(ctx, {
      model,
      quants: ['f16', 'int8', 'int4', 'int2'],
      prompt: [791, 4062, 1403, 2162, 927, 279, 3290, 13], // ids under the smoke vocabulary's 4096
      tokens: smoke ? 8 : 64,
      verifyReps: smoke ? 1 : 5,
      log,
    });
  } else if (part === 'families') {
    // name=url pairs, comma-separated: each shape's checkpoint folder.
    const models = (params.get('models') ?? '').split(',').map((pair) => {
      const at = pair.indexOf('=');
      return { name: pair.slice(0, at), url: pair.slice(at + 1) };
    });
    if (models.some((m) => !m.name || !m.url)) throw new Error('?part=families needs ?models=name=url,...');
    out = {
      families: await runFamilyBench(ctx, {
        models,
        quants: ['f16', 'int4'],
        promptTokens: smoke ? 16 : 512,
        tokens: smoke ? 8 : 64,
        log,
      }),
    };
  } else throw new Error(`?part must be kernels, model or families, got ${part}`);
  return { adapter, features: ctx.features, timing: ctx.features.timestamps ? 'timestamp' : 'wall', ...out };
});
