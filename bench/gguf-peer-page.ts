// Page driver of `bench:browser --gguf-family` (bench/browser-cli.mjs opens it): weft and wllama on
// the same GGUF files (bench/.cache/gguf/<model>-<TYPE>.gguf, bench/peer-files.mjs writes them),
// plain greedy decoding of the same prompt ids, results as JSON in #result in the shape of
// bench/browser-page.ts's. Query: model (the files' stem), types (comma list: Q8_0, F16), runs,
// tokens, prompts, wllamaGpu=1 (llama.cpp's WebGPU backend), kernels (gpu or serial).

import { createEngine } from '../src/engine/create.js';
import { urlModelFiles } from '../src/formats/io/files.js';
import { openModel } from '../src/model/load.js';
import type { Quant } from '../src/quant/pack.js';
import { runWeftBench, type WeftRow } from './browser.js';
import { reportPage } from './page-result.js';
import { heldOutPrompts, pageGpuContext } from './page-setup.js';
import { type PeerRow, runWllama } from './peers.js';

/** The weft format each GGUF type loads at: the file's own (bench/peer-files.mjs's QWEN35_TYPES). */
const QUANT_OF: Readonly<Record<string, Quant>> = { Q8_0: 'int8', F16: 'f16' };

reportPage(async () => {
  const q = new URLSearchParams(location.search);
  const runs = Number(q.get('runs') ?? 3);
  const maxTokens = Number(q.get('tokens') ?? 32);
  const nPrompts = Number(q.get('prompts') ?? 3);
  const model = q.get('model');
  if (!model) throw new Error('model: missing (the GGUF files’ stem under bench/.cache/gguf/)');
  const types = (q.get('types') ?? 'Q8_0').split(',').filter(Boolean);
  for (const t of types)
    if (!(t in QUANT_OF)) throw new Error(`types: "${t}" is not one of ${Object.keys(QUANT_OF).join(', ')}`);
  const gguf = (type: string) => `/bench/.cache/gguf/${model}-${type}.gguf`;
  const log = (l: string) => console.log(`[bench] ${l}`);

  // The GGUF's own tokenizer (what llama.cpp reads too) makes the ids; wllama gets the text and
  // must find the same number of prompt tokens (runWllama checks it).
  const { tokenizer } = await openModel(urlModelFiles(gguf(types[0]!)));
  const { texts, prompts, warmupText, warmup } = await heldOutPrompts(tokenizer, nPrompts);

  const { ctx, adapter } = await pageGpuContext(q, log);
  const treeBudget = 8;
  const weft: WeftRow[] = [];
  for (const type of types)
    weft.push(
      ...(await runWeftBench({
        load: (o) => createEngine({ ...o, gpu: ctx }),
        target: gguf(type),
        source: `GGUF ${type}`,
        draft: gguf(type),
        prompts,
        warmup,
        maxTokens,
        runs,
        quants: [QUANT_OF[type]!],
        drafters: ['none'],
        treeBudget,
        log,
      })),
    );
  const peers: PeerRow[] = [];
  for (const type of types)
    peers.push(
      await runWllama({
        prompts: texts.map((text, i) => ({ text, ids: prompts[i]! })),
        warmup: { text: warmupText, ids: warmup },
        maxTokens,
        runs,
        log,
        format: `GGUF ${type}`,
        gguf: gguf(type),
        wasm: '/node_modules/@wllama/wllama/esm/wasm/wllama.wasm',
        gpu: q.get('wllamaGpu') === '1',
      }),
    );
  return {
    adapter,
    userAgent: navigator.userAgent,
    hardwareConcurrency: navigator.hardwareConcurrency,
    crossOriginIsolated,
    settings: { runs, maxTokens, treeBudget, warmup: 1 },
    prompts: texts.map((text, i) => ({ text, ids: prompts[i] })),
    weft: weft.map((w) => ({ ...w, texts: w.ids.map((ids) => tokenizer.decode(ids)) })),
    peers,
  };
});
