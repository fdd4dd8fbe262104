#!/usr/bin/env bash
# Runs the browser benchmark with Chromium on the machine's real GPU (WebGPU through Vulkan) and
# appends its tables to bench/RESULTS.md. Run from the repository root on a machine with a GPU and
# its Vulkan driver, after `bash scripts/setup.sh`:
#   bash bench/gpu-run.sh [bench:browser options, e.g. --quick or --runs 5]
# The report is also kept as bench/.cache/gpu-run-<time>.json. The run fails if Chromium's adapter
# turns out to be SwiftShader (no usable GPU driver): such a run says nothing about a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

# NVIDIA's Vulkan ICD where the container carries it outside the loader's search path.
if [[ -z "${VK_DRIVER_FILES:-}" && -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
if ! ldconfig -p | grep -q libvulkan.so.1; then
  echo "gpu-run: libvulkan.so.1 not found (apt-get install libvulkan1)" >&2
  exit 1
fi

# WEFT_GPU=real: Chromium's real-GPU flags (test/helpers/chromium.ts: Vulkan, no SwiftShader).
# Headless, with no display: ANGLE on Vulkan and no Vulkan surface.
export WEFT_GPU=real
export WEFT_CHROMIUM_ARGS="${WEFT_CHROMIUM_ARGS:---use-angle=vulkan --disable-vulkan-surface --enable-features=Vulkan,VulkanFromANGLE,WebGPUService}"

mkdir -p bench/.cache
out="bench/.cache/gpu-run-$(date -u +%Y%m%dT%H%M%SZ).json"
# wllama too gets the GPU (llama.cpp's WebGPU backend) on a real adapter.
node bench/browser-cli.mjs --json --wllama-gpu "$@" >"$out"
adapter=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).adapter)' "$out")
echo "gpu-run: adapter: $adapter" >&2
if grep -qi swiftshader <<<"$adapter"; then
  echo "gpu-run: Chromium fell back to SwiftShader; not appending (report kept in $out)" >&2
  exit 1
fi
node bench/results.mjs --append-gpu "$out"
