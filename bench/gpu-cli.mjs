// The GPU sections of bench/gpu-run.sh, in headless Chromium (the real GPU with WEFT_GPU=real):
//   1. GEMV effective bandwidth per weight format against the copy bandwidth (Llama-3.2-1B's shapes),
//   2. decode tok/s of a random-weight Llama-3.2-1B-shaped checkpoint at f16, int8, int4 and int2
//      with the GPU-resident loop, and what each token asks of the device,
//   3. decode attention at 512 and 4096 keys, split against unsplit,
//   4. the verify-cost curve of that checkpoint at f16,
//   5. prefill and decode of random-weight Qwen3-0.6B- and Qwen3.5-0.8B-shaped checkpoints at f16
//      and int4 in the same run (the hybrid against the transformer of about its size),
//   and, in Node only (--parts moe, not run by default), LFM2-8B-A1B's shape at int4 beside a
//   dense LFM2 of its active size (bench/gpu-node.ts MOE_MODELS), with experts read per pass,
//   and (--parts gemma4) Gemma 4 E2B's shape at int4 beside Gemma 3 1B's (GEMMA4_MODELS).
// The checkpoint is written once into bench/.cache (test/fixtures/scale-dir.ts) and served from
// there over HTTP with Range; the kernel sections run first, so a software adapter is refused
// before it is written.
// Usage: node bench/gpu-cli.mjs [--smoke] [--json <file>]
//        node bench/gpu-cli.mjs --vulkan lavapipe|swiftshader|system [--kernels gpu|serial]
//          [--parts kernels,model,families,moe,gemma4] [--prompt N] [--tokens N] [--smoke] [--json <file>]
//        node bench/gpu-cli.mjs --report <file>
// --smoke: every shape shrunk (the model: 2 layers, hidden 256, vocab 4096) and SwiftShader
// accepted, so the whole run is tested on a CPU.
// --vulkan: the sections in Node through Dawn on that Vulkan driver (bench/gpu-node.ts;
// src/host/vulkan.ts), with the adapter's kernel forms (serial on a CPU driver) unless --kernels
// names them; --parts picks kernels (sections 1 and 3), model (2 and 4), families (5) and moe (the
// mixture beside its dense twin, written packed at int4: 4.7 GB under bench/.cache), default all
// but moe. On this project's CPU-only machines, `--vulkan lavapipe --kernels gpu --parts families` runs
// the GPU forms at the real shapes: its tok/s are a CPU's, so only the ratios between the two
// families in one run say anything. gemma4 writes both checkpoints packed at int4 (2.6 and 0.56 GB
// under bench/.cache). --prompt and --tokens set section 5's timed prefill and decode (default 512
// and 64; 16 and 8 with --smoke) and the mixture's and Gemma 4's (default 16 and 8).
// --report: prints a report written by --json, or by the device kit's run (bench/device-run.sh).
import { readFile, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { createServer } from 'vite';
import { runBenchPage } from './run-page.mjs';

const { values } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    json: { type: 'string' },
    vulkan: { type: 'string' },
    kernels: { type: 'string' },
    prompt: { type: 'string' },
    tokens: { type: 'string' },
    parts: { type: 'string' },
    report: { type: 'string' },
  },
});
// A saved report (--report) says whether it was a smoke run.
let smoke = values.smoke;
const count = (name, fallback) => {
  const raw = values[name];
  if (raw === undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) {
    console.error(`--${name}: "${raw}" is not a whole number of tokens ≥ 1`);
    process.exit(2);
  }
  return n;
};
const familyTokens = { prompt: count('prompt', smoke ? 16 : 512), tokens: count('tokens', smoke ? 8 : 64) };
// The mixture's and Gemma 4's sections are short by default: they decode at a CPU's pace here.
const moeTokens = { prompt: count('prompt', 16), tokens: count('tokens', 8) };
if (values.vulkan !== undefined && !['swiftshader', 'lavapipe', 'system'].includes(values.vulkan)) {
  console.error(`--vulkan: "${values.vulkan}" is not one of swiftshader, lavapipe, system`);
  process.exit(2);
}
if (values.kernels !== undefined && !['gpu', 'serial'].includes(values.kernels)) {
  console.error(`--kernels: "${values.kernels}" is not one of gpu, serial`);
  process.exit(2);
}
if (
  values.vulkan === undefined &&
  (values.kernels ?? values.prompt ?? values.tokens ?? values.parts) !== undefined
) {
  console.error('--kernels, --parts, --prompt and --tokens go with --vulkan (the sections in Node)');
  process.exit(2);
}
const PARTS = ['kernels', 'model', 'families', 'moe', 'gemma4'];
const parts = (values.parts ?? 'kernels,model,families').split(',');
for (const p of parts)
  if (!PARTS.includes(p)) {
    console.error(`--parts: "${p}" is not one of ${PARTS.join(', ')}`);
    process.exit(2);
  }

