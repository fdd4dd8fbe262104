import type { GpuContext } from './device.js';

/** Usage of a storage buffer that kernels read and write and that tests can copy out of. */
export const STORAGE = 0x80 | 0x4 | 0x8; // STORAGE | COPY_SRC | COPY_DST
/** Usage of a uniform buffer written from the CPU, that tests can copy out of. */
export const UNIFORM = 0x40 | 0x4 | 0x8; // UNIFORM | COPY_SRC | COPY_DST

/** Rounds `n` up to a multiple of `m`. */
export function alignUp(n: number, m: number): number {
  return Math.ceil(n / m) * m;
}

/**
 * Creates a buffer of at least `byteLength` bytes (rounded up to 4, minimum 4), counted in
 * `ctx`'s allocation stats.
 */
export function createBuffer(ctx: GpuContext, byteLength: number, label: string, usage = STORAGE): GPUBuffer {
  ctx.assertAlive();
  return ctx.device.createBuffer({ label, size: Math.max(4, alignUp(byteLength, 4)), usage });
}

/** Creates a storage buffer holding a copy of `data` (padded to 4 bytes). */
export function uploadBuffer(
  ctx: GpuContext,
  data: ArrayBufferView,
  label: string,
  usage = STORAGE,
): GPUBuffer {
  const buf = createBuffer(ctx, data.byteLength, label, usage);
  writeBuffer(ctx, buf, data);
  return buf;
}

/**
 * Writes `data` at `offset` bytes into `buffer`, padding the tail to a multiple of 4 bytes; counted
 * in `ctx.counter` (one write of the padded length).
 */
export function writeBuffer(ctx: GpuContext, buffer: GPUBuffer, data: ArrayBufferView, offset = 0): void {
  const bytes = asBytes(data);
  if (bytes.byteLength % 4 === 0) {
    ctx.counter.write(buffer, offset, bytes);
  } else {
    const padded = new Uint8Array(alignUp(bytes.byteLength, 4));
    padded.set(bytes);
    ctx.counter.write(buffer, offset, padded);
  }
}

/**
 * Maps `size` bytes of a MAP_READ buffer from `offset` for reading (one CPU round trip, counted in
 * `ctx.counter`); rejects with the loss error if the device is lost meanwhile.
 */
export async function mapForRead(
  ctx: GpuContext,
  staging: GPUBuffer,
  offset: number,
  size: number,
): Promise<void> {
  await Promise.race([ctx.counter.mapRead(staging, offset, size), ctx.lost.then((e) => Promise.reject(e))]);
}

/** Copies `byteLength` bytes from `buffer` (from `offset`) back to the CPU. */
export async function readBuffer(
  ctx: GpuContext,
  buffer: GPUBuffer,
  byteLength = buffer.size,
  offset = 0,
): Promise<ArrayBuffer> {
  ctx.assertAlive();
  const size = alignUp(byteLength, 4);
  const staging = ctx.device.createBuffer({ label: 'readback', size, usage: 0x1 | 0x8 }); // MAP_READ | COPY_DST
  const enc = ctx.device.createCommandEncoder({ label: 'readback' });
  enc.copyBufferToBuffer(buffer, offset, staging, 0, size);
  ctx.counter.submit([enc.finish()]);
  try {
    await mapForRead(ctx, staging, 0, size);
    return staging.getMappedRange().slice(0, byteLength);
  } finally {
    staging.destroy();
  }
}

/** Reads a buffer as f32 values. */
export async function readF32(
  ctx: GpuContext,
  buffer: GPUBuffer,
  count: number,
  offset = 0,
): Promise<Float32Array> {
  return new Float32Array(await readBuffer(ctx, buffer, count * 4, offset));
}

/** Reads a buffer as u32 values. */
export async function readU32(
  ctx: GpuContext,
  buffer: GPUBuffer,
  count: number,
  offset = 0,
): Promise<Uint32Array> {
  return new Uint32Array(await readBuffer(ctx, buffer, count * 4, offset));
}

/** A byte view of `data` over an ArrayBuffer, copying only when the source is a SharedArrayBuffer. */
function asBytes(data: ArrayBufferView): Uint8Array<ArrayBuffer> {
  const src = data.buffer;
  if (src instanceof ArrayBuffer) return new Uint8Array(src, data.byteOffset, data.byteLength);
  const copy = new Uint8Array(data.byteLength);
  copy.set(new Uint8Array(src, data.byteOffset, data.byteLength));
  return copy;
}
