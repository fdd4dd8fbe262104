// Files the peers of the browser benchmark load, written under bench/.cache/ (git-ignored) when
// missing: the demo target as GGUF Q8_0 and Q4_0 (`weft export-gguf`) and as ONNX for transformers.js
// (tools/onnx/export.py, which also checks the ONNX logits against weft's reference). Delete
// bench/.cache/ to remake them.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

/** Where the generated peer files live (relative to the repository root). */
export const CACHE = 'bench/.cache';

/** GGUF path of `model` (a folder name under models/) at `type`. */
export const ggufPath = (model, type) => join(CACHE, 'gguf', `${model}-${type}.gguf`);

/** ONNX folder (transformers.js layout) of `model`. */
export const onnxDir = (model) => join(CACHE, 'onnx', model);

/** Writes the GGUFs with `weft export-gguf` (the built CLI: dist/). */
function writeGgufs(model, types) {
  if (!existsSync('dist/src/cli/main.js')) throw new Error('weft is not built: run `npm run build` first');
  mkdirSync(join(CACHE, 'gguf'), { recursive: true });
  for (const type of types)
    execFileSync(
      'node',
      ['bin/weft.js', 'export-gguf', `models/${model}`, ggufPath(model, type), '--type', type.toLowerCase()],
      { stdio: ['ignore', 2, 'inherit'] },
    );
}

/**
 * Makes whatever peer files of `model` (a folder under models/) the chosen `peers` (comma-separated
 * names, as `--peers` takes them) need and are missing: GGUFs for wllama, the ONNX export (which
 * needs torch) for transformers.js.
 */
export async function ensurePeerFiles(peers, model = 'kjv-target') {
  const names = peers.split(',');
  const missing = ['Q8_0', 'Q4_0'].filter((t) => !existsSync(ggufPath(model, t)));
  if (names.includes('wllama') && missing.length) writeGgufs(model, missing);
  const onnx = names.some((n) => n.startsWith('transformers.js'));
  if (onnx && !existsSync(join(onnxDir(model), 'onnx', 'model.onnx'))) {
    execFileSync('/usr/bin/python3', ['tools/onnx/export.py', `models/${model}`, onnxDir(model)], {
      stdio: ['ignore', 2, 'inherit'],
    });
  }
}
