// Browser speed benchmark: weft on the demo target at each weight format with and without each
// drafter, and the peers (wllama on GGUF Q8_0/Q4_0, transformers.js on ONNX) on the same prompt ids,
// in headless Chromium (WebGPU on SwiftShader, or the real GPU with WEFT_GPU=real).
// Usage: npm run bench:browser -- [--json] [--quick] [--runs R] [--tokens N] [--prompts P]
//   [--quants f16,int8,int4,int2,w8a8] [--spec-quants F,..] [--drafters none,ngram,draft-model,self-int4,ngram-adaptive,draft-model-adaptive,self-int4-adaptive,head,head-cpu,head-adaptive]
//   [--peers wllama,transformers.js,transformers.js-wasm|none] [--budget K] [--wllama-gpu] [--kernels gpu|serial]
//   [--gguf-family qwen35 [--shape mid|tiny|qwen3.5-0.8b] [--gguf-types Q8_0,F16]]
// --wllama-gpu asks wllama (llama.cpp) for its WebGPU backend (it needs shader-f16: real GPUs only).
// --kernels: the forms of weft's kernels (default: serial on a software adapter, gpu elsewhere).
// --gguf-family qwen35: instead of the demo models, weft and wllama, plain greedy, on one GGUF per
// type (default Q8_0) of a random-weight Qwen3.5 (llama.cpp's `qwen35`) checkpoint of --shape
// (default mid; see QWEN35_SHAPES in bench/peer-files.mjs), written under bench/.cache/ once;
// --quants, --drafters, --spec-quants, --peers, --budget and --target do not apply.
import { benchArgs } from './args.mjs';
import { ensurePeerFiles, ensureQwen35Ggufs } from './peer-files.mjs';
import { printSpeedTables, speedReport } from './report.mjs';
import { runBenchPage } from './run-page.mjs';

const { values, settings } = benchArgs(process.argv.slice(2), {
  'gguf-family': { type: 'string' },
  shape: { type: 'string' },
  'gguf-types': { type: 'string' },
});
const host = process.env.WEFT_GPU === 'real' ? 'chromium (real GPU through Vulkan)' : 'chromium';
const family = values['gguf-family'];
let out;
let model;
if (family === undefined) {
  if (settings.peers !== '') await ensurePeerFiles(settings.peers);
  out = await runBenchPage(`bench/browser.html?${new URLSearchParams(settings)}`, { isolated: true });
} else {
  if (family !== 'qwen35') throw new Error(`--gguf-family: "${family}" is not one of qwen35`);
  const shape = values.shape ?? 'mid';
  const types = (values['gguf-types'] ?? 'Q8_0').toUpperCase().split(',');
  const { model: stem, config: c } = await ensureQwen35Ggufs(shape, types);
  const attention = Math.floor(c.num_hidden_layers / c.full_attention_interval);
  model = `random-weight Qwen3.5 (qwen35), shape ${shape}: hidden ${c.hidden_size}, ${c.num_hidden_layers} layers (${c.num_hidden_layers - attention} DeltaNet, ${attention} attention), vocab ${c.vocab_size}, GGUF ${types.join(', ')}; Qwen3's tokenizer stands in (npm has no Qwen3.5 tokenizer), generation limited to printable ASCII ids`;
  const { runs, tokens, prompts, wllamaGpu, kernels } = settings;
  const query = { model: stem, types: types.join(','), runs, tokens, prompts };
  if (wllamaGpu) query.wllamaGpu = wllamaGpu;
  if (kernels) query.kernels = kernels;
  out = await runBenchPage(`bench/gguf-peer.html?${new URLSearchParams(query)}`, { isolated: true });
}
const report = speedReport(out, { host, quick: values.quick, ...(model ? { model } : {}) });
if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
else printSpeedTables(report, (l) => console.log(l));
