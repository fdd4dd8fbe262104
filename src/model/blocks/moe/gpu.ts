// The mixture block on the GPU: its router, selection bias and norms as f32, its experts as two
// stacks (gate | up per expert, gated; down), its shared expert as dense linears; and the kernels
// every mixture block of a model shares (route, combine, the activation of an ungated stack) with
// the scratch of one pass. A pass runs: route (norm, router, top-k and the routing table in one
// dispatch), the gated gate | up of every chosen expert, their down, and the weighted sum into the
// residual stream: four dispatches per part of each stack, no host round trip (plus the shared
// expert's linears where there is one).
import { createBuffer } from '../../../gpu/buffers.js';
import { type GateActivation, SiluMul } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { MoeCombine } from '../../../kernels/moe/combine.js';
import { ExpertMatmul, type GpuExperts } from '../../../kernels/moe/experts.js';
import { MoeRoute } from '../../../kernels/moe/route.js';
import { type RouteShape, routeTableLayout, routeWeightWords } from '../../../kernels/moe/table.js';
import {
  type BoundBlock,
  type GpuBlock,
  type GpuPass,
  type KindContext,
  type Linear,
  MAX_FORWARD_TOKENS,
  PerModel,
  type Placer,
} from '../gpu.js';
import { type MoeBlock, moeOf } from './block.js';

