// Online Hadamard rotation on the GPU: y [M, n] = R · x per row, R = H_n · D / √n.
import { InvalidInputError } from '../../errors.js';
import { shaders } from '../../gen/shaders.js';
import { createBuffer, uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { defineUniforms, type LayoutKeys } from '../../gpu/uniforms.js';
import { wgslVariant } from '../../gpu/wgsl.js';
import { hadamardPlan, hadamardSigns } from '../../quant/hadamard.js';
import { type BindGroupCache, UniformSlot } from '../bind.js';
import { grid } from '../dispatch.js';

const Params = defineUniforms('Params', { M: 'u32', n: 'u32', Kb: 'u32', scale: 'f32' });
/** Threads per workgroup of the mix kernel (one output element each). */
const MIX_WG = 256;

/**
 * Largest butterfly block (elements held in workgroup memory) on this device: a power of two, at
 * most 4096. Pass it to `hadamardRef` to reproduce the kernel's operation order exactly.
 */
export function hadamardMaxBlock(ctx: GpuContext): number {
  let b = 4096;
  while (b * 4 > ctx.limits.maxComputeWorkgroupStorageSize) b /= 2;
  return b;
}

/**
 * The rotation x ↦ H_n · D · x / √n of rows of length n = K · 2^m (see `hadamardFactor`), with
 * the signs D from `seed`, prepared for one n and up to `maxM` rows. One dispatch (butterflies in
 * workgroup memory) when a row is a single block, else two (butterflies per block, then the
 * Kb×Kb ±1 mix) through a scratch buffer the instance owns. Out of place: x and y must differ.
 */
export class Hadamard {
  readonly maxM: number;
  readonly plan: ReturnType<typeof hadamardPlan>;
  private readonly butterfly: GPUComputePipeline;
  private readonly mix: GPUComputePipeline | undefined;
  private readonly signs: GPUBuffer;
  private readonly hb: GPUBuffer | undefined;
  private readonly tmp: GPUBuffer | undefined;
  private readonly p1: UniformSlot<LayoutKeys<typeof Params>>;
  private readonly p2: UniformSlot<LayoutKeys<typeof Params>>;

  constructor(
    private readonly ctx: GpuContext,
    private readonly binds: BindGroupCache,
    readonly n: number,
    readonly seed: number,
    opts: { maxM?: number } = {},
  ) {
    this.maxM = opts.maxM ?? 16;
    if (!Number.isInteger(this.maxM) || this.maxM < 1)
      throw new InvalidInputError(`Hadamard: maxM = ${this.maxM} must be a positive integer`);
    this.plan = hadamardPlan(n, hadamardMaxBlock(ctx));
    const { P, Kb } = this.plan;
    const WG = Math.max(1, Math.min(256, P / 2));
    this.butterfly = ctx.pipelines.get(
      'hadamard_butterfly',
      ...wgslVariant(shaders.hadamard_butterfly, Params, { P, WG }),
    );
    this.signs = uploadBuffer(ctx, hadamardSigns(n, seed), `hadamard-${n}-signs`);
    if (Kb > 1) {
      this.mix = ctx.pipelines.get(
        'hadamard_mix',
        ...wgslVariant(shaders.hadamard_mix, Params, { WG: MIX_WG }),
      );
      this.hb = uploadBuffer(ctx, Float32Array.from(this.plan.hb), `hadamard-${n}-hb`);
      this.tmp = createBuffer(ctx, this.maxM * n * 4, `hadamard-${n}-tmp`);
    }
    this.p1 = new UniformSlot(ctx, Params, 'hadamard-butterfly-params');
    this.p2 = new UniformSlot(ctx, Params, 'hadamard-mix-params');
  }

  /** Records y[0..M) = R · x[0..M) (rows of n f32). */
  encode(pass: GPUComputePassEncoder, x: GPUBuffer, y: GPUBuffer, M: number): void {
    const { n } = this;
    const { Kb, scale } = this.plan;
    if (!Number.isInteger(M) || M < 1 || M > this.maxM)
      throw new InvalidInputError(`Hadamard.encode: M = ${M} must be an integer in [1, ${this.maxM}]`);
    if (x === y) throw new InvalidInputError('Hadamard.encode: x and y must be different buffers');
    if (x.size < M * n * 4 || y.size < M * n * 4)
      throw new InvalidInputError(
        `Hadamard.encode: x has ${x.size} bytes and y ${y.size}, both need ${M * n * 4} for [${M}, ${n}]`,
      );
    const maxWg = this.ctx.limits.maxComputeWorkgroupsPerDimension;
    const single = Kb === 1 || !this.mix || !this.hb || !this.tmp;
    this.p1.write({ M, n, Kb, scale: single ? scale : 1 });
    pass.setPipeline(this.butterfly);
    const dst = single ? y : this.tmp!;
    pass.setBindGroup(0, this.binds.get(this.butterfly, [this.p1.buffer, x, this.signs, dst]));
    this.ctx.counter.dispatch(pass, ...grid(M * Kb, maxWg));
    if (single) return;
    this.p2.write({ M, n, Kb, scale });
    pass.setPipeline(this.mix!);
    pass.setBindGroup(0, this.binds.get(this.mix!, [this.p2.buffer, this.tmp!, this.hb!, y]));
    this.ctx.counter.dispatch(pass, ...grid(Math.ceil((M * n) / MIX_WG), maxWg));
  }

  destroy(): void {
    this.signs.destroy();
    this.hb?.destroy();
    this.tmp?.destroy();
    this.p1.destroy();
    this.p2.destroy();
  }
}
