// Launch occupancy of a decode step on real model shapes (bench/occupancy.ts), in Node through
// Vite's SSR loader (no build, no GPU): prints markdown tables; with --json, one JSON object on
// stdout and the tables on stderr. Then the prefill GEMM's arithmetic intensity per tile and per
// product at M = 256 and 512, and whether it is compute-bound on each device.
// Usage: node bench/occupancy-cli.mjs [--json] [--models llama-3.2-1b,qwen3-0.6b]
//   [--quants f16,int8,int4,int2] [--context 4096] [--attention]
//   --attention: attention's bytes, share of the step and predicted bandwidth at 4K and 32K keys for
//   each KV cache format (f16, int8, int4), at int4 weights.
import { parseArgs } from 'node:util';
import { printReport, withBareSources } from './ssr.mjs';

const { values } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    models: { type: 'string', default: 'llama-3.2-1b,qwen3-0.6b' },
    quants: { type: 'string', default: 'f16,int8,int4,int2' },
    context: { type: 'string', default: '4096' },
    // The attention table instead: each model at 4K and 32K keys, every KV cache format.
    attention: { type: 'boolean', default: false },
  },
});
const context = Number(values.context);
if (!Number.isInteger(context) || context < 1) {
  process.stderr.write(`occupancy: --context "${values.context}" must be a positive integer\n`);
  process.exit(1);
}
await withBareSources(async (load) => {
  if (values.attention) {
    const { attentionSummary, attentionTable } = await load('/bench/occupancy.ts');
    const rows = await attentionSummary(values.models.split(','));
    printReport({ rows }, attentionTable(rows), values.json);
    return;
  }
  const { occupancySummary, occupancyTable, prefillGemmIntensity, gemmIntensityTable } =
    await load('/bench/occupancy.ts');
  const summary = await occupancySummary(values.models.split(','), values.quants.split(','), context);
  const prefill = prefillGemmIntensity(values.quants.split(','));
  printReport(
    { ...summary, prefill },
    `${occupancyTable(summary)}\n\n${gemmIntensityTable(prefill)}`,
    values.json,
  );
});
