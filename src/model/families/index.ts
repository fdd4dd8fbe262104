// The family table: every family weft runs, one file each, and the questions the rest of weft asks
// of a model's family (its spec from config.json or GGUF metadata, its blocks, its names and
// stored forms both ways). Typed so that a family missing from the table, or a part missing from a
// family, does not compile.
import { InvalidInputError } from '../../errors.js';
import { ModelFormatError } from '../../formats/errors.js';
import type { GgufFile } from '../../formats/gguf/header.js';
import { meta } from '../../formats/gguf/meta.js';
import type { Block } from '../blocks/blocks.js';
import { Fields, isObject, refusePrequantized } from '../spec/fields.js';
import type { ModelSpec } from '../spec/spec.js';
import type { Family, FusedProjection, GgufFamily, StoredForm } from './family.js';
import { gemma3 } from './gemma3.js';
import { gemma4 } from './gemma4.js';
import { lfm2 } from './lfm2.js';
import { lfm2_moe } from './lfm2-moe.js';
import { llama } from './llama.js';
import { ministral3 } from './ministral3.js';
import { mistral } from './mistral.js';
import { phi3 } from './phi3.js';
import { qwen2 } from './qwen2.js';
import { qwen3 } from './qwen3.js';
import { qwen3_5 } from './qwen3-5.js';
import { qwen3_5_moe } from './qwen3-5-moe.js';
import { qwen3_moe } from './qwen3-moe.js';
import { smollm3 } from './smollm3.js';

/**
 * Every family, by the name a spec carries (`spec.family`). A new family is its file and a row
 * here; each row must be a whole {@link Family}.
 */
export const FAMILIES = {
  llama,
  mistral,
  qwen2,
  qwen3,
  qwen3_5,
  gemma3,
  gemma4,
  smollm3,
  lfm2,
  phi3,
  ministral3,
  qwen3_moe,
  lfm2_moe,
  qwen3_5_moe,
} as const satisfies Readonly<Record<string, Family>>;

/** A family's name: a key of {@link FAMILIES}. */
export type ModelFamily = keyof typeof FAMILIES;

/**
 * The family of a plain decoder layer under Llama's names (RMSNorm, SiLU-gated MLP, RoPE): what a
 * draft head's one layer is, whatever its target's family.
 */
export const PLAIN_DECODER: ModelFamily = 'llama';

const BY_NAME: ReadonlyMap<string, Family> = new Map(Object.entries(FAMILIES));

/** The family of a spec; throws InvalidInputError for a name the table does not hold. */
function familyOf(spec: Pick<ModelSpec, 'family'>): Family {
  const family = BY_NAME.get(spec.family);
  if (family === undefined)
    throw new InvalidInputError(
      `spec.family = ${JSON.stringify(spec.family)}: not a family weft runs (${[...BY_NAME.keys()].join(', ')})`,
    );
  return family;
}

/**
 * Builds a {@link ModelSpec} from a Hugging Face `config.json` (already JSON-parsed): its
 * `model_type` picks the family whose file reads it (a vision-language wrapper's, the language model
 * inside). Pre-quantized checkpoints (`quantization_config`), unknown architectures and missing or
 * ill-typed fields throw {@link ModelFormatError} naming `file`, the key and the value.
 */
export function specFromConfig(json: unknown, file = 'config.json'): ModelSpec {
  if (!isObject(json)) throw new ModelFormatError(file, '(root)', json, 'must be a JSON object');
  const f: Fields = new Fields(json, file);
  refusePrequantized(f);
  const type = f.string('model_type');
  const readers = Object.values(FAMILIES).flatMap((family) => Object.entries(family.configTypes));
  const read = readers.find(([name]) => name === type)?.[1];
  if (read === undefined)
    return f.refuse(
      'model_type',
      `unsupported architecture (weft runs ${readers.map(([name]) => name).join(', ')})`,
    );
  return read(f, f);
}

/** The families that read GGUF files, by `general.architecture`. */
const GGUF_READERS = new Map(
  Object.values(FAMILIES)
    .filter((family) => family.gguf.reads)
    .map((family) => [family.gguf.arch, family.gguf]),
);

/**
 * The {@link ModelSpec} of a GGUF file, from its `general.architecture` and the metadata (and,
 * where an architecture keeps some there, the tensors) that architecture's family reads.
 */
