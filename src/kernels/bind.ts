import { createBuffer, UNIFORM, writeBuffer } from '../gpu/buffers.js';
import type { GpuContext } from '../gpu/device.js';
import type { UniformLayout } from '../gpu/uniforms.js';

/**
 * Bind groups keyed by pipeline and the exact buffers bound (binding i = buffers[i]), created once
 * and reused: steady-state decode binds the same buffers every token, so it creates none.
 * `created` counts creations for tests.
 */
export class BindGroupCache {
  private readonly groups = new WeakMap<GPUComputePipeline, Map<string, GPUBindGroup>>();
  private readonly ids = new WeakMap<GPUBuffer, number>();
  private nextId = 1;
  created = 0;

  constructor(private readonly device: GPUDevice) {}

  /** The bind group of `pipeline` (group 0) with `buffers[i]` at binding i. */
  get(pipeline: GPUComputePipeline, buffers: readonly GPUBuffer[]): GPUBindGroup {
    let byKey = this.groups.get(pipeline);
    if (!byKey) {
      byKey = new Map();
      this.groups.set(pipeline, byKey);
    }
    const key = buffers.map((b) => this.id(b)).join(',');
    let group = byKey.get(key);
    if (!group) {
      group = this.device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
      });
      byKey.set(key, group);
      this.created++;
    }
    return group;
  }

  private id(b: GPUBuffer): number {
    let id = this.ids.get(b);
    if (id === undefined) {
      id = this.nextId++;
      this.ids.set(b, id);
    }
    return id;
  }
}

/** Most buffers a {@link UniformSlot} keeps: distinct value sets one batch may bind. */
export const UNIFORM_POOL = 8;

/**
 * The uniform buffer of one kernel instance, written before each use and only when its values
 * change: it keeps the bytes it last wrote, so a decode step that encodes the same shapes as the
 * one before writes nothing. Queue writes land before the next submitted command buffer, so one
 * buffer rewritten twice before a submit would serve only its last values. A submission normally
 * encodes an instance with one value set, and the slot rewrites its one buffer in place. Inside a
 * batch (`GpuCounter.batch`: one submission encoding the instance with several value sets, as a
 * speculative step does), it never rewrites a buffer the batch already bound: it selects one of up
 * to {@link UNIFORM_POOL} buffers that holds the values, or one the batch has not bound, written.
 * `buffer` is the one the last `write` selected: bind it right after writing.
 */
export class UniformSlot<K extends string> {
  private readonly pool: { buffer: GPUBuffer; bytes: Uint8Array; batch: number | undefined }[] = [];
  private current: (typeof this.pool)[number] | undefined;

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: UniformLayout<K>,
    private readonly label: string,
  ) {}

  /** The buffer the last {@link UniformSlot.write} selected. */
  get buffer(): GPUBuffer {
    if (!this.current) throw new Error(`uniform ${this.label}: read before its first write`);
    return this.current.buffer;
  }

  /** Packs `values` and selects a buffer holding them, writing one only if none does. */
  write(values: Record<K, number>): void {
    const bytes = new Uint8Array(this.layout.pack(values));
    const batch = this.ctx.counter.batch;
    let entry: (typeof this.pool)[number] | undefined;
    if (this.current && sameBytes(this.current.bytes, bytes)) entry = this.current;
    else if (batch === undefined) entry = this.current;
    else entry = this.pool.find((e) => sameBytes(e.bytes, bytes)) ?? this.pool.find((e) => e.batch !== batch);
    if (!entry) {
      if (this.pool.length >= UNIFORM_POOL)
        throw new Error(`uniform ${this.label}: more than ${UNIFORM_POOL} value sets in one batch`);
      entry = { buffer: createBuffer(this.ctx, this.layout.byteLength, this.label, UNIFORM), bytes, batch };
      this.pool.push(entry);
      writeBuffer(this.ctx, entry.buffer, bytes);
    } else if (!sameBytes(entry.bytes, bytes)) {
      entry.bytes = bytes;
      writeBuffer(this.ctx, entry.buffer, bytes);
    }
    entry.batch = batch;
    this.current = entry;
  }

  destroy(): void {
    for (const e of this.pool) e.buffer.destroy();
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
