// Browser speed benchmark: weft on the demo target at each weight format with and without each
// drafter, and the peers (wllama on GGUF Q8_0/Q4_0, transformers.js on ONNX) on the same prompt ids,
// in headless Chromium (WebGPU on SwiftShader, or the real GPU with WEFT_GPU=real).
// Usage: npm run bench:browser -- [--json] [--quick] [--runs R] [--tokens N] [--prompts P]
//   [--quants f16,int8,int4,int2,w8a8] [--spec-quants F,..] [--drafters none,ngram,draft-model,self-int4,ngram-adaptive,draft-model-adaptive,self-int4-adaptive,head,head-cpu,head-adaptive]
//   [--peers wllama,transformers.js,transformers.js-wasm|none] [--budget K] [--wllama-gpu] [--kernels gpu|serial]
// --wllama-gpu asks wllama (llama.cpp) for its WebGPU backend (it needs shader-f16: real GPUs only).
// --kernels: the forms of weft's kernels (default: serial on a software adapter, gpu elsewhere).
import { benchArgs } from './args.mjs';
import { ensurePeerFiles } from './peer-files.mjs';
import { printSpeedTables, speedReport } from './report.mjs';
import { runBenchPage } from './run-page.mjs';

const { values, settings } = benchArgs(process.argv.slice(2));
if (settings.peers !== '') await ensurePeerFiles(settings.peers);
const out = await runBenchPage(`bench/browser.html?${new URLSearchParams(settings)}`, { isolated: true });
const report = speedReport(out, {
  host: process.env.WEFT_GPU === 'real' ? 'chromium (real GPU through Vulkan)' : 'chromium',
  quick: values.quick,
});
if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
else printSpeedTables(report, (l) => console.log(l));