/** Bandwidths: three significant digits, so that a SwiftShader figure does not print as 0.0. */
const gbps = (x) => (x >= 100 ? x.toFixed(0) : x.toPrecision(3));

const query = (part, extra = {}) =>
  new URLSearchParams({ part, ...(smoke ? { smoke: '1' } : {}), ...extra }).toString();

// TS through Vite's SSR loader (the fixtures, the occupancy model), as run-page.mjs loads its
// Chromium flags.
const vite = await createServer({
  configFile: 'vite.config.ts',
  logLevel: 'warn',
  appType: 'custom',
  server: { middlewareMode: true, hmr: false },
});
let kernels;
let model;
if (values.report !== undefined) {
  // A saved report: printed as a run prints it.
  const saved = JSON.parse(await readFile(values.report, 'utf8'));
  smoke = saved.smoke === true;
  try {
    printReport(saved, await vite.ssrLoadModule('/bench/occupancy.ts'));
  } finally {
    await vite.close();
  }
  process.exit(0);
}
const {
  FAMILIES,
  SMOKE_CONFIG,
  runNodeSections,
  writeModel: writeCached,
} = await vite.ssrLoadModule('/bench/gpu-node.ts');
const writeModel = (shape, overrides) =>
  writeCached('bench/.cache', shape, overrides, smoke, (line) => console.error(`gpu-cli: ${line}`));
if (values.vulkan !== undefined) {
  let report;
  try {
    const { useVulkanDriver } = await vite.ssrLoadModule('/src/host/vulkan.ts');
    useVulkanDriver(values.vulkan);
    const { createGpuContext } = await vite.ssrLoadModule('/src/gpu/index.ts');
    const ctx = await createGpuContext(values.kernels ? { kernels: values.kernels } : {});
    console.log(
      `adapter: ${ctx.adapter.vendor} ${ctx.adapter.description} (Node, Dawn, --vulkan ${values.vulkan}); kernels: ${ctx.kernels}`,
    );
    report = await runNodeSections(ctx, {
      smoke,
      parts,
      cache: 'bench/.cache',
      promptTokens: familyTokens.prompt,
      tokens: familyTokens.tokens,
      moePromptTokens: moeTokens.prompt,
      moeTokens: moeTokens.tokens,
      log: (line) => console.error(`gpu-cli: ${line}`),
      onPart: async (r) => {
        if (values.json) await writeFile(values.json, `${JSON.stringify(r, null, 2)}\n`);
      },
    });
    printReport(report, await vite.ssrLoadModule('/bench/occupancy.ts'));
  } finally {
    await vite.close();
  }
  process.exit(0);
}
try {
  kernels = await runBenchPage(`bench/gpu.html?${query('kernels')}`);
  printKernels(kernels, await vite.ssrLoadModule('/bench/occupancy.ts'));
  const dir = await writeModel('llama-3.2-1b', SMOKE_CONFIG);
  const { serveDir } = await vite.ssrLoadModule('/test/scale/serve-dir.ts');
  const files = await serveDir(dir);
  try {
    model = await runBenchPage(`bench/gpu.html?${query('model', { model: files.url })}`);
  } finally {
    await files.close();
  }
  const served = [];
  try {
    for (const [shape, overrides] of FAMILIES)
      served.push({ shape, ...(await serveDir(await writeModel(shape, overrides))) });
    const models = served.map((m) => `${m.shape}=${m.url}`).join(',');
    model.families = (await runBenchPage(`bench/gpu.html?${query('families', { models })}`)).families;
  } finally {
    for (const m of served) await m.close();
  }
} finally {
  await vite.close();
}
printModel(model);
printFamilies(model);
if (values.json) await writeFile(values.json, `${JSON.stringify({ smoke, kernels, model }, null, 2)}\n`);

