// The mixture block on the GPU: its router, selection bias and norms as f32, its experts as two
// stacks (gate | up per expert, gated; down), its shared expert as dense linears; and the kernels
// every mixture block of a model shares (route, combine, the activation of an ungated stack) with
// the scratch of one pass. A pass runs: route (norm, router, top-k and the routing table in one
// dispatch), the gated gate | up of every chosen expert, their down, and the weighted sum into the
// residual stream: four dispatches per part of each stack, no host round trip (plus the shared
// expert's linears where there is one). Gemma 4's mixture (sandwich norms, a dense MLP beside it)
// combines into a row of its own instead, runs the dense MLP, and norms and adds the two: five more
// (the dense gate | up and down, the dense output's norm, the mixture's norm-add into it, and the
// sum's norm-add into the stream); its router reads its own scaled norm and scales each expert's
// weight, within the route kernel.
import { InvalidInputError } from '../../../errors.js';
import { createBuffer, mapForRead, writeBuffer } from '../../../gpu/buffers.js';
import { type GateActivation, SiluMul } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { MoeCombine } from '../../../kernels/moe/combine.js';
import { ExpertMatmul, type GpuExperts } from '../../../kernels/moe/experts.js';
import { MoeRoute } from '../../../kernels/moe/route.js';
import { type RouteShape, routeTableLayout, routeWeightWords } from '../../../kernels/moe/table.js';
import { packedWidth, rotationFor } from '../../../quant/pack.js';
import { normedInput, rotatedInput } from '../encode.js';
import {
  type BoundBlock,
  type ExpertStore,
  type GpuBlock,
  type GpuPass,
  type KindContext,
  type Linear,
  MAX_FORWARD_TOKENS,
  PerModel,
  type Placer,
} from '../gpu.js';
import { type MoeBlock, moeOf } from './block.js';
import { ExpertCache, routeGroups, waveTable } from './cache.js';

/** The block's weights on the GPU. */
interface MoeGpuWeights {
  readonly norm: GPUBuffer; // [H] as it multiplies
  readonly router: GPUBuffer; // [E, H] f32
  readonly bias: GPUBuffer | undefined; // [E] the selection bias
  /** [H] the router norm's learned scale (`scaledRouterNorm`), then [E] the experts' (`perExpertScale`). */
  readonly scales: GPUBuffer | undefined;
  readonly outNorm: GPUBuffer | undefined; // [H] the norm of the block's output (sandwich norms)
  /** Gemma 4's dense MLP beside the experts (`besideDense`), and the norms of the two outputs. */
  readonly dense:
    | {
        readonly I: number; // its width (the model's `intermediate`)
        readonly norm: GPUBuffer; // [H] its input norm
        readonly gateUp: GpuMatrix | readonly [GpuMatrix, GpuMatrix]; // [Ip, H] gated, or the two
        readonly down: GpuMatrix; // [H, Ip]
        readonly outNorm: GPUBuffer; // [H] the norm of its output
        readonly expertsOutNorm: GPUBuffer; // [H] the norm of the mixture's output
      }
    | undefined;
  /** Each expert's gate | up as one gated stack, or (formats apart) the gate stack and the up stack. */
  readonly gateUp: GpuExperts | readonly [GpuExperts, GpuExperts];
  readonly down: GpuExperts;
  /** Paged: every expert in CPU memory, the stacks above being the GPU cache's slots. */
  readonly store: ExpertStore | undefined;
  readonly shared:
    | {
        readonly gateUp: GpuMatrix | readonly [GpuMatrix, GpuMatrix]; // [Is, H] gated, or the two
        readonly down: GpuMatrix; // [H, Is]
        readonly router: GPUBuffer; // [H] the shared expert's gate
      }
    | undefined;
}

