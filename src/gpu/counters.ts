/**
 * Totals of the work weft asks of a device: compute dispatches, queue writes and the bytes they
 * carry, readbacks (buffers mapped for reading) and their bytes, and queue submissions. At batch 1
 * on a real GPU a decode step costs the bytes it moves plus a fixed price per dispatch, per write
 * and per round trip to the CPU, so these are the figures that fusion and a GPU-resident loop must
 * lower (ALGORITHMS.md §7).
 */
export interface GpuCounts {
  dispatches: number;
  writes: number;
  writeBytes: number;
  readbacks: number;
  readbackBytes: number;
  submits: number;
}

/** Counts of nothing. */
export function zeroCounts(): GpuCounts {
  return { dispatches: 0, writes: 0, writeBytes: 0, readbacks: 0, readbackBytes: 0, submits: 0 };
}

/** `after - before`, field by field: the work between two snapshots. */
export function countsSince(after: Readonly<GpuCounts>, before: Readonly<GpuCounts>): GpuCounts {
  return {
    dispatches: after.dispatches - before.dispatches,
    writes: after.writes - before.writes,
    writeBytes: after.writeBytes - before.writeBytes,
    readbacks: after.readbacks - before.readbacks,
    readbackBytes: after.readbackBytes - before.readbackBytes,
    submits: after.submits - before.submits,
  };
}

/** `a + b`, field by field. */
export function addCounts(a: Readonly<GpuCounts>, b: Readonly<GpuCounts>): GpuCounts {
  return {
    dispatches: a.dispatches + b.dispatches,
    writes: a.writes + b.writes,
    writeBytes: a.writeBytes + b.writeBytes,
    readbacks: a.readbacks + b.readbacks,
    readbackBytes: a.readbackBytes + b.readbackBytes,
    submits: a.submits + b.submits,
  };
}

/**
 * The one way weft's code dispatches, writes, submits and maps for reading: each method counts,
 * then makes the WebGPU call. One per device (`GpuContext.counter`), shared by every runner on it;
 * the totals are plain numbers, always on. Callers take deltas of {@link GpuCounter.snapshot}.
 */
export class GpuCounter implements Readonly<GpuCounts> {
  dispatches = 0;
  writes = 0;
  writeBytes = 0;
  readbacks = 0;
  readbackBytes = 0;
  submits = 0;
  /**
   * The open batch, while a caller encodes one submission in which a kernel instance may run with
   * several value sets (a speculative step: the draft over 1..5 rows, then over its tree, then the
   * target): uniform slots then never rewrite a buffer this batch already bound (see UniformSlot).
   * Undefined otherwise.
   */
  batch: number | undefined;
  private batches = 0;

  constructor(private readonly queue: GPUQueue) {}

  /** Opens a batch (see {@link GpuCounter.batch}); close it with {@link GpuCounter.endBatch} after the submit. */
  beginBatch(): void {
    this.batch = ++this.batches;
  }

  endBatch(): void {
    this.batch = undefined;
  }

  /** A copy of the totals so far. */
  snapshot(): GpuCounts {
    const { dispatches, writes, writeBytes, readbacks, readbackBytes, submits } = this;
    return { dispatches, writes, writeBytes, readbacks, readbackBytes, submits };
  }

  /** `pass.dispatchWorkgroups(x, y, z)`. */
  dispatch(pass: GPUComputePassEncoder, x: number, y = 1, z = 1): void {
    this.dispatches++;
    pass.dispatchWorkgroups(x, y, z);
  }

  /** `queue.writeBuffer(buffer, offset, data)`: `data`'s whole byte length. */
  write(buffer: GPUBuffer, offset: number, data: ArrayBufferView<ArrayBuffer>): void {
    this.writes++;
    this.writeBytes += data.byteLength;
    this.queue.writeBuffer(buffer, offset, data);
  }

  /** `queue.submit(commandBuffers)`. */
  submit(commandBuffers: readonly GPUCommandBuffer[]): void {
    this.submits++;
    this.queue.submit(commandBuffers);
  }

  /** `buffer.mapAsync(READ, offset, size)`: one CPU round trip of `size` bytes. */
  mapRead(buffer: GPUBuffer, offset: number, size: number): Promise<void> {
    this.readbacks++;
    this.readbackBytes += size;
    return buffer.mapAsync(0x1, offset, size); // GPUMapMode.READ
  }
}
