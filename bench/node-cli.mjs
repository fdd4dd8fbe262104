// Speed benchmark through weft's Node entry (`weft`, `weft/node`; needs `npm run build`): the weft
// rows of bench:browser, no peers. Node runs WebGPU through Dawn (npm `webgpu`); where Dawn's only
// adapter is SwiftShader, its Node binding crashes on multi-threaded dispatches (see README), so
// like `weft generate --host auto` the benchmark then runs the same engine in headless Chromium,
// and says so.
// Usage: npm run bench -- [--json] [--quick] [--host auto|node|chromium] [--vulkan auto|swiftshader|lavapipe|system]
//   [--kernels gpu|serial] [--cpu] [bench:browser's options]
// --vulkan picks the Vulkan driver of the node host (useVulkanDriver; any but auto implies --host
// node), --kernels the kernel forms (default: the adapter's).
// The none and none-host rows compare plain decoding's loop on the device and on the host; on a tiny
// model, where per-step overhead shows: npm run bench -- --target kjv-draft --peers none
//   --quants f16 --drafters none,none-host
// --cpu runs the plain-TS reference forward in Node (a check of this path on a machine without a
// GPU; its figures are not GPU figures).
// The load rows (report.load) time loading the target in Node at f16 and int4 (placement only, no
// forward, so Dawn on SwiftShader runs it too) with the loader's peak transient bytes and the
// process's resident memory before and at its peak, and its array buffers' peak; --scale adds
// the Qwen3-0.6B shape (1.2 GB of random BF16 weights written to a temp dir first, minutes).
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchArgs } from './args.mjs';
import { grammarFigures, grammarLines } from './grammar.mjs';
import { printSpeedTables, speedReport } from './report.mjs';
import { runBenchPage } from './run-page.mjs';
import { withSources } from './ssr.mjs';

const { values, settings } = benchArgs(process.argv.slice(2), {
  host: { type: 'string', default: 'auto' },
  vulkan: { type: 'string', default: 'auto' },
  cpu: { type: 'boolean', default: false },
  scale: { type: 'boolean', default: false },
});
if (!['auto', 'node', 'chromium'].includes(values.host)) {
  console.error(`--host: "${values.host}" is not one of auto, node, chromium`);
  process.exit(2);
}
if (!existsSync('dist/src/index.js')) {
  console.error('weft is not built: run `npm run build` first');
  process.exit(2);
}
if (!['auto', 'swiftshader', 'lavapipe', 'system'].includes(values.vulkan)) {
  console.error(`--vulkan: "${values.vulkan}" is not one of auto, swiftshader, lavapipe, system`);
  process.exit(2);
}
if (values.kernels !== undefined && !['gpu', 'serial'].includes(values.kernels)) {
  console.error(`--kernels: "${values.kernels}" is not one of gpu, serial`);
  process.exit(2);
}
if (values.vulkan !== 'auto') {
  if (values.host === 'chromium') {
    console.error(`--vulkan ${values.vulkan} is the node host's driver; Chromium chooses its own`);
    process.exit(2);
  }
  values.host = 'node';
}
const weft = await import('weft');
const { pathModel, useVulkanDriver } = await import('weft/node');
if (!values.cpu) useVulkanDriver(values.vulkan);
/** The kernel forms asked for, as createGpuContext's options. */
const forms = values.kernels ? { kernels: values.kernels } : {};

/** Dawn can run kernels unless its only adapter is SwiftShader (the CLI's rule). */
async function pickHost() {
  if (values.host !== 'auto') return { host: values.host };
  if (values.cpu) return { host: 'node' };
  const adapter = await weft.requestAdapter().catch(() => null);
  if (adapter && weft.adapterKind(adapter.info) !== 'swiftshader') return { host: 'node' };
  const chromium = process.env.CHROMIUM ?? '/usr/bin/chromium';
  if (!existsSync(chromium)) return { host: 'node' };
  return {
    host: 'chromium',
    note: adapter
      ? "Node's only WebGPU adapter is SwiftShader, on which Dawn's Node binding crashes: the engine runs in headless Chromium, as `weft generate --host auto` does"
      : 'Node has no WebGPU adapter: the engine runs in headless Chromium, as `weft generate --host auto` does',
  };
}

