// Page driver of the kernel benchmark: runs runKernelBench in this page's WebGPU context and puts
// the rows as JSON into #result (data-done when finished, data-error on failure), for
// bench/kernels-cli.mjs or a person to read. `?quick=1` cuts repetitions; `?formats=f16,int4` picks
// the matmul rows' weight formats.

import { createGpuContext, describeAdapter } from '../src/gpu/device.js';
import type { WeightFormat } from '../src/quant/formats.js';
import { runAttentionBench, runBatchCurve, runKernelBench, runQkvBench } from './kernels.js';
import { reportPage } from './page-result.js';

reportPage(async () => {
  const query = new URLSearchParams(location.search);
  const quick = query.get('quick') === '1';
  const ctx = await createGpuContext();
  const adapter = describeAdapter(ctx.adapter);
  console.log(`[bench] adapter: ${adapter}`);
  const log = (line: string) => console.log(`[bench] ${line}`);
  // `?only=attention`: attention and q|k|v rows only; `?only=batch`: the batch curve only;
  // `?only=matmul`: the matmul rows only.
  const only = query.get('only');
  const formats = query.get('formats')?.split(',') as WeightFormat[] | undefined;
  const batch = only === 'batch' ? await runBatchCurve(ctx, { quick, log }) : [];
  const rows =
    only === null || only === 'matmul'
      ? await runKernelBench(ctx, { quick, log, ...(formats ? { formats } : {}) })
      : [];
  const attention = only === null || only === 'attention' ? await runAttentionBench(ctx, { quick, log }) : [];
  const qkv = only === null || only === 'attention' ? await runQkvBench(ctx, { quick, log }) : [];
  return { adapter, features: ctx.features, rows, batch, attention, qkv };
});
