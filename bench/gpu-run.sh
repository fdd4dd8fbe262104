#!/usr/bin/env bash
# Runs weft's GPU benchmarks with Chromium on the machine's real GPU (WebGPU through Vulkan) and
# appends them to bench/RESULTS.md, in one run of a few minutes:
#   1. GEMV effective bandwidth per weight format against the copy bandwidth (Llama-3.2-1B's shapes),
#   2. greedy decode tok/s with the GPU-resident loop on a random-weight Llama-3.2-1B-shaped
#      checkpoint (written once into bench/.cache) at f16, int8, int4 and int2, with dispatches and
#      buffer writes per token,
#   3. decode attention at 512 and 4096 keys, split against unsplit,
#   4. the verify-cost curve of that checkpoint (one pass over T tokens / T = 1),
#   5. prefill and decode of random-weight Qwen3-0.6B- and Qwen3.5-0.8B-shaped checkpoints at f16
#      and int4, side by side (the Gated DeltaNet hybrid against the transformer),
#   6. `npm run bench:browser` as before,
#   7. weft against wllama on the same GGUF of a random-weight Qwen3.5-0.8B-shaped checkpoint (Q8_0
#      and F16; `bench:browser --gguf-family qwen35`), llama.cpp on its WebGPU backend.
# Run from the repository root on a machine with a GPU and its Vulkan driver, after
# `bash scripts/setup.sh` (on a bare, offline machine such as the `device` tool's, sections 1-5 run
# from a kit instead: bench/device-kit.sh, bench/device-run.sh):
#   bash bench/gpu-run.sh [bench:browser options, e.g. --quick or --runs 5]
# Sections 1-5 are kept as bench/.cache/gpu-run-<time>.txt and gpu-run-<time>-sections.json, the
# browser reports as bench/.cache/gpu-run-<time>.json and gpu-run-<time>-qwen35.json (WEFT_GPU_RUN_STAMP replaces <time>). The run fails if Chromium's adapter turns out to be SwiftShader
# (no usable GPU driver): such a run says nothing about a GPU.
#
# --smoke (or WEFT_GPU_RUN_SMOKE=1): the same steps at tiny sizes on whatever adapter Chromium has,
# SwiftShader included (test/bench/gpu-run.bench.test.ts, `npm run test:bench`), appended to bench/.cache/RESULTS-smoke.md
# instead of bench/RESULTS.md (WEFT_RESULTS_FILE overrides either).
set -euo pipefail
cd "$(dirname "$0")/.."

smoke="${WEFT_GPU_RUN_SMOKE:-}"
args=()
for a in "$@"; do
  if [[ "$a" == --smoke ]]; then smoke=1; else args+=("$a"); fi
done

mkdir -p bench/.cache
stamp="${WEFT_GPU_RUN_STAMP:-$(date -u +%Y%m%dT%H%M%SZ)}"
if [[ -n "$smoke" ]]; then
  export WEFT_RESULTS_FILE="${WEFT_RESULTS_FILE:-bench/.cache/RESULTS-smoke.md}"
  sections=(--smoke)
  # bench:browser at its smallest: the tiny demo model, one format, 3 tokens, no peers.
  browser=(--quants f16 --drafters none --tokens 3 --prompts 1 --runs 1 --peers none --target kjv-draft)
  qwen35=(--shape tiny --gguf-types Q8_0 --tokens 3 --prompts 1 --runs 1)
  stamp="smoke-$stamp"
else
  # NVIDIA's Vulkan ICD where the container carries it outside the loader's search path.
  if [[ -z "${VK_DRIVER_FILES:-}" && -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  if ! ldconfig -p | grep -q libvulkan.so.1; then
    echo "gpu-run: libvulkan.so.1 not found (apt-get install libvulkan1)" >&2
    exit 1
  fi
  # WEFT_GPU=real: Chromium's real-GPU flags (test/helpers/chromium.ts: Vulkan, no SwiftShader).
  # Headless, with no display: ANGLE on Vulkan and no Vulkan surface. WebGPUDeveloperFeatures
  # turns off the 100 µs quantization of timestamp queries.
  export WEFT_GPU=real
  export WEFT_CHROMIUM_ARGS="${WEFT_CHROMIUM_ARGS:---use-angle=vulkan --disable-vulkan-surface --enable-features=Vulkan,VulkanFromANGLE,WebGPUService,WebGPUDeveloperFeatures}"
  sections=()
  # wllama too gets the GPU (llama.cpp's WebGPU backend) on a real adapter.
  browser=(--wllama-gpu)
  qwen35=(--shape qwen3.5-0.8b --gguf-types Q8_0,F16 --wllama-gpu)
fi

# Sections 1-5; the page refuses a software adapter unless --smoke, before the checkpoint is written.
text="bench/.cache/gpu-run-$stamp.txt"
node bench/gpu-cli.mjs ${sections[@]+"${sections[@]}"} --json "bench/.cache/gpu-run-$stamp-sections.json" | tee "$text"

# Section 5.
out="bench/.cache/gpu-run-$stamp.json"
node bench/browser-cli.mjs --json "${browser[@]}" ${args[@]+"${args[@]}"} >"$out"
adapter=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).adapter)' "$out")
echo "gpu-run: adapter: $adapter" >&2
if [[ -z "$smoke" ]] && grep -qi swiftshader <<<"$adapter"; then
  echo "gpu-run: Chromium fell back to SwiftShader; not appending (reports kept in bench/.cache)" >&2
  exit 1
fi
node --input-type=module -e '
import { readFileSync } from "node:fs";
import { printSpeedTables } from "./bench/report.mjs";
printSpeedTables(JSON.parse(readFileSync(process.argv[1], "utf8")), (l) => console.log(l));' "$out"
node bench/results.mjs --append-gpu "$out" --gpu-sections "$text"

# Section 7: weft and wllama on one Qwen3.5 GGUF (its report appended as a run of its own).
out35="bench/.cache/gpu-run-$stamp-qwen35.json"
node bench/browser-cli.mjs --json --gguf-family qwen35 "${qwen35[@]}" >"$out35"
node --input-type=module -e '
import { readFileSync } from "node:fs";
import { printSpeedTables } from "./bench/report.mjs";
printSpeedTables(JSON.parse(readFileSync(process.argv[1], "utf8")), (l) => console.log(l));' "$out35"
node bench/results.mjs --append-gpu "$out35"
