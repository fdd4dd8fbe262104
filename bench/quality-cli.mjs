// Quantization-quality benchmark (bench/quality.ts) in Node: loads the TypeScript through Vite's
// SSR loader (no build needed) and prints the markdown table; with --json, one JSON object on
// stdout and the table on stderr.
// Usage: node bench/quality-cli.mjs [--json] [--chunks N|all] [--model DIR] [--text FILE]
//   [--calibration FILE] [--calibrated int4,int2|none]
//   --chunks N  chunks of 256 held-out tokens to score (default 4, about 10 minutes on a busy 2-core machine, most of it calibrating: Hessians, GPTQ and the K-quant refinement; --chunks all took 33 minutes; the text has 82). The run scores
//               each chunk with f16 once and with each of the 8 configurations once.
import { parseArgs } from 'node:util';
import { printReport, withBareSources } from './ssr.mjs';

const { values } = parseArgs({
  options: {
    json: { type: 'boolean', default: false },
    chunks: { type: 'string', default: '4' },
    model: { type: 'string', default: 'models/kjv-target' },
    text: { type: 'string', default: 'models/kjv-heldout.txt' },
    calibration: { type: 'string', default: 'models/kjv-calibration.txt' },
    calibrated: { type: 'string', default: 'int4,int2' },
  },
});
// --calibrated none: round-to-nearest rows only (no Hessians, which take a few minutes here).
const calibrated = values.calibrated === 'none' ? [] : values.calibrated.split(',');
if (calibrated.some((q) => !['int8', 'int4', 'int2', 'w8a8'].includes(q))) {
  process.stderr.write(
    `quality: --calibrated "${values.calibrated}" must be none or a list of int8,int4,int2,w8a8\n`,
  );
  process.exit(1);
}
const chunks = values.chunks === 'all' ? Number.POSITIVE_INFINITY : Number(values.chunks);
if (chunks !== Number.POSITIVE_INFINITY && (!Number.isInteger(chunks) || chunks < 1)) {
  process.stderr.write(`quality: --chunks "${values.chunks}" must be a positive integer\n`);
  process.exit(1);
}

await withBareSources(async (load) => {
  const { measureQuality, qualityTable } = await load('/bench/quality.ts');
  const report = await measureQuality({
    model: values.model,
    text: values.text,
    chunks,
    quants: ['int8', 'int4', 'int2', 'w8a8'],
    ...(calibrated.length > 0 ? { calibration: { text: values.calibration, quants: calibrated } } : {}),
    onChunk: (done, total) => process.stderr.write(`quality: chunk ${done}/${total}\n`),
  });
  report.date = new Date().toISOString();
  printReport(report, qualityTable(report), values.json);
});
