import { InvalidInputError } from '../errors.js';
import type { SteerMode, SteerPlan } from '../kernels/steer/steer.js';
import type { ModelSpec } from '../model/spec/spec.js';
import { checkSteerModel, l2, readSteerFile } from './format.js';

/**
 * The engine's `steer` option: activation steering of the residual stream while the model runs.
 * Give a steering file's bytes (`file`, checked against the model: see `src/steer/format.ts`) or
 * the vectors themselves (`vectors`, normalized to unit length here). "ablate" replaces each
 * hidden state h with h − (h·r)r after the chosen layers; "add" adds scale·r. Plain data (no
 * functions), so it crosses to a Web Worker unchanged.
 */
export interface SteerOptions {
  /** The bytes of a steering file (.safetensors with `weft-steer` metadata). */
  file?: Uint8Array;
  /** Name of the file, for messages (default "steering file"). */
  fileName?: string;
  /** Vectors given directly, each [hidden]: one shared by every layer, and/or per layer index. */
  vectors?: { shared?: ArrayLike<number>; layers?: Readonly<Record<number, ArrayLike<number>>> };
  /** Default: the file's mode, else "ablate". */
  mode?: SteerMode;
  /** Multiple of r that "add" adds. Default: the file's scale, else 1. */
  scale?: number;
  /**
   * Layers (0-based block indices) whose output is steered: the hidden state leaving block l,
   * after its MLP's residual add. `'all'` is every block. Default: the file's layers; with
   * `vectors`, every layer for a shared vector, else the layers given. Each chosen layer needs a
   * vector (its own or the shared one).
   */
  layers?: readonly number[] | 'all';
  /**
   * Also steer each chosen block's input: the hidden state entering block l, before its attention
   * norm (for block 0, the token embeddings), with block l's vector. With `layers: 'all'` this is
   * every block's input and output, the "ablate everywhere" setting used to remove a direction
   * from the whole residual stream. Default false.
   */
  inputs?: boolean;
}

function unit(v: ArrayLike<number>, hidden: number, what: string): Float32Array {
  if (v.length !== hidden)
    throw new InvalidInputError(
      `steer: ${what} has ${v.length} values, the model's hidden size is ${hidden}`,
    );
  const n = l2(v);
  if (!(n > 0) || !Number.isFinite(n)) throw new InvalidInputError(`steer: ${what} has norm ${n}`);
  return Float32Array.from(v, (x) => x / n);
}

/**
 * Resolves the `steer` option for a model into the runners' {@link SteerPlan}. `checksum` is the
 * model's `modelChecksum` (needed only with `file`). Throws `SteerMismatchError` for a file of
 * another model and InvalidInputError for bad options, naming the values.
 */
export async function resolveSteer(o: SteerOptions, spec: ModelSpec, checksum?: string): Promise<SteerPlan> {
  const H = spec.hidden;
  if ((o.file === undefined) === (o.vectors === undefined))
    throw new InvalidInputError('steer: give exactly one of file and vectors');
  let perLayer = new Map<number, Float32Array>();
  let shared: Float32Array | undefined;
  let defaults: readonly number[] | 'all';
  let mode: SteerMode = 'ablate';
  let scale = 1;
  if (o.file) {
    const f = await readSteerFile(o.file, o.fileName ?? 'steering file');
    if (checksum === undefined) throw new InvalidInputError('steer: a file needs the model checksum');
    checkSteerModel(f, checksum, H);
    perLayer = new Map(f.layers);
    shared = f.shared;
    defaults = f.defaultLayers;
    mode = f.mode;
    scale = f.scale;
  } else {
    const v = o.vectors ?? {};
    if (v.shared) shared = unit(v.shared, H, 'vectors.shared');
    for (const [k, r] of Object.entries(v.layers ?? {}))
      perLayer.set(Number(k), unit(r, H, `vectors.layers[${k}]`));
    defaults = shared ? 'all' : [...perLayer.keys()];
  }
  mode = o.mode ?? mode;
  scale = o.scale ?? scale;
  if (mode !== 'ablate' && mode !== 'add')
    throw new InvalidInputError(`steer: mode "${mode}" is not ablate or add`);
  if (!Number.isFinite(scale)) throw new InvalidInputError(`steer: scale ${scale} is not a finite number`);
  const chosen = o.layers ?? defaults;
  const layers = chosen === 'all' ? Array.from({ length: spec.layers }, (_, l) => l) : chosen;
  if (layers.length === 0) throw new InvalidInputError('steer: no layers chosen');
  const vectors: (Float32Array | undefined)[] = Array.from({ length: spec.layers }, () => undefined);
  for (const l of layers) {
    if (!Number.isInteger(l) || l < 0 || l >= spec.layers)
      throw new InvalidInputError(`steer: layer ${l} is not in [0, ${spec.layers})`);
    const r = perLayer.get(l) ?? shared;
    if (!r) throw new InvalidInputError(`steer: no vector for layer ${l} (and no shared vector)`);
    vectors[l] = r;
  }
  return { mode, scale, inputs: o.inputs ?? false, vectors };
}
