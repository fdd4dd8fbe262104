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

/**
 * A uniform buffer owned by one kernel instance, written before each use and only when its values
 * change: it keeps the bytes it last wrote, so a decode step that encodes the same shapes as the
 * one before writes nothing. Writes go through the queue, so they land before the next submitted
 * command buffer: encode an instance at most once per submission with given values (or use one
 * instance per call site).
 */
export class UniformSlot<K extends string> {
  readonly buffer: GPUBuffer;
  /** The bytes last written (empty before the first write). */
  private last = new Uint8Array(0);

  constructor(
    private readonly ctx: GpuContext,
    private readonly layout: UniformLayout<K>,
    label: string,
  ) {
    this.buffer = createBuffer(ctx, layout.byteLength, label, UNIFORM);
  }

  /** Packs `values` and writes them, unless the buffer already holds exactly these bytes. */
  write(values: Record<K, number>): void {
    const bytes = new Uint8Array(this.layout.pack(values));
    if (sameBytes(bytes, this.last)) return;
    writeBuffer(this.ctx, this.buffer, bytes);
    this.last = bytes;
  }

  destroy(): void {
    this.buffer.destroy();
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