/** What every mixture block of a model shares: its kernels and the scratch of one pass. */
interface MoeKernels {
  readonly shape: RouteShape;
  readonly route: MoeRoute;
  readonly combine: MoeCombine;
  readonly act: GateActivation;
  readonly silu: SiluMul; // act(gate) · up of an ungated expert stack, over T · k rows
  readonly sharedSilu: SiluMul | undefined; // of an ungated shared expert, over T rows
  readonly denseSilu: SiluMul | undefined; // of an ungated dense MLP beside the experts, over T rows
  readonly table: GPUBuffer; // the routing table (kernels/moe/table.ts)
  readonly weights: GPUBuffer; // [T · k] routing weights, then [T] the shared expert's
  // The next three also hold the dense MLP's [T, Ip] gate, up and product, after the combine.
  readonly gate: GPUBuffer; // [T · k, I] an ungated stack's gate rows
  readonly up: GPUBuffer; // [T · k, I]
  readonly hidden: GPUBuffer; // [T · k, I] act(gate) · up of each choice, in sorted order
  readonly out: GPUBuffer; // [T · k, H] each choice's expert output, in sorted order
  readonly mixture: GPUBuffer | undefined; // [T, H] the combine's output, where it is normed
  readonly sharedRows: readonly GPUBuffer[]; // [T, Is] the shared expert's gate, up and product
  readonly sharedOut: GPUBuffer | undefined; // [T, H]
}

const modelKernels = new PerModel(async (c: KindContext): Promise<MoeKernels> => {
  const { ctx, binds, spec } = c;
  const m = moeOf(spec);
  const H = spec.hidden;
  const I = m.intermediate;
  const Is = m.sharedIntermediate;
  const T = MAX_FORWARD_TOKENS;
  const shape: RouteShape = { experts: m.experts, topK: m.topK, maxRows: T };
  const act: GateActivation = spec.activation === 'gelu_tanh' ? 'gelu' : 'silu';
  const routeOptions = {
    ...m,
    hidden: H,
    maxRows: T,
    eps: spec.rmsEps,
    bias: m.selectionBias,
    shared: Is !== undefined,
    routerNorm: m.scaledRouterNorm === true,
    expertScale: m.perExpertScale === true,
  };
  // The mixture's output is normed before it joins the stream (Gemma's sandwich norms).
  const store = m.besideDense === true || spec.sandwichNorms === true;
  const combineOptions = {
    hidden: H,
    topK: m.topK,
    experts: m.experts,
    maxRows: T,
    shared: Is !== undefined,
    store,
  };
  await Promise.all([
    MoeRoute.prepare(ctx, routeOptions),
    MoeCombine.prepare(ctx, Is !== undefined, store),
    SiluMul.prepare(ctx, false, act),
  ]);
  const Ip = m.besideDense ? densePacked(c) : undefined;
  const buffers: GPUBuffer[] = [];
  const buffer = (bytes: number, label: string) => {
    const b = createBuffer(ctx, bytes, label);
    buffers.push(b);
    return b;
  };
  const choices = T * m.topK;
  const rows = Math.max(choices * I, T * (Ip ?? 0));
  const k: MoeKernels = {
    shape,
    route: new MoeRoute(ctx, binds, routeOptions),
    combine: new MoeCombine(ctx, binds, combineOptions),
    act,
    silu: new SiluMul(ctx, binds, I, false, act),
    sharedSilu: Is === undefined ? undefined : new SiluMul(ctx, binds, Is, false, act),
    denseSilu: Ip === undefined ? undefined : new SiluMul(ctx, binds, Ip, false, act),
    table: buffer(4 * routeTableLayout(shape).words, 'moe-table'),
    weights: buffer(4 * routeWeightWords(shape, Is !== undefined), 'moe-weights'),
    gate: buffer(4 * rows, 'moe-gate'),
    up: buffer(4 * rows, 'moe-up'),
    hidden: buffer(4 * rows, 'moe-hidden'),
    out: buffer(4 * choices * H, 'moe-out'),
    mixture: store ? buffer(4 * T * H, 'moe-mixture') : undefined,
    sharedRows:
      Is === undefined ? [] : ['gate', 'up', 'act'].map((n) => buffer(4 * T * Is, `moe-shared-${n}`)),
    sharedOut: Is === undefined ? undefined : buffer(4 * T * H, 'moe-shared-out'),
  };
  c.onDestroy(() => {
    k.route.destroy();
    k.combine.destroy();
    for (const b of buffers) b.destroy();
  });
  return k;
});

