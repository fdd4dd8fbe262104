// What a runner reports of its mixture layers: the routing table's tallies (experts read, rows
// routed, routings; one small readback) and a paged mixture's cache counts (on the host).
import type { GpuContext } from '../../gpu/device.js';
import type { BoundBlock } from '../blocks/gpu.js';
import type { ExpertCacheCounts, ExpertTally } from '../runner.js';
import { readBack } from './pass.js';

/** The tallies of the routing table the mixture blocks share, or undefined without one. */
export class TallyReader {
  private staging: GPUBuffer | undefined;

  constructor(
    private readonly ctx: GpuContext,
    private readonly blocks: readonly BoundBlock[],
  ) {}

  /** Words 1 to 3 of the table (kernels/moe/table.ts), in one 12-byte readback. */
  async read(): Promise<ExpertTally | undefined> {
    const table = this.blocks.find((b) => b.routing)?.routing;
    if (!table) return undefined;
    this.staging ??= this.ctx.device.createBuffer({
      size: 16,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
      label: 'expert-tally-staging',
    });
    const [experts, rows, routings] = new Uint32Array(
      await readBack(this.ctx, table, 4, this.staging, 12, 'expert-tally'),
    );
    return { experts: experts!, rows: rows!, routings: routings! };
  }

  destroy(): void {
    this.staging?.destroy();
  }
}

/** The paged mixture blocks' cache counts, summed; undefined when no block pages. */
export function expertCacheCounts(blocks: readonly BoundBlock[]): ExpertCacheCounts | undefined {
  const caches = blocks.flatMap((b) => (b.paging ? [b.paging()] : []));
  if (caches.length === 0) return undefined;
  return {
    hits: caches.reduce((n, c) => n + c.hits, 0),
    misses: caches.reduce((n, c) => n + c.misses, 0),
    bytesLoaded: caches.reduce((n, c) => n + c.bytesLoaded, 0),
  };
}
