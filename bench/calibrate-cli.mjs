// GPTQ calibration cost on the CPU (bench/calibrate.ts) in Node, through Vite's SSR loader (no build
// needed): prints one JSON report on stdout, progress on stderr.
// Usage: node bench/calibrate-cli.mjs [--windows N] [--heldout-windows N] [--rotate none|hadamard]
//   [--model DIR] [--text FILE] [--heldout FILE]
import { parseArgs } from 'node:util';
import { withBareSources } from './ssr.mjs';

const { values } = parseArgs({
  options: {
    windows: { type: 'string', default: '64' },
    'heldout-windows': { type: 'string', default: '8' },
    rotate: { type: 'string', default: 'hadamard' },
    model: { type: 'string', default: 'models/kjv-target' },
    text: { type: 'string', default: 'models/kjv-calibration.txt' },
    heldout: { type: 'string', default: 'models/kjv-heldout.txt' },
  },
});
const windows = Number(values.windows);
const heldoutWindows = Number(values['heldout-windows']);
const counts = [windows, heldoutWindows];
if (!counts.every((c) => Number.isInteger(c) && c >= 1) || !['none', 'hadamard'].includes(values.rotate)) {
  process.stderr.write('calibrate: window counts must be positive integers, --rotate none or hadamard\n');
  process.exit(1);
}

await withBareSources(async (load) => {
  const { measureCalibration } = await load('/bench/calibrate.ts');
  const report = await measureCalibration({
    model: values.model,
    text: values.text,
    windows,
    heldout: values.heldout,
    heldoutWindows,
    rotate: values.rotate,
    onWindow: (done, total) => process.stderr.write(`calibrate: window ${done}/${total}\n`),
  });
  report.date = new Date().toISOString();
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
});
