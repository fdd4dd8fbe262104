// Steering fixtures: a tiny model whose residual stream never uses one coordinate.

import { memoryModelFiles } from '../../src/formats/io/files.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { fixtureFiles, safetensorsBytes } from '../fixtures/write.js';

/**
 * A tiny f32 checkpoint of `family` in which hidden coordinate `c` of the residual stream is 0 for
 * every token at every layer: column c of the embedding and row c of every o_proj and down_proj
 * (the only writers of the stream) are zero. Ablating e_c must then change nothing.
 */
export function deadCoordinateModel(family: ModelFamily, c: number, seed = 7) {
  const { spec, tensors, files } = fixtureFiles(family, 'f32', seed);
  const H = spec.hidden;
  for (const t of tensors) {
    if (t.name === 'model.embed_tokens.weight')
      for (let v = 0; v < spec.vocabSize; v++) t.data[v * H + c] = 0;
    if (/\.(o_proj|down_proj)\.weight$/.test(t.name)) {
      const cols = t.shape[1]!;
      t.data.fill(0, c * cols, (c + 1) * cols);
    }
  }
  files.set('model.safetensors', safetensorsBytes(tensors, 'F32'));
  return { spec, files: memoryModelFiles(`${family}-dead-${c}`, files) };
}

/** The unit vector e_c [H]. */
export function basis(H: number, c: number): Float32Array {
  const e = new Float32Array(H);
  e[c] = 1;
  return e;
}
