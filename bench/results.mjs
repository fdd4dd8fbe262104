// Regenerates bench/RESULTS.md: runs the benchmarks one after another and writes their tables.
//   npm run bench:results [-- --quick]
// --quick: the browser benchmark's --quick matrix, bench:quality on 2 chunks, bench:spec --quick
// --cpu at budgets 4, 8, 16 and 32 (tokens per pass from the reference forward: a SwiftShader run
// of it takes far longer than the rest) with the verify-cost curve from a GPU run without drafters,
// bench:steer --quick and bench:kernels --quick. Without --quick every benchmark runs in full.
// The section of real-GPU runs (bench/gpu-run.sh) is kept.
//   node bench/results.mjs --append-gpu <report.json> [--gpu-sections <text>]   (used by bench/gpu-run.sh)
// appends one run: the text of bench/gpu-cli.mjs's sections, then the browser report's tables.
// WEFT_RESULTS_FILE names another file than bench/RESULTS.md (gpu-run.sh --smoke appends to one in
// bench/.cache).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { machine, speedMarkdown } from './report.mjs';

const FILE = process.env.WEFT_RESULTS_FILE ?? 'bench/RESULTS.md';
const GPU_HEADING = '## Runs on a real GPU';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    'append-gpu': { type: 'string' },
    'gpu-sections': { type: 'string' },
  },
});

/** Runs `npm run <script> -- args`; returns stdout, or throws with the tail of stderr. */
function npmRun(script, args) {
  const t0 = Date.now();
  process.stderr.write(`bench:results: npm run ${script} -- ${args.join(' ')}\n`);
  const r = spawnSync('npm', ['run', '--silent', script, '--', ...args], {
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const minutes = ((Date.now() - t0) / 60_000).toFixed(1);
  if (r.status !== 0)
    throw new Error(
      `exit ${r.status} after ${minutes} min: ${(r.stderr ?? '').trim().split('\n').slice(-5).join(' / ')}`,
    );
  process.stderr.write(`bench:results: ${script} done in ${minutes} min\n`);
  return { stdout: r.stdout, minutes };
}

/** One section: its heading, the command that makes it, and its body (or why it failed). */
function section(title, script, args, body) {
  const command = `npm run ${script} -- ${args.join(' ')}`.trim();
  try {
    const { stdout, minutes } = npmRun(script, args);
    return [`## ${title}`, '', `\`${command}\` (${minutes} min)`, '', ...body(stdout), ''];
  } catch (e) {
    return [`## ${title}`, '', `\`${command}\` failed: ${e instanceof Error ? e.message : String(e)}`, ''];
  }
}

const codeBlock = (text) => ['```', text.trimEnd(), '```'];

/** The real-GPU section of the current file (kept across regenerations). */
function gpuSection() {
  const old = existsSync(FILE) ? readFileSync(FILE, 'utf8') : '';
  const at = old.indexOf(GPU_HEADING);
  if (at >= 0) return old.slice(at).trimEnd().split('\n');
  return [
    GPU_HEADING,
    '',
    '`bash bench/gpu-run.sh` runs the GEMV bandwidth, decode (a Llama-3.2-1B-shaped checkpoint),',
    'attention and verify-cost sections and `npm run bench:browser` with Chromium on the real GPU',
    '(Vulkan) and appends their tables here. No run has been made yet.',
  ];
}

if (values['append-gpu']) {
  const report = JSON.parse(readFileSync(values['append-gpu'], 'utf8'));
  const text = existsSync(FILE) ? readFileSync(FILE, 'utf8').trimEnd() : gpuSection().join('\n');
  const sections = values['gpu-sections'] ? readFileSync(values['gpu-sections'], 'utf8') : undefined;
  const add = [
    '',
    `### ${report.date} (${report.adapter})`,
    '',
    ...(sections
      ? [
          '`bash bench/gpu-run.sh`: GEMV bandwidth, decode, attention and verify cost (bench/gpu-cli.mjs)',
          '',
          ...codeBlock(sections),
          '',
        ]
      : []),
    ...speedMarkdown(report),
  ];
  writeFileSync(FILE, `${text.replace('No run has been made yet.', '').trimEnd()}\n${add.join('\n')}\n`);
  process.stderr.write(`bench:results: appended the run to ${FILE}\n`);
  process.exit(0);
}

const q = values.quick;
const browserArgs = ['--json', ...(q ? ['--quick'] : [])];
let chromium = 'unknown';
try {
  chromium = execFileSync(process.env.CHROMIUM ?? '/usr/bin/chromium', ['--version'], {
    encoding: 'utf8',
    // Debian's wrapper script prints a shell warning on stderr; the version is on stdout.
    stdio: ['ignore', 'pipe', 'ignore'],
  }).trim();
} catch {
  // No Chromium: the browser sections say why they failed.
}
const out = [
  '# weft benchmark results',
  '',
  `Regenerate with \`npm run bench:results${q ? ' -- --quick' : ''}\` (bench/results.mjs). Generated ${new Date().toISOString()}`,
  `on ${machine()}; ${chromium}. Figures from one machine and one run; compare ratios within a`,
  'table, not absolute numbers across machines. On a machine without a GPU, WebGPU runs on SwiftShader',
  "(Vulkan on the CPU): weft's and transformers.js-on-WebGPU's figures are then SwiftShader's, while",
  'wllama and transformers.js on wasm run as WebAssembly on the same CPU.',
  ...(q
    ? [
        '',
        'Made with --quick: the browser benchmark runs one prompt of 8 tokens once, the drafters at f16',
        'only; quality scores 2 chunks; the speculative decoding table (one prompt, 24 tokens) comes from',
        'the reference forward (--cpu: tokens per pass are exact, times are CPU times), its verify-cost',
        'curve from WebGPU; steering runs one round of 8 decode steps per plan.',
      ]
    : []),
  '',
  ...section('Speed in the browser', 'bench:browser', browserArgs, (stdout) =>
    speedMarkdown(JSON.parse(stdout)),
  ),
  ...section('Quantization quality', 'bench:quality', q ? ['--chunks', '2'] : [], (stdout) => [
    stdout.trimEnd(),
  ]),
  ...section(
    'Speculative decoding',
    'bench:spec',
    q ? ['--quick', '--cpu', '--budgets', '4,8,16,32'] : [],
    codeBlock,
  ),
  // --cpu has no GPU timing: the verify-cost curve comes from a plain-rows-only run on the GPU.
  ...(q ? section('Verify cost on the GPU', 'bench:spec', ['--quick', '--drafters', 'none'], codeBlock) : []),
  ...section('Activation steering', 'bench:steer', q ? ['--quick'] : [], codeBlock),
  ...section('Kernels', 'bench:kernels', q ? ['--quick'] : [], codeBlock),
  ...gpuSection(),
];
writeFileSync(FILE, `${out.join('\n').trimEnd()}\n`);
process.stderr.write(`bench:results: wrote ${FILE}\n`);
