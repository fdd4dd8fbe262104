import type { ModelSpec } from '../model/spec.js';
import { weightShapes } from '../model/weights.js';
import { ModelFormatError } from './errors.js';

/**
 * The tensors a checkpoint of `spec` must hold, by Hugging Face name, with their shapes (row-major,
 * `[out, in]` for Linear weights): `weightShapes` of model/weights.ts, the one list of names.
 */
export const expectedTensors = weightShapes;

/**
 * Checks that a checkpoint's tensors (name → shape) cover {@link expectedTensors} with the right
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
  for (const [name, shape] of expectedTensors(spec)) {
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
