// Page driver of the browser benchmark (bench/browser-cli.mjs opens it): weft's rows, then the
// peers on the same prompt ids, results as JSON in #result. Query: runs, tokens, prompts, quants,
// drafters, specQuants (formats with speculative rows) (comma lists), peers (wllama,transformers.js,transformers.js-wasm or none), budget, wllamaGpu=1 (llama.cpp's WebGPU backend), target (kjv-target or kjv-draft).

import { createEngine } from '../src/engine/create.js';
import { urlModelFiles } from '../src/formats/io/files.js';
import { openModel } from '../src/model/load.js';
import type { Quant } from '../src/quant/pack.js';
import { runWeftBench } from './browser.js';
import { reportPage } from './page-result.js';
import { heldOutPrompts, pageGpuContext } from './page-setup.js';
import { type PeerRow, runTransformersJs, runWllama } from './peers.js';

const QUANTS: readonly Quant[] = ['f16', 'int8', 'int4', 'int2', 'w8a8'];
const list = (p: URLSearchParams, k: string, all: readonly string[]) =>
  p.has(k) ? (p.get(k) ?? '').split(',').filter(Boolean) : [...all];

reportPage(async () => {
  const q = new URLSearchParams(location.search);
  const runs = Number(q.get('runs') ?? 3);
  const maxTokens = Number(q.get('tokens') ?? 32);
  const nPrompts = Number(q.get('prompts') ?? 3);
  const quants = QUANTS.filter((x) => list(q, 'quants', QUANTS).includes(x));
  const drafters = list(q, 'drafters', [
    'none',
    'none-host',
    'ngram',
    'draft-model',
    'self-int4',
    'ngram-adaptive',
    'draft-model-adaptive',
    'self-int4-adaptive',
    'head',
    'head-cpu',
    'head-adaptive',
  ]);
  const specQuants = QUANTS.filter((x) => list(q, 'specQuants', QUANTS).includes(x));
  const peers = list(q, 'peers', ['wllama', 'transformers.js', 'transformers.js-wasm']);
  const budget = Number(q.get('budget') ?? 8);
  const log = (l: string) => console.log(`[bench] ${l}`);

  const name = q.get('target') ?? 'kjv-target';
  if (name !== 'kjv-target' && name !== 'kjv-draft')
    throw new Error(`target: "${name}" is not one of kjv-target, kjv-draft`);
  const target = `/models/${name}/`;
  const { tokenizer } = await openModel(urlModelFiles(target));
  const { texts, prompts, warmupText, warmup } = await heldOutPrompts(tokenizer, nPrompts);

  const { ctx, adapter } = await pageGpuContext(q, log);
  const weft = await runWeftBench({
    load: (o) => createEngine({ ...o, gpu: ctx }),
    target,
    draft: '/models/kjv-draft/',
    head: '/models/kjv-head/',
    prompts,
    warmup,
    maxTokens,
    runs,
    quants,
    drafters,
    specQuants,
    treeBudget: budget,
    log,
  });
  // weft on the very GGUF files wllama runs (int8 from Q8_0, int4 from Q4_0), plain decoding.
  if (peers.includes('wllama')) {
    for (const [format, quant] of [
      ['Q8_0', 'int8'],
      ['Q4_0', 'int4'],
    ] as const) {
      if (!quants.includes(quant)) continue;
      const rows = await runWeftBench({
        load: (o) => createEngine({ ...o, gpu: ctx }),
        target: `/bench/.cache/gguf/kjv-target-${format}.gguf`,
        source: `GGUF ${format}`,
        draft: '/models/kjv-draft/',
        prompts,
        warmup,
        maxTokens,
        runs,
        quants: [quant],
        drafters: ['none'],
        treeBudget: budget,
        log,
      });
      weft.push(...rows);
    }
  }
  const peerRows: PeerRow[] = [];
  const common = {
    prompts: texts.map((text, i) => ({ text, ids: prompts[i]! })),
    warmup: { text: warmupText, ids: warmup },
    maxTokens,
    runs,
    log,
  };
  if (peers.includes('wllama')) {
    for (const format of ['Q8_0', 'Q4_0'])
      peerRows.push(
        await runWllama({
          ...common,
          format: `GGUF ${format}`,
          gguf: `/bench/.cache/gguf/kjv-target-${format}.gguf`,
          wasm: '/node_modules/@wllama/wllama/esm/wasm/wllama.wasm',
          gpu: q.get('wllamaGpu') === '1',
        }),
      );
  }
  for (const device of ['webgpu', 'wasm'] as const) {
    if (!peers.includes(device === 'webgpu' ? 'transformers.js' : 'transformers.js-wasm')) continue;
    peerRows.push(
      await runTransformersJs({
        ...common,
        modelRoot: '/bench/.cache/onnx/',
        model: 'kjv-target',
        wasmRoot: '/node_modules/onnxruntime-web/dist/',
        device,
      }),
    );
  }
  return {
    adapter,
    userAgent: navigator.userAgent,
    hardwareConcurrency: navigator.hardwareConcurrency,
    crossOriginIsolated,
    settings: { runs, maxTokens, treeBudget: budget, warmup: 1 },
    prompts: texts.map((text, i) => ({ text, ids: prompts[i] })),
    weft: weft.map((w) => ({ ...w, texts: w.ids.map((ids) => tokenizer.decode(ids)) })),
    peers: peerRows,
  };
});