/** The dense MLP's width beside the experts as packed (padded for a rotation, as an MLP block's). */
function densePacked(c: KindContext): number {
  const I = c.spec.intermediate;
  return packedWidth(I, rotationFor(c.rotate, I));
}

/** Places the block's tensors. */
export async function placeMoe(placer: Placer, block: MoeBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const m = moeOf(spec);
  const n = block.names;
  const H = spec.hidden;
  const I = m.intermediate;
  const Is = m.sharedIntermediate;
  // A dense MLP beside the experts is summed with them through norms: the GPU side takes the
  // sandwich norms' norm-add kernel for it (the scales, bias and shared expert the route kernel
  // binds as the device allows: Gemma 4's 8 storage buffers, see MoeRoute).
  if (m.besideDense && !spec.sandwichNorms)
    throw new InvalidInputError(
      `${n.router}: a mixture beside a dense MLP without sandwich norms (${spec.family}) does not run on the GPU; use the CPU reference (device: 'cpu')`,
    );
  const label = `${n.router.replace(/[^.]+\.weight$/, '')}experts`;
  // Gate and up as one gated stack, unless the file stores them in two formats.
  const together = placer.formatOf(n.gate[0]!, I, H) === placer.formatOf(n.up[0]!, I, H);
  const placed = await placer.experts([
    ...(together
      ? [{ label: `${label}.gate_up`, names: n.gate.map((g, e) => [g, n.up[e]!]), rows: I, cols: H }]
      : [
          { label: `${label}.gate`, names: n.gate.map((g) => [g]), rows: I, cols: H },
          { label: `${label}.up`, names: n.up.map((u) => [u]), rows: I, cols: H },
        ]),
    { label: `${label}.down`, names: n.down.map((d) => [d]), rows: H, cols: I },
  ]);
  const [first, second, third] = placed.stacks as [GpuExperts, GpuExperts, GpuExperts?];
  const gateUp = together ? first : ([first, second] as const);
  const down = together ? second : third!;
  const w: MoeGpuWeights = {
    norm: await placer.norm(n.norm, H),
    router: await placer.tensor(n.router, [m.experts, H]),
    bias: m.selectionBias ? await placer.vector(n.bias, m.experts) : undefined,
    scales:
      m.scaledRouterNorm || m.perExpertScale
        ? await placer.row(
            n.router.replace(/[^.]+\.weight$/, 'scales'),
            [...(m.scaledRouterNorm ? [n.routerScale] : []), ...(m.perExpertScale ? [n.expertScale] : [])],
            (m.scaledRouterNorm ? H : 0) + (m.perExpertScale ? m.experts : 0),
          )
        : undefined,
    outNorm: spec.sandwichNorms ? await placer.norm(n.outNorm, H) : undefined,
    dense: m.besideDense ? await placeDense(placer, block) : undefined,
    gateUp,
    down,
    store: placed.store,
    shared:
      Is === undefined
        ? undefined
        : {
            gateUp: await placer.paired(
              n.sharedGate.replace(/[^.]+\.weight$/, 'gate_up_proj.weight'),
              [n.sharedGate, Is, H],
              [n.sharedUp, Is, H],
            ),
            down: await placer.matrix(n.sharedDown, H, Is),
            router: await placer.tensor(n.sharedRouter, [1, H]),
          },
  };
  const stacks = [...('parts' in w.gateUp ? [w.gateUp] : w.gateUp), w.down];
  const sharedMatrices = w.shared
    ? [...('parts' in w.shared.gateUp ? [w.shared.gateUp] : w.shared.gateUp), w.shared.down]
    : [];
  const d = w.dense;
  const denseMatrices = d ? [...('parts' in d.gateUp ? [d.gateUp] : d.gateUp), d.down] : [];
  return {
    matrices: [...sharedMatrices, ...denseMatrices],
    vectors: [
      w.norm,
      w.router,
      w.bias,
      w.shared?.router,
      w.scales,
      w.outNorm,
      d?.norm,
      d?.outNorm,
      d?.expertsOutNorm,
    ].filter((b) => b !== undefined),
    experts: stacks,
    expertBytesPerToken: m.topK * stacks.reduce((sum, s) => sum + s.expertBytes, 0),
    bind: (c) => bindMoe(c, w),
  };
}

