// The steering file: a safetensors file of unit vectors in a model's residual stream, with
//   steer.layer.<i>  [hidden]  the direction applied after block i, or
//   steer.shared     [hidden]  one direction for every chosen layer without its own,
// and __metadata__ { format: "weft-steer", version: "1", model_checksum, hidden, layers, mode, scale }.
// `model_checksum` ties a file to the model it was measured on (the model's `checksum()` from openModel); loading it for
// another model is refused with a SteerMismatchError.
import { ModelFormatError } from '../formats/errors.js';
import { memoryBytes } from '../formats/io/bytes.js';
import { openSafetensors, readTensorF32, writeSafetensors } from '../formats/safetensors.js';
import type { SteerMode } from '../kernels/steer/steer.js';
import { SteerMismatchError } from './errors.js';

/** Metadata `format` of a steering file. */
const STEER_FORMAT = 'weft-steer';
/** Metadata `version` this code writes and reads. */
const STEER_VERSION = '1';
/** Largest |‖r‖ − 1| accepted for a stored vector (they are written normalized in f32). */
const UNIT_TOLERANCE = 1e-3;

/** A steering file's content. */
export interface SteerFile {
  /** Where it came from, for messages. */
  readonly name: string;
  /** Residual stream width of the model it was measured on. */
  readonly hidden: number;
  /** The `checksum()` of that model (`OpenedModel` in model/load.ts). */
  readonly modelChecksum: string;
  /** Per-layer unit vectors [hidden], by layer index. */
  readonly layers: ReadonlyMap<number, Float32Array>;
  /** One unit vector [hidden] for every layer without its own. */
  readonly shared: Float32Array | undefined;
  /** Default layers to steer: indices, or every layer. */
  readonly defaultLayers: readonly number[] | 'all';
  /** Default mode and scale. */
  readonly mode: SteerMode;
  readonly scale: number;
}

/** Euclidean norm, accumulated in f64. */
export function l2(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  return Math.sqrt(s);
}

/** Parses a `layers` value: `all`, or comma-separated non-negative integers. */
export function parseLayers(text: string, file: string, field = 'layers'): readonly number[] | 'all' {
  if (text.trim() === 'all') return 'all';
  const parts = text.split(',').map((s) => s.trim());
  const layers = parts.map(Number);
  if (parts.length === 0 || parts.some((p) => !/^\d+$/.test(p)))
    throw new ModelFormatError(file, field, text, 'must be "all" or comma-separated layer indices');
  return layers;
}

/** Serialises a steering file (vectors as F32). Vectors must already be unit length. */
export function writeSteerFile(f: Omit<SteerFile, 'name'>): Uint8Array<ArrayBuffer> {
  const bytes = (v: Float32Array) =>
    new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  const tensors = [...f.layers]
    .sort(([a], [b]) => a - b)
    .map(([l, v]) => ({
      name: `steer.layer.${l}`,
      dtype: 'F32' as const,
      shape: [v.length],
      data: bytes(v),
    }));
  if (f.shared)
    tensors.push({ name: 'steer.shared', dtype: 'F32', shape: [f.shared.length], data: bytes(f.shared) });
  return writeSafetensors(tensors, {
    format: STEER_FORMAT,
    version: STEER_VERSION,
    model_checksum: f.modelChecksum,
    hidden: String(f.hidden),
    layers: f.defaultLayers === 'all' ? 'all' : f.defaultLayers.join(','),
    mode: f.mode,
    scale: String(f.scale),
  });
}

/**
 * Reads and validates a steering file: the metadata fields above, every tensor named
 * `steer.layer.<i>` or `steer.shared` with shape [hidden] and unit length. Throws
 * {@link ModelFormatError} naming the file, the field and the value otherwise.
 */
export async function readSteerFile(bytes: Uint8Array, name: string): Promise<SteerFile> {
  const ckpt = await openSafetensors(memoryBytes(bytes, name));
  const meta = ckpt.metadata;
  const field = (key: string): string => {
    const v = meta[key];
    if (v === undefined) throw new ModelFormatError(name, `__metadata__.${key}`, v, 'is missing');
    return v;
  };
  if (field('format') !== STEER_FORMAT)
    throw new ModelFormatError(name, '__metadata__.format', meta.format, `must be "${STEER_FORMAT}"`);
  if (field('version') !== STEER_VERSION)
    throw new ModelFormatError(name, '__metadata__.version', meta.version, `must be "${STEER_VERSION}"`);
  const checksum = field('model_checksum');
  if (!/^[0-9a-f]{64}$/.test(checksum))
    throw new ModelFormatError(
      name,
      '__metadata__.model_checksum',
      checksum,
      'must be 64 lowercase hex digits',
    );
  const hidden = Number(field('hidden'));
  if (!Number.isInteger(hidden) || hidden < 1)
    throw new ModelFormatError(name, '__metadata__.hidden', meta.hidden, 'must be a positive integer');
  const mode = field('mode');
  if (mode !== 'ablate' && mode !== 'add')
    throw new ModelFormatError(name, '__metadata__.mode', mode, 'must be "ablate" or "add"');
  const scale = Number(field('scale'));
  if (field('scale').trim() === '' || !Number.isFinite(scale))
    throw new ModelFormatError(name, '__metadata__.scale', meta.scale, 'must be a finite number');
  const defaultLayers = parseLayers(field('layers'), name, '__metadata__.layers');

  const layers = new Map<number, Float32Array>();
  let shared: Float32Array | undefined;
  for (const [tensor, info] of ckpt.tensors) {
    const m = /^steer\.layer\.(\d+)$/.exec(tensor);
    if (!m && tensor !== 'steer.shared')
      throw new ModelFormatError(name, tensor, info.shape, 'is not steer.layer.<i> or steer.shared');
    if (info.shape.length !== 1 || info.shape[0] !== hidden)
      throw new ModelFormatError(name, tensor, info.shape, `must have shape [${hidden}] (the hidden size)`);
    const v = await readTensorF32(info);
    const norm = l2(v);
    if (!(Math.abs(norm - 1) <= UNIT_TOLERANCE))
      throw new ModelFormatError(name, tensor, norm, 'must be a unit vector (its norm is shown)');
    if (m) layers.set(Number(m[1]), v);
    else shared = v;
  }
  if (layers.size === 0 && !shared)
    throw new ModelFormatError(name, '(tensors)', [], 'holds no steering vector');
  return { name, hidden, modelChecksum: checksum, layers, shared, defaultLayers, mode, scale };
}

/** Throws {@link SteerMismatchError} unless `file` was measured on the model with this checksum and width. */
export function checkSteerModel(file: SteerFile, checksum: string, hidden: number): void {
  if (file.hidden !== hidden) throw new SteerMismatchError(file.name, 'hidden', file.hidden, hidden);
  if (file.modelChecksum !== checksum)
    throw new SteerMismatchError(file.name, 'model_checksum', file.modelChecksum, checksum);
}
