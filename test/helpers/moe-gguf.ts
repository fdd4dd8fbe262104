// A quantized mixture-of-experts GGUF (test/families/qwen3-moe.gguf.test.ts and
// moe-gguf.gpu.test.ts): the wide tiny qwen3_moe config (hidden, expert width and MLP 256, so
// every row of every linear holds whole K-quant super-blocks) with a mixture on every layer, as
// llama.cpp's qwen3moe graph runs it, exported by `weft export-gguf` in a mix of GGML types.
import { exportModelGguf } from '../../src/convert/convert.js';
import type { GgufExportType } from '../../src/convert/gguf-export.js';
import { type GgufFile, openGguf } from '../../src/formats/gguf/header.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { type OpenedModel, openModel } from '../../src/model/load.js';
import { configFixtureFiles, tinyConfig } from '../fixtures/write.js';

/** The wide tiny qwen3_moe config with a mixture on every layer (its three). */
export const MOE_GGUF_CONFIG = { ...tinyConfig('qwen3_moe', true), mlp_only_layers: [] };

/**
 * The mixes the experts are written in: llama-quantize's Q4_K_M (gate and up Q4_K, down Q6_K in
 * the layers `use_more_bits` picks, the last of three, Q4_K in the others), and one of our own
 * with every expert part in its own K-quant (gate and up Q4_K, down Q6_K) and every other matrix
 * Q8_0, so the file's linears (and the default quant) are int8.
 */
export const MOE_GGUF_MIXES = {
  Q4_K_M: 'Q4_K_M',
  'Q4_K gate and up, Q6_K down, Q8_0 others': (name: string): GgufExportType =>
    /\.experts\.(gate|up)_proj$/.test(name) ? 'Q4_K' : /\.experts\.down_proj$/.test(name) ? 'Q6_K' : 'Q8_0',
} as const;

/** A name of {@link MOE_GGUF_MIXES}. */
export type MoeGgufMix = keyof typeof MOE_GGUF_MIXES;

/** The format of each mix's linears (`OpenedModel.packed`): the quant it loads at by default. */
export const MOE_GGUF_PACKED = {
  Q4_K_M: 'int4',
  'Q4_K gate and up, Q6_K down, Q8_0 others': 'int8',
} as const;

/** The GGUF of {@link MOE_GGUF_CONFIG} in `mix`: its bytes, its header, and the model opened from it. */
export async function moeGguf(
  mix: MoeGgufMix,
  seed = 5,
): Promise<{ bytes: Uint8Array; file: GgufFile; opened: OpenedModel }> {
  const { files } = configFixtureFiles(MOE_GGUF_CONFIG, seed);
  const bytes = await exportModelGguf(memoryModelFiles('qwen3-moe', files), MOE_GGUF_MIXES[mix]);
  const file = await openGguf(memoryBytes(bytes, 'qwen3-moe.gguf'));
  const opened = await openModel(memoryModelFiles('qwen3-moe.gguf', new Map([['qwen3-moe.gguf', bytes]])));
  return { bytes, file, opened };
}

/**
 * Each expert part of a mixture GGUF's model: its plain name (`model.layers.L.mlp.experts.E.
 * gate_proj.weight`) and the stack it is read from (`blk.L.ffn_gate_exps.weight`).
 */
export function expertParts(layers: number, experts: number): { name: string; stack: string }[] {
  const out: { name: string; stack: string }[] = [];
  for (let l = 0; l < layers; l++)
    for (const part of ['gate', 'up', 'down'])
      for (let e = 0; e < experts; e++)
        out.push({
          name: `model.layers.${l}.mlp.experts.${e}.${part}_proj.weight`,
          stack: `blk.${l}.ffn_${part}_exps.weight`,
        });
  return out;
}