/** The dense MLP beside the experts: its norms, gate | up (gated where they pair) and down. */
async function placeDense(placer: Placer, block: MoeBlock): Promise<NonNullable<MoeGpuWeights['dense']>> {
  const H = placer.spec.hidden;
  const I = placer.spec.intermediate;
  const n = block.names;
  return {
    I,
    norm: await placer.norm(n.denseNorm, H),
    gateUp: await placer.paired(
      n.denseGate.replace(/[^.]+\.weight$/, 'gate_up_proj.weight'),
      [n.denseGate, I, H],
      [n.denseUp, I, H],
    ),
    down: await placer.matrix(n.denseDown, H, I),
    outNorm: await placer.norm(n.denseOutNorm, H),
    expertsOutNorm: await placer.norm(n.expertsOutNorm, H),
  };
}

/** The block's expert matmuls and shared linears (over the GPU cache's slots where paged). */
async function bindMoe(c: KindContext, w: MoeGpuWeights): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const { ctx, binds } = c;
  const store = w.store;
  // Paged: the expert matmuls index the cache's slots, through a table laid out for them.
  const shape: RouteShape = store ? { ...k.shape, experts: store.slots } : k.shape;
  const expert = async (s: GpuExperts, epilogue: 'store' | GateActivation) => {
    await ExpertMatmul.prepare(ctx, s.format, s.rows, s.cols, shape, epilogue);
    return new ExpertMatmul(ctx, binds, s, shape, { epilogue });
  };
  const experts: Experts = {
    gateUp:
      'parts' in w.gateUp
        ? await expert(w.gateUp, k.act)
        : ([await expert(w.gateUp[0], 'store'), await expert(w.gateUp[1], 'store')] as const),
    down: await expert(w.down, 'store'),
  };
  const kb = c.builder;
  const shared = w.shared && {
    gateUp:
      'parts' in w.shared.gateUp
        ? kb.linear(w.shared.gateUp, { epilogue: k.act })
        : ([kb.linear(w.shared.gateUp[0]), kb.linear(w.shared.gateUp[1])] as const),
    down: kb.linear(w.shared.down),
  };
  const d = w.dense;
  const dense: Dense | undefined = d && {
    gateUp:
      'parts' in d.gateUp
        ? kb.linear(d.gateUp, { ...kb.norm(d.norm), epilogue: k.act })
        : ([kb.linear(d.gateUp[0]), kb.linear(d.gateUp[1])] as const),
    down: kb.linear(d.down),
  };
  const owned: { destroy(): void }[] = [
    ...('encode' in experts.gateUp ? [experts.gateUp] : experts.gateUp),
    experts.down,
    ...(shared ? [...('encode' in shared.gateUp ? [shared.gateUp] : shared.gateUp), shared.down] : []),
    ...(dense ? [...('encode' in dense.gateUp ? [dense.gateUp] : dense.gateUp), dense.down] : []),
  ];
  const paging = store && pagingOf(c, k, store, shape);
  if (paging) owned.push(paging);
  return {
    encode: (p) => {
      if (paging) throw new Error('moe: a paged mixture runs in host-driven forwards only');
      encodeRoute(p, w, k);
      encodeExperts(p, k, experts, k.table);
      encodeCombine(p, k, shared);
      encodeOutput(p, w, k, dense);
    },
    ...(paging
      ? {
          host: async (p: GpuPass, flush: () => Promise<void>) => {
            encodeRoute(p, w, k);
            await paging.run(flush, (table) => encodeExperts(p, k, experts, table));
            encodeCombine(p, k, shared);
            encodeOutput(p, w, k, dense);
          },
          paging: () => paging.cache.totals,
        }
      : {}),
    commit: () => {},
    kvBytes: 0,
    recurrent: undefined,
    ring: false,
    routing: k.table,
    destroy() {
      for (const o of owned) o.destroy();
    },
  };
}

