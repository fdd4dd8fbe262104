// A model's tensors as its checkpoint holds them: every name and shape its spec needs (its
// family's blocks, through the kind table, and the embedding, final norm and head), checked against
// a checkpoint before anything is read, and a vision-language checkpoint's language model found
// under its wrapper's prefixes.
import { ModelFormatError } from '../formats/errors.js';
import { blockTensors } from './blocks/index.js';
import { finalNormName, modelBlocks } from './families/index.js';
import type { ModelSpec } from './spec/spec.js';

/**
 * The Hugging Face name and shape of every tensor a spec needs, in checkpoint order: the
 * embedding, each block's tensors (its kind's `tensors`), the final norm and an untied head. Every
 * reader, `readWeights` and the test generators go through it.
 */
export function weightShapes(spec: ModelSpec): Map<string, readonly number[]> {
  const H = spec.hidden;
  const shapes = new Map<string, readonly number[]>();
  shapes.set('model.embed_tokens.weight', [spec.vocabSize, H]);
  for (const block of modelBlocks(spec))
    for (const [name, shape] of blockTensors(spec, block)) shapes.set(name, shape);
  shapes.set(finalNormName(spec), [H]);
  if (!spec.tiedEmbeddings) shapes.set('lm_head.weight', [spec.vocabSize, H]);
  return shapes;
}

/**
 * Checks that a checkpoint's tensors (name → shape) cover {@link weightShapes} with the right
 * shapes. Extra tensors (e.g. a redundant `lm_head.weight` in a tied checkpoint, rotary caches)
 * are allowed. Throws {@link ModelFormatError} naming the tensor, the shapes and a file: `file`
 * (the checkpoint, or a sharded one's index) for a missing tensor, `fileOf(tensor)` (the shard
 * holding it; `file` by default) for a wrong shape.
 */
export function checkTensors(
  spec: ModelSpec,
  tensors: ReadonlyMap<string, { readonly shape: readonly number[] }>,
  file: string,
  fileOf: (tensor: string) => string = () => file,
): void {
  for (const [name, shape] of weightShapes(spec)) {
    const found = tensors.get(name);
    if (found === undefined) {
      throw new ModelFormatError(
        file,
        name,
        undefined,
        `missing tensor (expected shape [${shape.join(', ')}])`,
      );
    }
    if (found.shape.length !== shape.length || found.shape.some((d, i) => d !== shape[i])) {
      throw new ModelFormatError(
        fileOf(name),
        name,
        found.shape,
        `wrong shape, expected [${shape.join(', ')}]`,
      );
    }
  }
}

/** What {@link languageModelTensors} left out of a vision-language checkpoint, by part. */
export interface SkippedParts {
  /** The vision tower and projector (Qwen3.5's `model.visual.*`, Gemma 3's `vision_tower.*`, …). */
  readonly vision: number;
  /** The prefixes they stood under, each as `prefix*`. */
  readonly visionParts: readonly string[];
  /** `mtp.*`: the multi-token-prediction layer (kept). */
  readonly mtp: number;
}

/** Where multimodal checkpoints keep their vision (and audio) side, left out of a text engine. */
const VISION_PARTS = [
  'model.visual.', // Qwen3.5
  'vision_tower.', // Gemma 3 as published
  'multi_modal_projector.',
  'model.vision_tower.', // Gemma 3 as Transformers 5 saves it
  'model.multi_modal_projector.',
  'model.audio_tower.', // Gemma 4's audio encoder and the two towers' embedders
  'model.embed_vision.',
  'model.embed_audio.',
];

/**
 * A vision-language checkpoint's language model under the names a text-only one uses: Qwen3.5's
 * published checkpoints (and Gemma 3's as Transformers 5 saves them) keep it under
 * `model.language_model.*`, Gemma 3's published ones under `language_model.model.*` (either
 * renamed to `model.*`), beside the vision tower and projector (left out and counted) and Qwen3.5's
 * MTP layer `mtp.*` (kept under its names, and counted). A checkpoint with neither prefix is
 * returned as it is.
 */
export function languageModelTensors<T>(tensors: ReadonlyMap<string, T>): {
  tensors: ReadonlyMap<string, T>;
  skipped: SkippedParts | undefined;
} {
  const names = [...tensors.keys()];
  const inner = ['model.language_model.', 'language_model.model.'].find((p) =>
    names.some((n) => n.startsWith(p)),
  );
  if (inner === undefined) return { tensors, skipped: undefined };
  const out = new Map<string, T>();
  let vision = 0;
  let mtp = 0;
  const parts = new Set<string>();
  for (const [name, t] of tensors) {
    const part = VISION_PARTS.find((p) => name.startsWith(p));
    if (name.startsWith(inner)) out.set(`model.${name.slice(inner.length)}`, t);
    else if (name === 'language_model.lm_head.weight') out.set('lm_head.weight', t);
    else if (part !== undefined) {
      vision++;
      parts.add(`${part}*`);
    } else {
      if (name.startsWith('mtp.')) mtp++;
      out.set(name, t); // lm_head.weight when untied, and the MTP layer (kept for draft: 'mtp')
    }
  }
  return { tensors: out, skipped: { vision, mtp, visionParts: [...parts] } };
}