export async function ggufSpec(g: GgufFile): Promise<ModelSpec> {
  const arch = meta(g, 'general.architecture');
  const reader = typeof arch === 'string' ? GGUF_READERS.get(arch) : undefined;
  if (reader === undefined)
    throw new ModelFormatError(
      g.bytes.name,
      'general.architecture',
      arch,
      `unsupported architecture (${[...GGUF_READERS.keys()].join(', ')})`,
    );
  return reader.spec(g);
}

/** The blocks of a model's forward, in order, under the checkpoint's names. */
export function modelBlocks(spec: ModelSpec): Block[] {
  return familyOf(spec).blocks(spec);
}

/** The GGUF side of a spec's family. */
export function ggufFamily(spec: Pick<ModelSpec, 'family'>): GgufFamily {
  return familyOf(spec).gguf;
}

/**
 * The Hugging Face name of a GGUF tensor of a model of `spec`'s family, e.g. `blk.3.attn_q.weight`
 * → `model.layers.3.self_attn.q_proj.weight`; undefined for tensors weft does not use
 * (`rope_freqs.weight`, a phi3 file's RoPE factors, which the spec reads, and blocks from
 * `spec.layers` on: a qwen35 file's MTP layers). The one place GGUF names are renamed.
 */
export function hfTensorName(
  ggufName: string,
  spec: Pick<ModelSpec, 'family'> & { readonly layers?: number },
): string | undefined {
  const { names } = ggufFamily(spec);
  for (const [g, h] of names.global) if (ggufName === g) return h;
  const m = /^blk\.(\d+)\.(.+)$/.exec(ggufName);
  if (m === null || (spec.layers !== undefined && Number(m[1]) >= spec.layers)) return undefined;
  for (const [g, h] of names.layer) if (m[2] === g) return `model.layers.${m[1]}.${h}`;
  return undefined;
}

/** The inverse of {@link hfTensorName} for a model of `spec`'s family, for the GGUF writer. */
export function ggufTensorName(hfName: string, spec: Pick<ModelSpec, 'family'>): string | undefined {
  const { names } = ggufFamily(spec);
  for (const [g, h] of names.global) if (hfName === h) return g;
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hfName);
  if (m === null) return undefined;
  for (const [g, h] of names.layer) if (m[2] === h) return `blk.${m[1]}.${g}`;
  return undefined;
}

/** Whether llama.cpp's converter squeezes tensor `hfName` of a spec's family (a depthwise convolution). */
function squeezed(hfName: string, spec: Pick<ModelSpec, 'family'>): boolean {
  return ggufFamily(spec).squeezed.some((suffix) => hfName.endsWith(suffix));
}

/**
 * A tensor's Hugging Face shape from its GGUF `ne` (fastest first): `ne` reversed, except that
 * llama.cpp's converter squeezes a depthwise convolution's weight [C, 1, K] (Qwen3.5's conv1d,
 * LFM2's `conv.conv`) to `ne` [K, C].
 */
export function hfShape(hfName: string, ne: readonly number[], spec: Pick<ModelSpec, 'family'>): number[] {
  const shape = [...ne].reverse();
  return squeezed(hfName, spec) && shape.length === 2 ? [shape[0]!, 1, shape[1]!] : shape;
}

/** The inverse of {@link hfShape}: the `ne` a tensor of Hugging Face shape `shape` is written with. */
export function ggufNe(hfName: string, shape: readonly number[], spec: Pick<ModelSpec, 'family'>): number[] {
  const kept = squeezed(hfName, spec) ? shape.filter((d, i) => i !== 1 || d !== 1) : shape;
  return [...kept].reverse();
}

/** How llama.cpp's converter stores the values of tensor `hfName` of a model of `spec`. */
export function storedForm(spec: ModelSpec, hfName: string, shape: readonly number[]): StoredForm {
  return ggufFamily(spec).storedForm(spec, hfName, shape);
}

/** A config.json for a spec (see Family.config), for a model converted from GGUF. */
export function configFromSpec(spec: ModelSpec): Record<string, unknown> {
  return familyOf(spec).config(spec);
}

/** Layer `layer`'s fused projections as the spec's family stores them (see Family.fused). */
export function fusedProjections(spec: ModelSpec, layer: number): FusedProjection[] {
  return familyOf(spec).fused(spec, layer);
}

/** The checkpoint name of a spec's final norm. */
export function finalNormName(spec: Pick<ModelSpec, 'family'>): string {
  return familyOf(spec).finalNorm;
}
