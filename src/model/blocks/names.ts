// How a block's tensors are named: each kind writes its default names (Hugging Face's, for the
// family that introduced it) as suffixes under a layer's prefix, and a family renames the ones its
// checkpoints call otherwise. The one mechanism every kind's descriptor uses.

/** Tensors under checkpoint names, with their shapes (slowest dimension first). */
export type TensorShapes = readonly (readonly [string, readonly number[]])[];

/** A family's renames of some of a kind's names: suffixes under the layer's prefix. */
export type Renames<N> = { readonly [K in keyof N]?: string };

/** A kind's names under `prefix`: each key's suffix, renamed where `renames` says, after `prefix.`. */
export function namer<N extends { readonly [K in keyof N]: string }>(
  prefix: string,
  defaults: N,
  renames: Renames<N>,
): (key: keyof N) => string {
  return (key) => `${prefix}.${renames[key] ?? defaults[key]}`;
}