/** A block's expert matmuls: its gated stack (or gate and up apart) and down. */
interface Experts {
  readonly gateUp: ExpertMatmul | readonly [ExpertMatmul, ExpertMatmul];
  readonly down: ExpertMatmul;
}

/** The linears of the dense MLP beside the experts. */
interface Dense {
  readonly gateUp: Linear | readonly [Linear, Linear];
  readonly down: Linear;
}

/** A paged block's cache and what running a pass's experts through it takes. */
interface Paging {
  readonly cache: ExpertCache;
  /**
   * After the route kernel: submits, reads the routing table back, and for each wave of the
   * cache's plan loads its missing experts, writes its table and encodes its experts (`experts`),
   * submitting between waves.
   */
  run(flush: () => Promise<void>, experts: (table: GPUBuffer) => void): Promise<void>;
  destroy(): void;
}

/** The cache, the wave table and the table's readback of a paged block. */
function pagingOf(c: KindContext, k: MoeKernels, store: ExpertStore, pool: RouteShape): Paging {
  const { ctx } = c;
  const cache = new ExpertCache(store.slots, store.expertBytes);
  const tableBytes = 4 * routeTableLayout(k.shape).words;
  const table = createBuffer(ctx, 4 * routeTableLayout(pool).words, 'moe-wave-table');
  const staging = ctx.device.createBuffer({
    size: tableBytes,
    usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    label: 'moe-table-staging',
  });
  return {
    cache,
    async run(flush, experts) {
      await flush();
      const enc = ctx.device.createCommandEncoder({ label: 'moe-table-readback' });
      enc.copyBufferToBuffer(k.table, 0, staging, 0, tableBytes);
      ctx.counter.submit([enc.finish()]);
      await mapForRead(ctx, staging, 0, tableBytes);
      const words = new Uint32Array(staging.getMappedRange(0, tableBytes).slice(0));
      staging.unmap();
      const waves = cache.plan(routeGroups(words));
      for (const [i, wave] of waves.entries()) {
        // Queued after the waves before (submitted), before this one's dispatches.
        if (i > 0) await flush();
        for (const [expert, slot] of wave.loads) store.load(expert, slot);
        writeBuffer(ctx, table, waveTable(words, k.shape, pool, wave));
        experts(table);
      }
    },
    destroy() {
      table.destroy();
      staging.destroy();
    },
  };
}

/** The route kernel: the rows normed into h, their experts chosen, the routing table written. */
function encodeRoute(p: GpuPass, w: MoeGpuWeights, k: MoeKernels): void {
  p.section('mlp');
  k.route.encode(
    p.pass,
    {
      x: p.a.x,
      norm: w.norm,
      router: w.router,
      ...(w.bias ? { bias: w.bias } : {}),
      ...(w.shared ? { sharedRouter: w.shared.router } : {}),
      ...(w.scales ? { scales: w.scales } : {}),
      h: p.a.h,
      table: k.table,
      weights: k.weights,
    },
    p.T,
  );
}