/** The occupancy model's device this adapter is, by name (H100, RTX 4090, M3 Max), or undefined. */
function modelDevice(adapter) {
  if (/h100/i.test(adapter)) return 'H100';
  if (/4090/.test(adapter)) return 'RTX 4090';
  if (/m3 max|apple/i.test(adapter)) return 'M3 Max';
  return undefined;
}

function printKernels(out, occupancy) {
  console.log(`adapter: ${out.adapter}; ${out.timing} timing${smoke ? '; smoke run (shrunk shapes)' : ''}`);
  console.log('\n## 1. GEMV effective bandwidth (M = 1) per weight format, against a copy in the same run');
  const copy = out.gemv.find((r) => !r.skipped)?.copyGbps;
  console.log(`copy bandwidth: ${copy === undefined ? '-' : gbps(copy)} GB/s (bytes read + written)`);
  // Beside each measured row, the fraction of bandwidth bench:occupancy predicts for its launch on
  // each device it models (* marks this adapter's): the first lent GPU checks the model.
  const mine = modelDevice(out.adapter);
  const names = occupancy.DEVICES.map((d) => `${d.name}${d.name === mine ? '*' : ''}`);
  console.log(
    `format  bits/w  N×K            copies  calls/pass   us/call      GB/s  % of copy  predicted: ${names.join(' / ')}`,
  );
  for (const r of out.gemv) {
    const head = `${r.format.padEnd(6)}  ${r.bits.toFixed(3).padStart(6)}  ${`${r.N}x${r.K}`.padEnd(13)}`;
    const predicted = occupancy
      .gemvPrediction(r.format, r.N, r.K)
      .map((d) => `${Math.round(100 * d.predicted)}%`)
      .join(' / ');
    if (r.skipped) console.log(`${head}  skipped: ${r.skipped}`);
    else
      console.log(
        `${head}  ${String(r.copies).padStart(6)}  ${String(r.calls).padStart(10)}  ${r.usPerCall.toFixed(2).padStart(8)}  ${gbps(r.gbps).padStart(8)}  ${(100 * r.ratio).toPrecision(3).padStart(8)}%  ${predicted}`,
      );
  }
  console.log('\n## 3. Decode attention (T = 1), split against unsplit');
  console.log('context  heads/kv  headDim  cache  unsplit ms  split ms  dispatches  speed-up');
  for (const a of out.attention)
    console.log(
      `${String(a.context).padStart(7)}  ${`${a.heads}/${a.kvHeads}`.padStart(8)}  ${String(a.headDim).padStart(7)}  ${a.format.padEnd(5)}  ${a.unsplitMs.toFixed(3).padStart(10)}  ${a.splitMs.toFixed(3).padStart(8)}  ${String(a.splitDispatches).padStart(10)}  ${a.speedup.toFixed(2).padStart(7)}x`,
    );
}

