#!/usr/bin/env bash
# Runs bench/gpu-run.sh's sections 1-5 on a lent GPU machine from the kit bench/device-kit.sh built
# (carried as bench/.cache/kit), from the repository root:
#   bash bench/device-run.sh [--smoke] [--parts kernels,model,families,moe,gemma4] [--vulkan auto|lavapipe|...]
# Unpacks Node, Dawn and the tokenizers into /tmp/weft-kit, brings the Vulkan loader if the machine
# has none, points it at NVIDIA's ICD where the container keeps it outside the loader's search path,
# and writes $OUT/device-sections.json (after each part) and $OUT/device-run.log ($OUT unset: into
# bench/.cache). Back here, `node bench/gpu-cli.mjs --report <device-sections.json>` prints the
# tables, with the occupancy model's predictions beside section 1's measured bandwidths.
set -euo pipefail
cd "$(dirname "$0")/.."
kit=bench/.cache/kit
run=/tmp/weft-kit
out="${OUT:-bench/.cache}"
[[ -f "$kit/app/gpu-node-main.mjs" ]] || { echo "device-run: no kit at $kit (run bash bench/device-kit.sh here first)" >&2; exit 1; }
rm -rf "$run"
mkdir -p "$run/node_modules" "$out"
xz -dc "$kit/node.xz" >"$run/node"
chmod +x "$run/node"
tar -C "$run/node_modules" -xJf "$kit/webgpu.tar.xz"
tar -C "$run/node_modules" -xJf "$kit/tokenizers.tar.xz"
cp -r "$kit/app/." "$run/"
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in "$kit"/libvulkan1_*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if [[ -z "${VK_DRIVER_FILES:-}" && -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$run/node" --version
set -o pipefail
"$run/node" "$run/gpu-node-main.mjs" --json "$out/device-sections.json" "$@" 2>&1 | tee "$out/device-run.log"
