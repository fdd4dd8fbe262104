// Quantization-quality benchmark (bench/quality.ts) in Node: loads the TypeScript through Vite's
// SSR loader (no build needed) and prints the markdown table; with --json, one JSON object on
// stdout and the table on stderr.
// Usage: node bench/quality-cli.mjs [--json] [--chunks N|all] [--model DIR] [--text FILE]
//   [--calibration FILE] [--calibrated int4,int2|none] [--quants int8,int4,int2,w8a8|none]
//   [--rotations none,hadamard] [--gguf q4_k_m,q3_k,iq2_xs,...|all]
//   --chunks N  chunks of 256 held-out tokens to score (default 4, about 10 minutes on a busy 2-core machine, most of it calibrating: Hessians, GPTQ and the K-quant refinement; --chunks all took 33 minutes; the text has 82). The run scores
//               each chunk with f16 once and with each configuration (8 by default) once.
//   --quants    the round-to-nearest weft rows (default int8,int4,int2,w8a8); --calibrated the
//               GPTQ ones; each at every rotation of --rotations (default none,hadamard).
//   --gguf      GGUF rows: each GGML type or llama-quantize mix (case-insensitive; all: every one
//               weft writes) as weft's GGUF writer stores the model with the calibration text's
//               importance matrix, read back through the GGUF loader; needs --calibration. Each
//               row costs one more forward per chunk (about 1.4 s on a busy 2-core machine) and
//               its quantisation (up to 2 minutes there for IQ3_S).
//   --kv        the KV cache formats instead (bench/kv-quality.ts): --kv-models (default the two
//               trained models) at --contexts (default 256,1024,2048), f32 / int8 / int4 caches,
//               keys rotated or not, against the f16 cache.
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
    quants: { type: 'string', default: 'int8,int4,int2,w8a8' },
    rotations: { type: 'string', default: 'none,hadamard' },
    gguf: { type: 'string', default: 'none' },
    kv: { type: 'boolean', default: false },
    'kv-models': { type: 'string', default: 'models/kjv-target,test/fixtures/qwen35-trained' },
    contexts: { type: 'string', default: '256,1024,2048' },
  },
});
const fail = (message) => {
  process.stderr.write(`quality: ${message}\n`);
  process.exit(1);
};
/** A comma list of `allowed` names (none: empty, unless `none` is a name), or exits naming the option. */
const list = (option, allowed, value = values[option]) => {
  const names = value === 'none' && !allowed.includes('none') ? [] : value.split(',');
  if (names.some((q) => !allowed.includes(q)))
    fail(`--${option} "${values[option]}" must be none or a list of ${allowed.join(',')}`);
  return names;
};
// --calibrated none: no GPTQ rows (and, without --gguf, no Hessians, which take a few minutes here).
const calibrated = list('calibrated', ['int8', 'int4', 'int2', 'w8a8']);
const quants = list('quants', ['int8', 'int4', 'int2', 'w8a8']);
const rotations = list('rotations', ['none', 'hadamard']);
const chunks = values.chunks === 'all' ? Number.POSITIVE_INFINITY : Number(values.chunks);
if (chunks !== Number.POSITIVE_INFINITY && (!Number.isInteger(chunks) || chunks < 1))
  fail(`--chunks "${values.chunks}" must be a positive integer`);

// --kv: the KV cache formats' rows instead (bench/kv-quality.ts): each of --kv-models at each of
// --contexts, every cache format with and without key rotation, against the f16 cache.
if (values.kv) {
  const contexts = values.contexts.split(',').map(Number);
  if (contexts.some((c) => !Number.isInteger(c) || c < 2))
    fail(`--contexts "${values.contexts}" must be a list of integers >= 2`);
  await withBareSources(async (load) => {
    const { measureKvQuality, kvQualityTable } = await load('/bench/kv-quality.ts');
    const report = await measureKvQuality({
      models: values['kv-models'].split(','),
      text: values.text,
      contexts,
      onRow: (r) =>
        process.stderr.write(
          `kv quality: ${r.model} ${r.context} ${r.kv}${r.rotate ? ' rotated' : ''}: kld ${r.kld.toExponential(2)}\n`,
        ),
    });
    report.date = new Date().toISOString();
    printReport(report, kvQualityTable(report), values.json);
  });
  process.exit(0);
}

await withBareSources(async (load) => {
  const { GGUF_QUANTS, measureQuality, qualityTable } = await load('/bench/quality.ts');
  const gguf =
    values.gguf.toLowerCase() === 'all'
      ? GGUF_QUANTS
      : list(
          'gguf',
          GGUF_QUANTS.map((q) => q.toLowerCase()),
          values.gguf.toLowerCase(),
        ).map((q) => q.toUpperCase());
  const calibrating = calibrated.length > 0 || gguf.length > 0;
  const report = await measureQuality({
    model: values.model,
    text: values.text,
    chunks,
    quants,
    rotations,
    ...(calibrating ? { calibration: { text: values.calibration, quants: calibrated } } : {}),
    ...(gguf.length > 0 ? { gguf } : {}),
    onChunk: (done, total) => process.stderr.write(`quality: chunk ${done}/${total}\n`),
  });
  report.date = new Date().toISOString();
  printReport(report, qualityTable(report), values.json);
});
