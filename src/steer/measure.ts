import { InvalidInputError } from '../errors.js';
import type { ReferenceRunner } from '../model/reference/reference.js';
import { l2 } from './format.js';

/** Directions measured per layer, and how far apart the two sets' means were. */
export interface MeasuredDirections {
  /** Per layer: unit vector [H] along mean(positive) − mean(negative). */
  readonly vectors: Map<number, Float32Array>;
  /** Per layer: ‖mean(positive) − mean(negative)‖, the natural "add" scale. */
  readonly norms: Map<number, number>;
}

/**
 * The residual stream [H] at the output of each of `layers`, at the last token of `ids`, run from
 * scratch on the reference model (its cache is reset and its residual hook used, then restored).
 */
export function lastTokenResiduals(
  model: ReferenceRunner,
  ids: readonly number[],
  layers: readonly number[],
): Map<number, Float32Array> {
  const H = model.spec.hidden;
  const want = new Set(layers);
  const out = new Map<number, Float32Array>();
  const saved = model.residualHook;
  model.residualHook = {
    output: (layer, x) => {
      saved?.output?.(layer, x);
      if (want.has(layer)) out.set(layer, x.slice(x.length - H));
    },
    input: saved?.input?.bind(saved),
  };
  try {
    model.logitsFor(ids);
  } finally {
    model.residualHook = saved;
  }
  return out;
}

/**
 * Measures a steering direction per layer: the mean residual stream at the last token of each
 * positive prompt minus that of each negative prompt (token ids), normalized. "add" with it moves
 * the model toward the positive set; "ablate" removes the difference.
 */
export function measureDirections(
  model: ReferenceRunner,
  positive: readonly (readonly number[])[],
  negative: readonly (readonly number[])[],
  layers: readonly number[],
): MeasuredDirections {
  if (positive.length === 0 || negative.length === 0)
    throw new InvalidInputError(
      `measure: need prompts in both sets, got ${positive.length} and ${negative.length}`,
    );
  for (const l of layers)
    if (!Number.isInteger(l) || l < 0 || l >= model.spec.layers)
      throw new InvalidInputError(`measure: layer ${l} is not in [0, ${model.spec.layers})`);
  const H = model.spec.hidden;
  const mean = (set: readonly (readonly number[])[]) => {
    const sums = new Map(layers.map((l) => [l, new Float64Array(H)]));
    for (const ids of set) {
      if (ids.length === 0) throw new InvalidInputError('measure: an empty prompt');
      for (const [l, r] of lastTokenResiduals(model, ids, layers)) {
        const s = sums.get(l)!;
        for (let i = 0; i < H; i++) s[i]! += r[i]! / set.length;
      }
    }
    return sums;
  };
  const pos = mean(positive);
  const neg = mean(negative);
  const vectors = new Map<number, Float32Array>();
  const norms = new Map<number, number>();
  for (const l of layers) {
    const p = pos.get(l)!;
    const n = neg.get(l)!;
    const d = Float64Array.from(p, (v, i) => v - n[i]!);
    const norm = l2(d);
    if (!(norm > 0)) throw new InvalidInputError(`measure: the two sets have the same mean at layer ${l}`);
    vectors.set(
      l,
      Float32Array.from(d, (v) => v / norm),
    );
    norms.set(l, norm);
  }
  return { vectors, norms };
}