/** The block's weights on the GPU. */
interface MoeGpuWeights {
  readonly norm: GPUBuffer; // [H] as it multiplies
  readonly router: GPUBuffer; // [E, H] f32
  readonly bias: GPUBuffer | undefined; // [E] the selection bias
  /** Each expert's gate | up as one gated stack, or (formats apart) the gate stack and the up stack. */
  readonly gateUp: GpuExperts | readonly [GpuExperts, GpuExperts];
  readonly down: GpuExperts;
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
  readonly table: GPUBuffer; // the routing table (kernels/moe/table.ts)
  readonly weights: GPUBuffer; // [T · k] routing weights, then [T] the shared expert's
  readonly gate: GPUBuffer; // [T · k, I] an ungated stack's gate rows
  readonly up: GPUBuffer; // [T · k, I]
  readonly hidden: GPUBuffer; // [T · k, I] act(gate) · up of each choice, in sorted order
  readonly out: GPUBuffer; // [T · k, H] each choice's expert output, in sorted order
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
  };
  const combineOptions = {
    hidden: H,
    topK: m.topK,
    experts: m.experts,
    maxRows: T,
    shared: Is !== undefined,
  };
  await Promise.all([
    MoeRoute.prepare(ctx, routeOptions),
    MoeCombine.prepare(ctx, Is !== undefined),
    SiluMul.prepare(ctx, false, act),
  ]);
  const buffers: GPUBuffer[] = [];
  const buffer = (bytes: number, label: string) => {
    const b = createBuffer(ctx, bytes, label);
    buffers.push(b);
    return b;
  };
  const choices = T * m.topK;
  const k: MoeKernels = {
    shape,
    route: new MoeRoute(ctx, binds, routeOptions),
    combine: new MoeCombine(ctx, binds, combineOptions),
    act,
    silu: new SiluMul(ctx, binds, I, false, act),
    sharedSilu: Is === undefined ? undefined : new SiluMul(ctx, binds, Is, false, act),
    table: buffer(4 * routeTableLayout(shape).words, 'moe-table'),
    weights: buffer(4 * routeWeightWords(shape, Is !== undefined), 'moe-weights'),
    gate: buffer(4 * choices * I, 'moe-gate'),
    up: buffer(4 * choices * I, 'moe-up'),
    hidden: buffer(4 * choices * I, 'moe-hidden'),
    out: buffer(4 * choices * H, 'moe-out'),
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

/** Places the block's tensors. */
export async function placeMoe(placer: Placer, block: MoeBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const m = moeOf(spec);
  const n = block.names;
  const H = spec.hidden;
  const I = m.intermediate;
  const Is = m.sharedIntermediate;
  if (spec.sandwichNorms)
    throw new Error(`moe: layer ${block.layer}: a mixture with sandwich norms is not supported yet`);
  const label = `${n.router.replace(/[^.]+\.weight$/, '')}experts`;
  const pairs = n.gate.map((g, e) => [g, n.up[e]!] as const);
  const gated = await placer.experts(`${label}.gate_up`, pairs, I, H);
  const gateUp =
    gated ??
    ([
      (await placer.experts(
        `${label}.gate`,
        n.gate.map((g) => [g]),
        I,
        H,
      ))!,
      (await placer.experts(
        `${label}.up`,
        n.up.map((u) => [u]),
        I,
        H,
      ))!,
    ] as const);
  const down = (await placer.experts(
    `${label}.down`,
    n.down.map((d) => [d]),
    H,
    I,
  ))!;
  const w: MoeGpuWeights = {
    norm: await placer.norm(n.norm, H),
    router: await placer.tensor(n.router, [m.experts, H]),
    bias: m.selectionBias ? await placer.vector(n.bias, m.experts) : undefined,
    gateUp,
    down,
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
  return {
    matrices: sharedMatrices,
    vectors: [w.norm, w.router, w.bias, w.shared?.router].filter((b) => b !== undefined),
    experts: stacks,
    expertBytesPerToken: m.topK * stacks.reduce((sum, s) => sum + s.expertBytes, 0),
    bind: (c) => bindMoe(c, w),
  };
}

/** The block's expert matmuls and shared linears. */
async function bindMoe(c: KindContext, w: MoeGpuWeights): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const { ctx, binds } = c;
  const expert = async (s: GpuExperts, epilogue: 'store' | GateActivation) => {
    await ExpertMatmul.prepare(ctx, s.format, s.rows, s.cols, k.shape, epilogue);
    return new ExpertMatmul(ctx, binds, s, k.shape, { epilogue });
  };
  const gateUp =
    'parts' in w.gateUp
      ? await expert(w.gateUp, k.act)
      : ([await expert(w.gateUp[0], 'store'), await expert(w.gateUp[1], 'store')] as const);
  const down = await expert(w.down, 'store');
  const kb = c.builder;
  const shared = w.shared && {
    gateUp:
      'parts' in w.shared.gateUp
        ? kb.linear(w.shared.gateUp, { epilogue: k.act })
        : ([kb.linear(w.shared.gateUp[0]), kb.linear(w.shared.gateUp[1])] as const),
    down: kb.linear(w.shared.down),
  };
  const linears: { destroy(): void }[] = [
    ...('encode' in gateUp ? [gateUp] : gateUp),
    down,
    ...(shared ? [...('encode' in shared.gateUp ? [shared.gateUp] : shared.gateUp), shared.down] : []),
  ];
  return {
    encode: (p) => encodeMoe(p, w, k, gateUp, down, shared),
    commit: () => {},
    kvBytes: 0,
    recurrent: undefined,
    ring: false,
    routing: k.table,
    destroy() {
      for (const l of linears) l.destroy();
    },
  };
}

/** Encodes the block (see the file's header). */
function encodeMoe(
  p: GpuPass,
  w: MoeGpuWeights,
  k: MoeKernels,
  gateUp: ExpertMatmul | readonly [ExpertMatmul, ExpertMatmul],
  down: ExpertMatmul,
  shared: { gateUp: Linear | readonly [Linear, Linear]; down: Linear } | undefined,
): void {
  const { a, T, pass } = p;
  const choices = T * k.shape.topK;
  p.section('mlp');
  k.route.encode(
    pass,
    {
      x: a.x,
      norm: w.norm,
      router: w.router,
      ...(w.bias ? { bias: w.bias } : {}),
      ...(w.shared ? { sharedRouter: w.shared.router } : {}),
      h: a.h,
      table: k.table,
      weights: k.weights,
    },
    T,
  );
  if ('encode' in gateUp) gateUp.encode(pass, a.h, k.hidden, k.table, T, true);
  else {
    gateUp[0].encode(pass, a.h, k.gate, k.table, T, true);
    gateUp[1].encode(pass, a.h, k.up, k.table, T, true);
    k.silu.encode(pass, [k.gate, k.up], k.hidden, choices);
  }
  if (shared && k.sharedOut) {
    const [g, u, prod] = k.sharedRows as [GPUBuffer, GPUBuffer, GPUBuffer];
    if ('encode' in shared.gateUp) shared.gateUp.encode(pass, a.h, prod, T);
    else {
      shared.gateUp[0].encode(pass, a.h, g, T);
      shared.gateUp[1].encode(pass, a.h, u, T);
      k.sharedSilu!.encode(pass, [g, u], prod, T);
    }
  }
  p.section('down');
  down.encode(pass, k.hidden, k.out, k.table, T, false);
  if (shared && k.sharedOut) shared.down.encode(pass, k.sharedRows[2]!, k.sharedOut, T);
  k.combine.encode(
    pass,
    {
      down: k.out,
      table: k.table,
      weights: k.weights,
      ...(k.sharedOut ? { shared: k.sharedOut } : {}),
      x: a.x,
    },
    T,
  );
}
