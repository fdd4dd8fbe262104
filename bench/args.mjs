// Command-line options shared by `npm run bench` and `npm run bench:browser`, turned into the
// benchmark page's query (bench/browser-page.ts reads the same names).
import { parseArgs } from 'node:util';

/** Parses argv; returns the flags and the page settings. */
export function benchArgs(argv, extra = {}) {
  const { values } = parseArgs({
    args: argv,
    options: {
      json: { type: 'boolean', default: false },
      quick: { type: 'boolean', default: false },
      runs: { type: 'string' },
      tokens: { type: 'string' },
      prompts: { type: 'string' },
      quants: { type: 'string' },
      'spec-quants': { type: 'string' },
      drafters: { type: 'string' },
      peers: { type: 'string' },
      budget: { type: 'string' },
      target: { type: 'string' },
      'wllama-gpu': { type: 'boolean', default: false },
      // The kernel forms of weft's rows: gpu or serial (default: the adapter's).
      kernels: { type: 'string' },
      ...extra,
    },
  });
  // --quick: one run of one prompt, 8 tokens; every format without speculation, and each drafter
  // at f16 only. A few minutes on a 2-core machine with SwiftShader; the full run takes hours there
  // (and seconds on a GPU).
  const q = values.quick;
  const settings = {
    runs: values.runs ?? (q ? '1' : '3'),
    tokens: values.tokens ?? (q ? '8' : '32'),
    prompts: values.prompts ?? (q ? '1' : '3'),
    ...(values.quants ? { quants: values.quants } : {}),
    ...(values['spec-quants'] || q ? { specQuants: values['spec-quants'] ?? 'f16' } : {}),
    ...(values.drafters ? { drafters: values.drafters } : {}),
    peers: values.peers === 'none' ? '' : (values.peers ?? 'wllama,transformers.js,transformers.js-wasm'),
    ...(values.budget ? { budget: values.budget } : {}),
    // The model weft's rows run (a folder of models/): kjv-target (default) or the tiny kjv-draft.
    ...(values.target ? { target: values.target } : {}),
    ...(values['wllama-gpu'] ? { wllamaGpu: '1' } : {}),
    ...(values.kernels ? { kernels: values.kernels } : {}),
  };
  return { values, settings };
}
