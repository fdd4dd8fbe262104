// Files the peers of the browser benchmark load, written under bench/.cache/ (git-ignored) when
// missing: the demo target as GGUF Q8_0 and Q4_0 (`weft export-gguf`) and as ONNX for transformers.js
// (tools/onnx/export.py, which also checks the ONNX logits against weft's reference), and for
// `--gguf-family qwen35` a random-weight Qwen3.5 checkpoint and its GGUFs. Delete bench/.cache/ to
// remake them.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createServer } from 'vite';

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

/**
 * The random-weight Qwen3.5 checkpoints of `bench:browser --gguf-family qwen35`, by `--shape`: keys
 * replacing those of the published Qwen3.5-0.8B config (SCALE_MODELS in test/fixtures/scale.ts),
 * whose vocabulary (248,320) every shape keeps. DeltaNet key and value heads are equally wide, as
 * llama.cpp's qwen35 loader needs (it sizes ssm_norm by the key width); every linear's input is a
 * multiple of 32, so Q8_0 blocks fit every row.
 */
export const QWEN35_SHAPES = {
  // The smoke test's (test/families/qwen3-5.peer.browser.test.ts): hidden 64, 4 layers.
  tiny: {
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: 4,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    head_dim: 32,
    linear_num_key_heads: 2,
    linear_num_value_heads: 2,
    linear_key_head_dim: 32,
    linear_value_head_dim: 32,
  },
  // The default: minutes on SwiftShader. Half the width and a third of the layers of the 0.8B.
  mid: {
    hidden_size: 512,
    intermediate_size: 1536,
    num_hidden_layers: 8,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    head_dim: 128,
    linear_num_key_heads: 8,
    linear_num_value_heads: 8,
    linear_key_head_dim: 64,
    linear_value_head_dim: 64,
  },
  // The published shape, for a real GPU.
  'qwen3.5-0.8b': {},
};

/** GGUF types the qwen35 rows take, and the weft format each loads at. */
export const QWEN35_TYPES = { Q8_0: 'int8', F16: 'f16' };

/**
 * The token ids a random model may generate: those of the tokenizer's vocabulary (not its added
 * tokens) whose text is printable ASCII. Anything else (a byte of a multi-byte character, a
 * control character, a special token, the padding ids past the tokenizer up to the model's
 * vocabulary) would make wllama's streamed text end mid-character or break its reading of the
 * reply (see test/helpers/wllama-parity.ts).
 */
function printableIds(tokenizerJson) {
  // GPT-2's byte-level alphabet: printable ASCII bytes stand for themselves, the space is 'Ġ'.
  const printable = (s) => [...s].every((c) => c === 'Ġ' || (c >= '!' && c <= '~'));
  return new Set(
    Object.entries(tokenizerJson.model.vocab)
      .filter(([s]) => printable(s))
      .map(([, id]) => id),
  );
}

/**
 * Zeroes the rows of every id but {@link printableIds} in the embedding (the tied head) and any
 * separate head of the BF16 `model.safetensors` in `dir`: those ids' logits are then exactly 0,
 * below the largest of some 90,000 random ones, so greedy decoding never picks them, in weft or in
 * llama.cpp. Prompts of English text are made of allowed ids only.
 */
async function zeroUnprintableRows(dir) {
  const allowed = printableIds(JSON.parse(await readFile(join(dir, 'tokenizer.json'), 'utf8')));
  const file = await open(join(dir, 'model.safetensors'), 'r+');
  try {
    const prefix = Buffer.alloc(8);
    await file.read(prefix, 0, 8, 0);
    const headerBytes = Number(prefix.readBigUInt64LE(0));
    const header = Buffer.alloc(headerBytes);
    await file.read(header, 0, headerBytes, 8);
    const tensors = JSON.parse(header.toString('utf8'));
    for (const name of ['model.embed_tokens.weight', 'lm_head.weight']) {
      const t = tensors[name];
      if (!t) continue;
      const [rows, cols] = t.shape;
      const rowBytes = 2 * cols; // BF16
      const start = 8 + headerBytes + t.data_offsets[0];
      // A block of rows at a time: [block, cols] BF16.
      const block = Buffer.alloc(4096 * rowBytes);
      for (let r0 = 0; r0 < rows; r0 += 4096) {
        const n = Math.min(4096, rows - r0);
        await file.read(block, 0, n * rowBytes, start + r0 * rowBytes);
        for (let r = 0; r < n; r++) if (!allowed.has(r0 + r)) block.fill(0, r * rowBytes, (r + 1) * rowBytes);
        await file.write(block, 0, n * rowBytes, start + r0 * rowBytes);
      }
    }
  } finally {
    await file.close();
  }
}

