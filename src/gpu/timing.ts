import type { GpuContext } from './device.js';

/**
 * Measures GPU time of compute passes with timestamp queries. Passes opened through
 * {@link GpuTimer.passDescriptor} record begin/end timestamps; {@link GpuTimer.read} resolves the
 * elapsed nanoseconds of each labelled pass. When the device has no timestamp-query feature the
 * descriptor carries no timestamps and `read` returns an empty list: callers fall back to wall time.
 */
export class GpuTimer {
  readonly enabled: boolean;
  private readonly querySet: GPUQuerySet | undefined;
  private readonly resolveBuf: GPUBuffer | undefined;
  private readonly labels: string[] = [];

  constructor(
    private readonly ctx: GpuContext,
    /** Largest number of passes timed between two `read()` calls. */
    readonly capacity = 64,
  ) {
    this.enabled = ctx.features.timestamps;
    if (this.enabled) {
      this.querySet = ctx.device.createQuerySet({
        label: 'weft-timer',
        type: 'timestamp',
        count: capacity * 2,
      });
      this.resolveBuf = ctx.device.createBuffer({
        label: 'weft-timer-resolve',
        size: capacity * 16,
        usage: 0x200 | 0x4, // QUERY_RESOLVE | COPY_SRC
      });
    }
  }

  /** A compute-pass descriptor that records timestamps under `label` (if timing is available). */
  passDescriptor(label: string): GPUComputePassDescriptor {
    if (!this.querySet || this.labels.length >= this.capacity) return { label };
    const i = this.labels.push(label) - 1;
    return {
      label,
      timestampWrites: {
        querySet: this.querySet,
        beginningOfPassWriteIndex: 2 * i,
        endOfPassWriteIndex: 2 * i + 1,
      },
    };
  }

  /** Resolves the queries recorded since the last read; returns nanoseconds per labelled pass. */
  async read(): Promise<{ label: string; ns: number }[]> {
    if (!this.querySet || !this.resolveBuf || this.labels.length === 0) return [];
    const n = this.labels.length;
    const { device } = this.ctx;
    const staging = device.createBuffer({ label: 'weft-timer-read', size: n * 16, usage: 0x1 | 0x8 });
    const enc = device.createCommandEncoder({ label: 'weft-timer' });
    enc.resolveQuerySet(this.querySet, 0, 2 * n, this.resolveBuf, 0);
    enc.copyBufferToBuffer(this.resolveBuf, 0, staging, 0, n * 16);
    this.ctx.counter.submit([enc.finish()]);
    await this.ctx.counter.mapRead(staging, 0, n * 16);
    const t = new BigUint64Array(staging.getMappedRange().slice(0));
    staging.destroy();
    const labels = this.labels.splice(0);
    return labels.map((label, i) => ({ label, ns: Number(t[2 * i + 1]! - t[2 * i]!) }));
  }

  destroy(): void {
    this.querySet?.destroy();
    this.resolveBuf?.destroy();
  }
}