function printModel(out) {
  const shape = smoke
    ? 'hidden 256, 2 layers, 4/2 heads, head_dim 64, intermediate 1024, vocab 4096 (smoke)'
    : 'hidden 2048, 16 layers, 32/8 heads, head_dim 64, intermediate 8192, vocab 128256, tied';
  console.log(
    `\n## 2. Greedy decode with the GPU-resident loop, random Llama-3.2-1B-shaped weights (${shape})`,
  );
  console.log('quant  load s  tokens     tok/s  dispatches/tok  writes/tok  readbacks/tok  MB/pass   GB/s');
  for (const r of out.decode)
    console.log(
      `${r.quant.padEnd(5)}  ${(r.loadMs / 1000).toFixed(1).padStart(6)}  ${String(r.tokens).padStart(6)}  ${r.tokS.toPrecision(3).padStart(8)}  ${r.dispatchesPerToken.toFixed(1).padStart(14)}  ${r.writesPerToken.toFixed(2).padStart(10)}  ${r.readbacksPerToken.toFixed(2).padStart(13)}  ${(r.weightBytesPerPass / 1e6).toFixed(1).padStart(7)}  ${gbps(r.gbps).padStart(5)}`,
    );
  const profiled = out.decode.filter((r) => r.profile.length > 0);
  if (profiled.length > 0) {
    const sections = profiled[0].profile.map((t) => t.section);
    console.log(
      '\nGPU time of one decode step per section (ms, summed over layers; timestamp queries around each section, 8 steps):',
    );
    console.log(`quant  ${sections.map((s) => s.padStart(14)).join('')}`);
    for (const r of profiled)
      console.log(
        `${r.quant.padEnd(5)}  ${r.profile.map((t) => `${(t.ns / 1e6).toFixed(3)} (${(100 * t.share).toFixed(0)}%)`.padStart(14)).join('')}`,
      );
  }
  console.log('\n## 4. Verify cost at f16: median time of one target pass over T tokens, / T = 1');
  for (const v of out.verifyCost)
    console.log(`T=${String(v.T).padStart(2)}  ${v.ms.toFixed(2).padStart(9)} ms  ${v.ratio.toFixed(2)}`);
}

/** A report's sections, whichever it has (a Node run may measure some parts only). */
function printReport(report, occupancy) {
  if (report.kernels) printKernels(report.kernels, occupancy);
  if (report.model?.decode) printModel(report.model);
  if (report.model?.families) printFamilies(report.model);
  if (report.model?.moe) printMoe(report.model);
  if (report.model?.gemma4) printGemma4(report.model);
}

/** Gemma 4 E2B's table beside Gemma 3 1B's, and its ratios to it. */
function printGemma4(out) {
  console.log(
    `\n## Gemma 4 E2B beside Gemma 3 1B, random weights at int4${smoke ? ' (smoke: hidden 256, 5 and 4 layers, vocab 4096)' : ''}, same run`,
  );
  console.log('model        quant  layers  prefill tok/s (T)  decode tok/s  dispatches/tok  MB/token');
  for (const r of out.gemma4)
    console.log(
      `${r.model.padEnd(11)}  ${r.quant.padEnd(5)}  ${String(r.attentionLayers).padStart(6)}  ${`${r.prefillTokS.toPrecision(3)} (${r.prefillTokens})`.padStart(17)}  ${r.tokS.toPrecision(3).padStart(12)}  ${r.dispatchesPerToken.toFixed(1).padStart(14)}  ${(r.weightBytesPerPass / 1e6).toFixed(1).padStart(8)}`,
    );
  const [e2b, g3] = ['gemma-4-e2b', 'gemma-3-1b'].map((m) => out.gemma4.find((r) => r.model === m));
  if (e2b && g3) {
    const x = (key) => (e2b[key] / g3[key]).toFixed(2);
    console.log(
      `gemma-4-e2b / gemma-3-1b at int4: prefill ${x('prefillTokS')}x, decode ${x('tokS')}x, weight bytes per token ${x('weightBytesPerPass')}x, dispatches per token ${x('dispatchesPerToken')}x`,
    );
  }
}