/**
 * Makes the GGUF files (`types`, of {@link QWEN35_TYPES}) of the random Qwen3.5 checkpoint of
 * `shape` ({@link QWEN35_SHAPES}) that are missing: the Hugging Face folder bench/.cache/qwen35-<shape>
 * (test/fixtures/scale-dir.ts, Qwen3's tokenizer standing in: npm has no Qwen3.5 tokenizer; its
 * `written.json` is the last file written) with only printable ids generable, then
 * bench/.cache/gguf/qwen35-<shape>-<TYPE>.gguf through weft's exporter (from src/, as the page loads
 * it: no build needed). Returns the files' stem and the checkpoint's config.json.
 */
export async function ensureQwen35Ggufs(shape, types) {
  const overrides = QWEN35_SHAPES[shape];
  if (!overrides)
    throw new Error(`--shape: "${shape}" is not one of ${Object.keys(QWEN35_SHAPES).join(', ')}`);
  for (const type of types)
    if (!(type in QWEN35_TYPES))
      throw new Error(`--gguf-types: "${type}" is not one of ${Object.keys(QWEN35_TYPES).join(', ')}`);
  const model = `qwen35-${shape}`;
  const dir = join(CACHE, model);
  const marker = join(dir, 'written.json');
  const wanted = JSON.stringify({ shape: 'qwen3.5-0.8b', seed: 1, overrides, ids: 'printable ASCII' });
  const fresh = (await readFile(marker, 'utf8').catch(() => '')) === wanted;
  const missing = types.filter((t) => !fresh || !existsSync(ggufPath(model, t)));
  if (missing.length > 0) {
    // TS through Vite's SSR loader, as bench/gpu-cli.mjs loads the fixtures.
    const vite = await createServer({
      configFile: 'vite.config.ts',
      logLevel: 'warn',
      appType: 'custom',
      server: { middlewareMode: true, hmr: false },
    });
    try {
      if (!fresh) {
        await rm(dir, { recursive: true, force: true });
        for (const t of Object.keys(QWEN35_TYPES)) await rm(ggufPath(model, t), { force: true });
        await mkdir(dir, { recursive: true });
        const { writeScaleDir } = await vite.ssrLoadModule('/test/fixtures/scale-dir.ts');
        const { weightBytes } = await writeScaleDir(dir, 'qwen3.5-0.8b', 1, overrides);
        await zeroUnprintableRows(dir);
        await writeFile(marker, wanted);
        console.error(`peer-files: wrote ${dir} (${(weightBytes / 2 ** 20).toFixed(1)} MiB)`);
      }
      const { exportModelGguf } = await vite.ssrLoadModule('/src/convert/convert.ts');
      const { pathModel } = await vite.ssrLoadModule('/src/formats/io/node-file.ts');
      mkdirSync(join(CACHE, 'gguf'), { recursive: true });
      for (const type of missing) {
        const files = await pathModel(dir);
        try {
          const bytes = await exportModelGguf(files, type);
          await writeFile(`${ggufPath(model, type)}.tmp`, bytes);
          await rename(`${ggufPath(model, type)}.tmp`, ggufPath(model, type));
          console.error(
            `peer-files: wrote ${ggufPath(model, type)} (${(bytes.byteLength / 2 ** 20).toFixed(1)} MiB)`,
          );
        } finally {
          await files.close?.();
        }
      }
    } finally {
      await vite.close();
    }
  }
  return { model, config: JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) };
}
