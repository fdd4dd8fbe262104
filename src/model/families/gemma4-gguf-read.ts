// Gemma 4's GGUF reader (the `gemma4` family's, loaded when a GGUF file is opened): the spec of a
// file of llama.cpp's `gemma4` architecture as its loader reads it (src/models/gemma4.cpp). The
// names, metadata and refusals of both ways are gemma4-gguf.ts's.
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta, metaCount, metaCountOrZero, metaNumber } from '../../formats/gguf/meta.js';
import type { ModelSpec, MoeSpec, RopeSpec } from '../spec/spec.js';
import { GEMMA4_ROUTING, kvSharingMismatch, llamaCppKvSource, UNROTATED } from './gemma4-gguf.js';
import { ggufBaseSpec, ggufMoe, tensorReads } from './gguf-base.js';

/**
 * A per-layer count of `key` as llama.cpp's loader takes one (`get_key_or_arr`): a scalar for
 * every layer or an array of one per layer; `fallback` when absent.
 */
function perLayerCounts(g: GgufFile, key: string, layers: number, fallback?: number): number[] {
  const v = meta(g, key);
  if (!Array.isArray(v)) return Array(layers).fill(metaCount(g, key, fallback));
  if (v.length !== layers || v.some((n) => typeof n !== 'number' || !Number.isSafeInteger(n) || n <= 0))
    throw new ModelFormatError(g.bytes.name, key, v, `must be one positive integer per layer (${layers})`);
  return v.map(Number);
}

/** The one value of `values` at the layers `where` picks (`fallback` if none); throws if they differ. */
function oneOf(
  g: GgufFile,
  key: string,
  values: number[],
  where: (l: number) => boolean,
  fallback: number,
  what: string,
): number {
  const picked = values.filter((_, l) => where(l));
  if (picked.some((v) => v !== picked[0]))
    throw new ModelFormatError(g.bytes.name, key, values, `must be one value for ${what}`);
  return picked[0] ?? fallback;
}

/**
 * Gemma 4's spec from a `gemma4` file, as llama.cpp's loader reads it: layer types from the
 * `sliding_window_pattern` bool array (or one bool for all), the sliding head `key_length_swa` and
 * the full one `key_length` (each equal to its value length), KV heads and MLP widths per layer
 * (one for each layer type; the KV-shared layers' MLPs the others' or twice as wide), RoPE bases
 * `rope.freq_base` and `rope.freq_base_swa`, each turning its whole head, the full layers'
 * proportional RoPE from `rope_freqs.weight`, `shared_kv_layers`, `embedding_length_per_layer_input`,
 * soft-capping, attention scale 1, V = K where a full layer has no `attn_v`, and the layer scalar
 * where `layer_output_scale` is stored, and the mixture ({@link ggufGemma4Moe}). Refused: RoPE
 * scaling keys, and what weft runs differently from llama.cpp (KV sharing's sources).
 */