/** The mixture's table and its ratios to the dense model of its active size. */
function printMoe(out) {
  console.log(
    `\n## LFM2-8B-A1B (mixture of experts) beside a dense LFM2 of its active size, random weights at int4${smoke ? ' (smoke: hidden 256, 4 layers, vocab 4096)' : ''}, same run`,
  );
  console.log(
    'model              quant  layers (attn+conv, moe)  prefill tok/s (T)  decode tok/s  dispatches/tok  MB/token  experts/pass',
  );
  for (const r of out.moe)
    console.log(
      `${r.model.padEnd(17)}  ${r.quant.padEnd(5)}  ${`${r.attentionLayers}+${r.shortConvLayers}, ${r.mixtureLayers}`.padStart(23)}  ${`${r.prefillTokS.toPrecision(3)} (${r.prefillTokens})`.padStart(17)}  ${r.tokS.toPrecision(3).padStart(12)}  ${r.dispatchesPerToken.toFixed(1).padStart(14)}  ${(r.weightBytesPerPass / 1e6).toFixed(1).padStart(8)}  ${(r.expertsPerPass === undefined ? '-' : r.expertsPerPass.toFixed(2)).padStart(12)}`,
    );
  const [moe, dense, paged] = ['lfm2-8b-a1b', 'lfm2-a1b-dense', 'lfm2-8b-a1b-paged'].map((m) =>
    out.moe.find((r) => r.model === m),
  );
  if (paged?.expertBudget !== undefined && moe)
    console.log(
      `lfm2-8b-a1b-paged: experts under a ${(paged.expertBudget / 2 ** 30).toFixed(2)} GiB budget (the rest in CPU memory): cache hit rate ${paged.expertCacheHitRate.toFixed(2)} over the timed steps, ${(paged.expertBytesLoadedPerToken / 1e6).toFixed(1)} MB of experts loaded per token, decode ${(paged.tokS / moe.tokS).toFixed(2)}x of every expert on the GPU, ${paged.readbacksPerToken.toFixed(1)} readbacks per token`,
    );
  if (moe && dense) {
    const x = (key) => (moe[key] / dense[key]).toFixed(2);
    console.log(
      `lfm2-8b-a1b / lfm2-a1b-dense at int4: prefill ${x('prefillTokS')}x, decode ${x('tokS')}x, weight bytes per token ${x('weightBytesPerPass')}x, dispatches per token ${x('dispatchesPerToken')}x`,
    );
  }
}

/** Section 5's table and the hybrid/transformer ratios. */
function printFamilies(out) {
  console.log(
    `\n## 5. Qwen3.5 (Gated DeltaNet hybrid) beside Qwen3, random weights of each shape${smoke ? ' (smoke: hidden 256, 4 layers, vocab 4096)' : ''}, same run`,
  );
  console.log(
    'model          quant  layers (attn+linear)  prefill tok/s (T)  decode tok/s  dispatches/tok  writes/tok  readbacks/tok  MB/pass',
  );
  for (const r of out.families)
    console.log(
      `${r.model.padEnd(13)}  ${r.quant.padEnd(5)}  ${`${r.attentionLayers}+${r.linearLayers}`.padStart(20)}  ${`${r.prefillTokS.toPrecision(3)} (${r.prefillTokens})`.padStart(17)}  ${r.tokS.toPrecision(3).padStart(12)}  ${r.dispatchesPerToken.toFixed(1).padStart(14)}  ${r.writesPerToken.toFixed(2).padStart(10)}  ${r.readbacksPerToken.toFixed(2).padStart(13)}  ${(r.weightBytesPerPass / 1e6).toFixed(1).padStart(7)}`,
    );
  const ratio = (quant, key) => {
    const [a, b] = ['qwen3.5-0.8b', 'qwen3-0.6b'].map(
      (m) => out.families.find((r) => r.model === m && r.quant === quant)?.[key],
    );
    return a && b ? (a / b).toFixed(2) : '-';
  };
  for (const quant of ['f16', 'int4'])
    console.log(
      `qwen3.5-0.8b / qwen3-0.6b at ${quant}: prefill ${ratio(quant, 'prefillTokS')}x, decode ${ratio(quant, 'tokS')}x`,
    );
}
