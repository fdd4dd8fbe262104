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

/** Distinct value sets a {@link UniformSlot} keeps written at once. */
export const UNIFORM_POOL = 8;

/**
 * The uniform buffers of one kernel instance, each written only when its values change: a slot
 * keeps up to {@link UNIFORM_POOL} buffers with the bytes each last took, and `write` selects the
 * one that already holds the values (no write) or rewrites the least recently selected one. So a
 * decode step that encodes the same shapes as the one before writes nothing, and one submission
 * may encode the instance with up to {@link UNIFORM_POOL} distinct value sets (a speculative step
 * runs a draft model over 1..64 rows, then over a tree, then the target): queue writes land before
 * the command buffer runs, so one buffer rewritten twice before a submit would serve only its last
 * values. `buffer` is the one the last `write` selected: bind it right after writing.
 */
export class UniformSlot<K extends string> {
  private readonly pool: { buffer: GPUBuffer; bytes: Uint8Array; used: number }[] = [];
  private clock = 0;
  private current: GPUBuffer | undefined;

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: UniformLayout<K>,
    private readonly label: string,
  ) {}

  /** The buffer the last {@link UniformSlot.write} selected. */
  get buffer(): GPUBuffer {
    if (!this.current) throw new Error(`uniform ${this.label}: read before its first write`);
    return this.current;
  }

  /** Packs `values` and selects a buffer holding them, writing one only if none does. */
  write(values: Record<K, number>): void {
    const bytes = new Uint8Array(this.layout.pack(values));
    let entry = this.pool.find((e) => sameBytes(e.bytes, bytes));
    if (!entry) {
      if (this.pool.length < UNIFORM_POOL) {
        entry = {
          buffer: createBuffer(this.ctx, this.layout.byteLength, this.label, UNIFORM),
          bytes,
          used: 0,
        };
        this.pool.push(entry);
      } else {
        entry = this.pool.reduce((a, b) => (b.used < a.used ? b : a));
        entry.bytes = bytes;
      }
      writeBuffer(this.ctx, entry.buffer, bytes);
    }
    entry.used = ++this.clock;
    this.current = entry.buffer;
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