export async function gemma4GgufSpec(g: GgufFile): Promise<ModelSpec> {
  const file = g.bytes.name;
  const k = (key: string) => `gemma4.${key}`;
  const layers = metaCount(g, k('block_count'));
  const sliding = ggufSlidingLayers(g, layers);
  const shared = metaCountOrZero(g, k('attention.shared_kv_layers'));
  if (shared >= layers)
    throw new ModelFormatError(
      file,
      k('attention.shared_kv_layers'),
      shared,
      `must leave layers of their own (${layers})`,
    );
  const heads = metaCount(g, k('attention.head_count'));
  const kvKey = k('attention.head_count_kv');
  const kv = perLayerCounts(g, kvKey, layers, heads);
  const kvHeads = oneOf(g, kvKey, kv, (l) => sliding[l]!, kv[0]!, 'the sliding layers');
  const fullKvHeads = oneOf(g, kvKey, kv, (l) => !sliding[l], kvHeads, 'the full layers');
  const ffKey = k('feed_forward_length');
  const ff = perLayerCounts(g, ffKey, layers);
  const intermediate = oneOf(
    g,
    ffKey,
    ff,
    (l) => l < layers - shared,
    ff[0]!,
    'the layers before the shared ones',
  );
  const sharedFf = oneOf(g, ffKey, ff, (l) => l >= layers - shared, intermediate, 'the KV-shared layers');
  if (sharedFf !== intermediate && sharedFf !== 2 * intermediate)
    throw new ModelFormatError(
      file,
      ffKey,
      ff,
      `the KV-shared layers' MLPs must be ${intermediate} or twice that wide`,
    );
  const base = await ggufBaseSpec(g, {
    family: 'gemma4',
    arch: 'gemma4',
    ropeFreqs: false,
    qkNorm: true,
    kvHeads: () => kvHeads,
    intermediate: () => intermediate,
  });
  if (base.rope.scaling)
    throw new ModelFormatError(
      file,
      k('rope.scaling.type'),
      base.rope.scaling,
      'llama.cpp’s gemma4 RoPE is scaled by rope_freqs.weight alone',
    );
  if (fullKvHeads <= 0 || heads % fullKvHeads !== 0)
    throw new ModelFormatError(file, kvKey, kv, `must divide head_count (${heads})`);
  const fullHead = base.headDim;
  const swaHead = metaCount(g, k('attention.key_length_swa'));
  for (const [key, want] of [
    ['attention.value_length', fullHead],
    ['attention.value_length_swa', swaHead],
    ['rope.dimension_count', fullHead],
    ['rope.dimension_count_swa', swaHead],
  ] as const) {
    const v = meta(g, k(key)) ?? want;
    if (v !== want)
      throw new ModelFormatError(
        file,
        k(key),
        v,
        `must be ${want} (${key.startsWith('rope') ? 'weft turns the whole head' : 'llama.cpp’s gemma4 loader requires keys and values of one width'})`,
      );
  }
  if (swaHead % 2 !== 0)
    throw new ModelFormatError(file, k('attention.key_length_swa'), swaHead, 'must be even for RoPE');
  const rope = sliding.every((s) => s)
    ? { theta: base.rope.theta, layout: 'half' as const }
    : await ggufFullRope(g, base.rope.theta, fullHead);
  const firstShared = layers - shared;
  const hasV = (l: number) => g.tensors.has(`blk.${l}.attn_v.weight`);
  const owners = Array.from({ length: firstShared }, (_, l) => l);
  if (owners.some((l) => sliding[l] && !hasV(l)))
    throw new ModelFormatError(
      file,
      `blk.${owners.find((l) => sliding[l] && !hasV(l))}.attn_v.weight`,
      undefined,
      'missing tensor (V = K only on full layers)',
    );
  const fullOwners = owners.filter((l) => !sliding[l]);
  const valueIsKey = fullOwners.length > 0 && !hasV(fullOwners[0]!);
  if (fullOwners.some((l) => hasV(l) === valueIsKey))
    throw new ModelFormatError(
      file,
      'attn_v.weight',
      fullOwners.map(hasV),
      'must be on every full layer or none (V = K)',
    );
  const scalars = Array.from({ length: layers }, (_, l) =>
    g.tensors.has(`blk.${l}.layer_output_scale.weight`),
  );
  if (scalars.some((s) => s !== scalars[0]))
    throw new ModelFormatError(file, 'layer_output_scale.weight', scalars, 'must be on every layer or none');
  const width = metaCountOrZero(g, k('embedding_length_per_layer_input'));
  const softcap = meta(g, k('final_logit_softcapping')) ?? 0;
  const spec: ModelSpec = {
    ...base,
    headDim: swaHead,
    rope,
    localRope: { theta: metaNumber(g, k('rope.freq_base_swa'), base.rope.theta), layout: 'half' },
    slidingWindow: metaCount(g, k('attention.sliding_window')),
    slidingLayers: sliding,
    embedScale: true,
    sandwichNorms: true,
    activation: 'gelu_tanh',
    attentionScale: 1,
    fullAttention: { headDim: fullHead, kvHeads: fullKvHeads, valueIsKey },
    ...(shared > 0 ? { kvSharedLayers: shared } : {}),
    valueNorm: true,
    ...(sharedFf !== intermediate ? { wideSharedMlp: true } : {}),
    ...(width > 0
      ? {
          perLayerInput: {
            width,
            vocab: g.tensors.get('per_layer_token_embd.weight')?.ne[1] ?? base.vocabSize,
          },
        }
      : {}),
    ...(scalars[0] ? { layerScalar: true } : {}),
    ...ggufGemma4Moe(g, layers),
    ...(softcap === 0 ? {} : { logitSoftcap: metaNumber(g, k('final_logit_softcapping')) }),
  };
  const mismatch = kvSharingMismatch(spec);
  if (mismatch !== undefined)
    throw new ModelFormatError(
      file,
      k('attention.sliding_window_pattern'),
      sliding,
      `llama.cpp's KV-shared layer ${mismatch} reads layer ${llamaCppKvSource(spec, mismatch)}'s cache, not the last earlier layer of its own type`,
    );
  return spec;
}