/** Every chosen expert's act(gate) · up then down, in the table's sorted rows. */
function encodeExperts(p: GpuPass, k: MoeKernels, x: Experts, table: GPUBuffer): void {
  const { a, T } = p;
  if ('encode' in x.gateUp) x.gateUp.encode(p.pass, a.h, k.hidden, table, T, true);
  else {
    x.gateUp[0].encode(p.pass, a.h, k.gate, table, T, true);
    x.gateUp[1].encode(p.pass, a.h, k.up, table, T, true);
    k.silu.encode(p.pass, [k.gate, k.up], k.hidden, T * k.shape.topK);
  }
  x.down.encode(p.pass, k.hidden, k.out, table, T, false);
}

/** The shared expert (where there is one) and the weighted sum into the stream (or its own row). */
function encodeCombine(
  p: GpuPass,
  k: MoeKernels,
  shared: { gateUp: Linear | readonly [Linear, Linear]; down: Linear } | undefined,
): void {
  const { a, T } = p;
  if (shared && k.sharedOut) {
    const [g, u, prod] = k.sharedRows as [GPUBuffer, GPUBuffer, GPUBuffer];
    if ('encode' in shared.gateUp) shared.gateUp.encode(p.pass, a.h, prod, T, p.prefill);
    else {
      shared.gateUp[0].encode(p.pass, a.h, g, T, p.prefill);
      shared.gateUp[1].encode(p.pass, a.h, u, T, p.prefill);
      k.sharedSilu!.encode(p.pass, [g, u], prod, T);
    }
  }
  p.section('down');
  if (shared && k.sharedOut) shared.down.encode(p.pass, k.sharedRows[2]!, k.sharedOut, T, p.prefill);
  k.combine.encode(
    p.pass,
    {
      down: k.out,
      table: k.table,
      weights: k.weights,
      ...(k.sharedOut ? { shared: k.sharedOut } : {}),
      x: k.mixture ?? a.x,
    },
    T,
  );
}

/**
 * Where the combine stored the mixture's output: x += rmsnorm(mixture) · outNorm (sandwich norms);
 * beside a dense MLP (Gemma 4), d = dense MLP(rmsnorm(x) · its norm) into tmp, then in h (free
 * once the experts have run) s = rmsnorm(d) · its out norm, s += rmsnorm(mixture) · the experts'
 * out norm, and x += rmsnorm(s) · outNorm.
 */
function encodeOutput(p: GpuPass, w: MoeGpuWeights, k: MoeKernels, dense: Dense | undefined): void {
  const { a, T } = p;
  if (!k.mixture) return;
  const normAdd = p.k.normAdd;
  if (!normAdd || !w.outNorm)
    throw new Error('moe: a mixture whose output is normed has sandwich norms and the norm-add kernel');
  const d = w.dense;
  if (!d || !dense) {
    normAdd.encode(p.pass, k.mixture, w.outNorm, a.x, T);
    return;
  }
  p.section('mlp');
  if ('encode' in dense.gateUp) {
    dense.gateUp.encode(
      p.pass,
      dense.gateUp.fused.norm ? a.x : normedInput(p, d.norm),
      k.hidden,
      T,
      p.prefill,
    );
  } else {
    const hm = normedInput(p, d.norm);
    dense.gateUp[0].encode(p.pass, hm, k.gate, T, p.prefill);
    dense.gateUp[1].encode(p.pass, hm, k.up, T, p.prefill);
    k.denseSilu!.encode(p.pass, [k.gate, k.up], k.hidden, T);
  }
  p.section('down');
  dense.down.encode(p.pass, rotatedInput(p, p.k.rot?.of(d.I), k.hidden), a.tmp, T, p.prefill);
  p.k.norm.encode(p.pass, a.tmp, d.outNorm, a.h, T);
  normAdd.encode(p.pass, k.mixture, d.expertsOutNorm, a.h, T);
  normAdd.encode(p.pass, a.h, w.outNorm, a.x, T);
}