const { host, note } = await pickHost();
let report;
if (host === 'chromium') {
  const out = await runBenchPage(`bench/browser.html?${new URLSearchParams({ ...settings, peers: '' })}`);
  report = speedReport(out, { host: 'chromium (from Node)', hostNote: note, quick: values.quick });
} else {
  const target = `models/${settings.target ?? 'kjv-target'}`;
  const gpu = values.cpu ? undefined : await weft.createGpuContext(forms);
  const { tokenizer, spec: targetSpec } = await weft.openModel(await pathModel(target));
  const p = new URLSearchParams(settings);
  const { benchPrompts, runWeftBench } = await withSources((load) => load('/bench/browser.ts'));
  const { texts, warmup } = benchPrompts(
    readFileSync('models/kjv-heldout.txt', 'utf8'),
    Number(p.get('prompts')),
  );
  const encode = (t) => tokenizer.encode(t, { addSpecialTokens: true });
  const all = ['f16', 'int8', 'int4', 'int2', 'w8a8'];
  const pick = (k, d) => (p.has(k) ? p.get(k).split(',').filter(Boolean) : d);
  const quants = pick('quants', all);
  const weftRows = await runWeftBench({
    // Fresh file handles per engine: an unloaded engine closes its model's files.
    load: async (o) =>
      weft.createEngine({
        ...o,
        ...(gpu ? { gpu } : { device: 'cpu' }),
        model: await pathModel(target),
        ...(o.draft && 'model' in o.draft
          ? { draft: { ...o.draft, model: await pathModel('models/kjv-draft') } }
          : {}),
      }),
    target,
    draft: 'models/kjv-draft',
    prompts: texts.map(encode),
    warmup: encode(warmup),
    maxTokens: Number(p.get('tokens')),
    runs: Number(p.get('runs')),
    quants,
    drafters: pick('drafters', ['none', 'none-host', 'ngram', 'draft-model', 'self-int4']),
    specQuants: pick('specQuants', quants),
    treeBudget: Number(p.get('budget') ?? 8),
    log: (l) => process.stderr.write(`[bench] ${l}\n`),
  });
  const out = {
    adapter: gpu ? weft.describeAdapter(gpu.adapter) : 'none (--cpu: plain-TS reference forward)',
    settings: {
      runs: Number(p.get('runs')),
      maxTokens: Number(p.get('tokens')),
      treeBudget: Number(p.get('budget') ?? 8),
      warmup: 1,
    },
    prompts: texts.map((text) => ({ text, ids: encode(text) })),
    weft: weftRows.map((w) => ({ ...w, texts: w.ids.map((ids) => tokenizer.decode(ids)) })),
    peers: [],
  };
  report = speedReport(out, { host: gpu ? 'node (Dawn)' : 'node (CPU reference)', quick: values.quick });
  const engine = await weft.createEngine({
    ...(gpu ? { gpu } : { device: 'cpu' }),
    model: await pathModel(target),
    quant: 'f16',
    contextLength: 256,
    draft: { self: 'int4' },
  });
  report.grammar = await grammarFigures(
    weft,
    tokenizer,
    targetSpec.vocabSize,
    engine,
    texts.map(encode),
    Number(p.get('tokens')),
    { schemas: values.quick ? 5 : 50, draft: true },
  );
  await engine.unload();
  gpu?.destroy();
}
if (!report.grammar) {
  // The engine ran in Chromium: the grammar engine's CPU work is measured here, in Node.
  const files = await pathModel('models/kjv-target');
  const { tokenizer, spec } = await weft.openModel(files);
  await files.close?.();
  report.grammar = await grammarFigures(weft, tokenizer, spec.vocabSize);
}
report.load = await loadFigures();
if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
else {
  printSpeedTables(report, (l) => console.log(l));
  for (const l of grammarLines(report.grammar)) console.log(l);
  for (const r of report.load)
    console.log(
      `load ${r.model} at ${r.quant}: ${(r.loadMs / 1000).toFixed(1)} s, peak transient ${(r.peakTransientBytes / 2 ** 20).toFixed(1)} MiB, process RSS ${(r.rssBeforeBytes / 2 ** 20).toFixed(0)} -> peak ${(r.peakRssBytes / 2 ** 20).toFixed(0)} MiB, array buffers peak ${(r.peakArrayBuffersBytes / 2 ** 20).toFixed(1)} MiB`,
    );
}

/**
 * Rows { model, quant, loadMs, peakTransientBytes, rssBeforeBytes, peakRssBytes,
 * peakArrayBuffersBytes } of loading the target (and with --scale the Qwen3-0.6B shape) in Node at
 * f16 and int4: createEngine until ready, the loader's peak from its progress events, and the
 * process's resident memory (before, and its peak) and array buffers sampled every 100 ms. The
 * Node host's GPU (Dawn) lives in the same process, so its RSS includes the weights on a software
 * adapter. None without a Node WebGPU adapter or with --cpu.
 */
async function loadFigures() {
  if (values.cpu) return [];
  const gpu = await weft.createGpuContext(forms).catch(() => undefined);
  if (!gpu) return [];
  const rows = [];
  const load = async (name, files, quant) => {
    let peakTransientBytes = 0;
    // The process's resident memory and array buffers, sampled while it loads.
    const rssBeforeBytes = process.memoryUsage().rss;
    let peakRssBytes = rssBeforeBytes;
    let peakArrayBuffersBytes = 0;
    const sample = () => {
      const m = process.memoryUsage();
      peakRssBytes = Math.max(peakRssBytes, m.rss);
      peakArrayBuffersBytes = Math.max(peakArrayBuffersBytes, m.arrayBuffers);
    };
    const timer = setInterval(sample, 100);
    const t0 = performance.now();
    const engine = await weft.createEngine({
      gpu,
      model: files,
      quant,
      contextLength: 64,
      onProgress: (e) => {
        if (e.phase === 'weights') peakTransientBytes = e.peakTransientBytes ?? peakTransientBytes;
      },
    });
    const loadMs = performance.now() - t0;
    clearInterval(timer);
    sample();
    rows.push({
      model: name,
      quant,
      loadMs,
      peakTransientBytes,
      rssBeforeBytes,
      peakRssBytes,
      peakArrayBuffersBytes,
    });
    await engine.unload();
  };
  const target = settings.target ?? 'kjv-target';
  for (const quant of ['f16', 'int4']) await load(target, await pathModel(`models/${target}`), quant);
  if (values.scale) {
    const dir = await mkdtemp(join(tmpdir(), 'weft-bench-scale-'));
    try {
      await withSources(async (l) =>
        (await l('/test/fixtures/scale-dir.ts')).writeScaleDir(dir, 'qwen3-0.6b', 1),
      );
      for (const quant of ['f16', 'int4']) await load('qwen3-0.6b shape', await pathModel(dir), quant);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  gpu.destroy();
  return rows;
}