/** llama.cpp's gemma4 layer types (`get_key_or_arr` of bools): one per layer, or one for all. */
function ggufSlidingLayers(g: GgufFile, layers: number): boolean[] {
  const key = 'gemma4.attention.sliding_window_pattern';
  const v = meta(g, key);
  if (typeof v === 'boolean') return Array(layers).fill(v);
  if (!Array.isArray(v) || v.length !== layers || v.some((b) => typeof b !== 'boolean'))
    throw new ModelFormatError(
      g.bytes.name,
      key,
      v,
      v === undefined ? 'missing' : `must be one bool per layer (${layers})`,
    );
  return v.map((b) => b === true);
}

/**
 * The full layers' RoPE from `rope_freqs.weight` (which llama.cpp's gemma4 loader requires of a
 * model with full layers): one factor for the pairs that turn, then 1e30 for the rest, as
 * {@link gemma4RopeFreqs} writes it; every pair turning at factor 1 is RoPE unscaled.
 */
async function ggufFullRope(g: GgufFile, theta: number, headDim: number): Promise<RopeSpec> {
  const name = 'rope_freqs.weight';
  const info = g.tensors.get(name);
  if (info === undefined)
    throw new ModelFormatError(
      g.bytes.name,
      name,
      undefined,
      'missing tensor (llama.cpp’s gemma4 loader requires it for full layers)',
    );
  const f = await (await tensorReads()).readGgufTensorF32(info);
  const rotatedPairs = f.includes(UNROTATED) ? f.indexOf(UNROTATED) : f.length;
  const factor = rotatedPairs > 0 ? f[0]! : 1;
  if (
    f.length !== headDim / 2 ||
    !(factor > 0 && factor < UNROTATED) ||
    f.some((v, i) => v !== (i < rotatedPairs ? factor : UNROTATED))
  )
    throw new ModelFormatError(
      g.bytes.name,
      name,
      [...f].slice(0, 8),
      `must be ${headDim / 2} factors: one for the pairs that turn, then 1e30`,
    );
  if (rotatedPairs === f.length && factor === 1) return { theta, layout: 'half' };
  return { theta, layout: 'half', scaling: { type: 'proportional', rotatedPairs, factor } };
}

/**
 * Gemma 4's mixture as llama.cpp's gemma4 loader and graph take it: a layer with a router
 * (`ffn_gate_inp.weight`) runs it beside its dense MLP; `expert_count`, `expert_used_count` and
 * `expert_feed_forward_length` (which the loader needs for the experts' shapes: no fallback);
 * {@link GEMMA4_ROUTING}. None where no layer has a
 * router and no `expert_count` is stated; a router on some layers only is refused (weft runs
 * Gemma 4's mixture on every layer).
 */
function ggufGemma4Moe(g: GgufFile, layers: number): { moe?: MoeSpec } {
  const routers = Array.from({ length: layers }, (_, l) => g.tensors.has(`blk.${l}.ffn_gate_inp.weight`));
  if (!routers.includes(true) && meta(g, 'gemma4.expert_count') === undefined) return {};
  if (routers.includes(false))
    throw new ModelFormatError(
      g.bytes.name,
      'ffn_gate_inp.weight',
      routers,
      'must be on every layer (Gemma 4’s mixture runs on every layer or none)',
    );
  metaCount(g, 'gemma4.expert_feed_forward_length');
  return { moe: { ...ggufMoe(g, 'gemma4', GEMMA4_ROUTING, routers), ...GEMMA4_ROUTING } };
}
