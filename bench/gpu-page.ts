// Page driver of bench/gpu-run.sh's sections, for bench/gpu-cli.mjs: `?part=kernels` measures GEMV
// bandwidth per format against a copy and decode attention split vs unsplit; `?part=model&model=URL`
// decodes the checkpoint there per format and measures its verify-cost curve; `?part=families&models=
// name=URL,...` times prefill and decode of each checkpoint at f16 and int4 in one run. Rows go as JSON into
// #result (data-done when finished, data-error on failure). `?smoke=1` shrinks every shape and
// accepts a software adapter; otherwise a software adapter (SwiftShader) is refused before anything
// runs, since its figures would say nothing about a GPU.

import { createGpuContext, describeAdapter } from '../src/gpu/device.js';
import { runFamiliesPart, runKernelsPart, runModelPart } from './gpu-sections.js';
import { reportPage } from './page-result.js';

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
  if (part === 'kernels') out = await runKernelsPart(ctx, { smoke, log });
  else if (part === 'model') {
    const model = params.get('model');
    if (!model) throw new Error('?part=model needs ?model=<checkpoint folder URL>');
    out = await runModelPart(ctx, model, { smoke, log });
  } else if (part === 'families') {
    // name=url pairs, comma-separated: each shape's checkpoint folder.
    const models = (params.get('models') ?? '').split(',').map((pair) => {
      const at = pair.indexOf('=');
      return { name: pair.slice(0, at), url: pair.slice(at + 1) };
    });
    if (models.some((m) => !m.name || !m.url)) throw new Error('?part=families needs ?models=name=url,...');
    out = await runFamiliesPart(ctx, models, { smoke, log });
  } else throw new Error(`?part must be kernels, model or families, got ${part}`);
  return { adapter, features: ctx.features, timing: ctx.features.timestamps ? 'timestamp' : 'wall', ...out };
});
