// SmolLM3: a Llama whose layers listed in `no_rope_layers` (every fourth by default) have no RoPE.
// Transformers' `SmolLM3Config` (4 KV heads, RoPE base 2e6 and a tied head by default); llama.cpp's
// `smollm3` architecture, which fixes the RoPE-less layers at every fourth and permutes Q and K as
// Llama's converter does.
import type { Fields } from '../spec/fields.js';
import type { ModelSpec } from '../spec/spec.js';
import { baseConfig, decoderBlocks, decoderSpec } from './decoder.js';
import type { Family } from './family.js';
import {
  DECODER_LAYER_NAMES,
  decoderMetadata,
  GLOBAL_NAMES,
  ggufBaseSpec,
  refuseExport,
  refuseRopeFreqs,
} from './gguf-base.js';
import { interleavedQk } from './stored.js';

/**
 * SmolLM3's `no_rope_layers`: per layer 1 where it uses RoPE, 0 where it has none; absent, every
 * `no_rope_layer_interval`-th layer (4) has none, as SmolLM3Config fills it.
 */
function readNoRopeLayers(f: Fields, layers: number): boolean[] {
  const list = f.obj.no_rope_layers;
  if (list === undefined || list === null) {
    const interval = f.count('no_rope_layer_interval', 4);
    return Array.from({ length: layers }, (_, i) => (i + 1) % interval === 0);
  }
  // Transformers reads entry i for layer i: a longer list is allowed.
  if (!Array.isArray(list) || list.length < layers || list.some((v) => v !== 0 && v !== 1))
    f.refuse('no_rope_layers', `must list 0 or 1 for each of the ${layers} layers`);
  return list.slice(0, layers).map((v) => v === 0);
}

/**
 * The layers without RoPE as llama.cpp's smollm3 loader fixes them
 * (`llama_model_smollm3::load_arch_hparams`, src/models/smollm3.cpp: `n_no_rope_layer_step = 4`,
 * layer i rotates unless (i + 1) mod 4 = 0); no GGUF key changes them.
 */
function everyFourth(layers: number): boolean[] {
  return Array.from({ length: layers }, (_, i) => (i + 1) % 4 === 0);
}

/**
 * What llama.cpp's smollm3 loader cannot state: RoPE-less layers other than every fourth, and
 * Llama 3 scaling (it reads no `rope_freqs.weight`, and refuses a file with one).
 */
function metadata(spec: ModelSpec) {
  refuseRopeFreqs(spec, 'smollm3');
  const noRope = spec.noRopeLayers ?? [];
  if (noRope.some((none, i) => none !== ((i + 1) % 4 === 0)))
    refuseExport(
      spec,
      'no_rope_layers',
      noRope.map((none) => (none ? 0 : 1)),
      'llama.cpp’s smollm3 loader leaves out RoPE in every 4th layer exactly (n_no_rope_layer_step = 4, no GGUF key)',
    );
  return decoderMetadata(spec, 'smollm3');
}

export const smollm3: Family = {
  configTypes: {
    smollm3: (f) =>
      decoderSpec(f, {
        family: 'smollm3',
        defaults: { kvHeads: 4, theta: 2_000_000, tied: true },
        extra: (c, layers) => ({ noRopeLayers: readNoRopeLayers(c, layers) }),
      }),
  },
  config: (spec) => baseConfig(spec, 'SmolLM3ForCausalLM', 'smollm3'),
  blocks: (spec) => decoderBlocks(spec),
  finalNorm: 'model.norm.weight',
  fused: () => [],
  gguf: {
    arch: 'smollm3',
    reads: true,
    async spec(g) {
      const base = await ggufBaseSpec(g, { family: 'smollm3', arch: 'smollm3', ropeFreqs: true });
      return { ...base, noRopeLayers: everyFourth(base.layers) };
    },
    metadata,
    names: { global: GLOBAL_NAMES, layer: DECODER_LAYER_NAMES },
    squeezed: [],
    storedForm: interleavedQk,
  },
};
