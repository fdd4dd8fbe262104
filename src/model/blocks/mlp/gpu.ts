// The MLP block on the GPU: its weights as placed, its kernels (the model's unpaired gate kernel
// and its scratch rows, made once), its linears and its encode. It has no state.
import { createBuffer } from '../../../gpu/buffers.js';
import { SiluMul } from '../../../kernels/elementwise/elementwise.js';
import type { GpuMatrix } from '../../../kernels/matmul/matrix.js';
import { packedWidth, rotationFor } from '../../../quant/pack.js';
import { layerSpec } from '../../spec/spec.js';
import { encodeResidual, normedInput, rotatedInput } from '../encode.js';
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
import type { MlpBlock } from './block.js';

/**
 * The MLP block's weights on the GPU. Ip is the MLP width as packed (see `placeWeights`): I, or I
 * padded with zero rows of gate/up and zero columns of down.
 */
interface MlpGpuWeights {
  readonly activation: MlpBlock['activation'];
  readonly I: number; // the layer's MLP width (Gemma 4's KV-shared layers: twice the model's)
  readonly postNorm: GPUBuffer; // [H] the input norm (post_attention_layernorm, Gemma's pre_feedforward_layernorm)
  readonly outNorm: GPUBuffer | undefined; // [H] Gemma's norm of the block's output
  // gate_proj and up_proj as one gated pair (uploadGatedPair: silu(gate·x) * (up·x) in one matmul)
  // where their formats and blocks allow; else the two matrices.
  readonly gateUp: GpuMatrix | readonly [GpuMatrix, GpuMatrix]; // gated [Ip, H] | [Ip, H], [Ip, H]
  readonly down: GpuMatrix; // [H, Ip]
}

/** What every MLP block of a model shares: the unpaired gate kernels and the scratch rows. */
interface MlpKernels {
  /** act(gate) · up of an unpaired MLP (SiLU, or Gemma's GELU), per packed width Ip. */
  silu(Ip: number): SiluMul;
  gate: GPUBuffer; // [T, max Ip]
  up: GPUBuffer; // [T, max Ip]
  act: GPUBuffer; // [T, max Ip] act(gate) * up
}

/** The packed MLP widths of a model's layers (Gemma 4's wide layers add one). */
function packedWidths(c: KindContext): number[] {
  const widths = new Set<number>([c.Ip]);
  for (let l = 0; l < c.spec.layers; l++) {
    const I = layerSpec(c.spec, l).intermediate;
    widths.add(packedWidth(I, rotationFor(c.rotate, I)));
  }
  return [...widths];
}

/** The model's MLP kernels and scratch rows, the gate kernel compiled first. */
const modelKernels = new PerModel(async (c: KindContext): Promise<MlpKernels> => {
  const { ctx, binds, spec } = c;
  const activation = spec.activation === 'gelu_tanh' ? 'gelu' : 'silu';
  await SiluMul.prepare(ctx, false, activation);
  const widths = packedWidths(c);
  const rows = (label: string) => createBuffer(ctx, MAX_FORWARD_TOKENS * Math.max(...widths) * 4, label);
  const gates = new Map(widths.map((Ip) => [Ip, new SiluMul(ctx, binds, Ip, false, activation)]));
  const k = {
    silu: (Ip: number) => {
      const g = gates.get(Ip);
      if (!g) throw new Error(`mlp: no gate kernel of width ${Ip}`);
      return g;
    },
    gate: rows('gate'),
    up: rows('up'),
    act: rows('act'),
  };
  c.onDestroy(() => {
    for (const b of [k.gate, k.up, k.act]) b.destroy();
  });
  return k;
});

/** Places the block's tensors. */
export async function placeMlp(placer: Placer, block: MlpBlock): Promise<GpuBlock> {
  const { spec } = placer;
  const H = spec.hidden;
  const I = layerSpec(spec, block.layer).intermediate;
  const n = block.names;
  const w: MlpGpuWeights = {
    activation: block.activation,
    I,
    postNorm: await placer.norm(n.norm, H),
    outNorm: spec.sandwichNorms ? await placer.norm(n.outNorm, H) : undefined,
    // Labelled as the gate's module, e.g. `mlp.gate_up_proj.weight` (LFM2: `feed_forward.gate_up_proj.weight`).
    gateUp: await placer.paired(
      n.gate.replace(/[^.]+\.weight$/, 'gate_up_proj.weight'),
      [n.gate, I, H],
      [n.up, I, H],
    ),
    down: await placer.matrix(n.down, H, I),
  };
  return {
    matrices: [...('parts' in w.gateUp ? [w.gateUp] : w.gateUp), w.down],
    vectors: [w.postNorm, w.outNorm].filter((b) => b !== undefined),
    bind: (c) => bindMlp(c, w),
  };
}

/** The block's linears: a gated pair takes the post-attention norm and the SiLU gate. */
async function bindMlp(c: KindContext, w: MlpGpuWeights): Promise<BoundBlock> {
  const k = await modelKernels.of(c);
  const kb = c.builder;
  const gateUp =
    'parts' in w.gateUp
      ? kb.linear(w.gateUp, {
          ...kb.norm(w.postNorm),
          epilogue: w.activation === 'gelu_tanh' ? 'gelu' : 'silu',
        })
      : ([kb.linear(w.gateUp[0]), kb.linear(w.gateUp[1])] as const);
  // With a norm of its output (Gemma), down stores and the norm-add kernel adds.
  const down = kb.linear(w.down, w.outNorm ? {} : { epilogue: 'add' });
  const Ip = packedWidth(w.I, rotationFor(c.rotate, w.I));
  return {
    encode: (p) => encodeMlp(p, w, k, Ip, gateUp, down),
    commit: () => {},
    kvBytes: 0,
    recurrent: undefined,
    ring: false,
    destroy() {
      for (const l of 'encode' in gateUp ? [gateUp] : gateUp) l.destroy();
      down.destroy();
    },
  };
}

/**
 * Encodes the block: silu(gate) * up from one gated matmul (the post-attention norm folded in), or
 * each step; then x += down(act).
 */
function encodeMlp(
  p: GpuPass,
  w: MlpGpuWeights,
  k: MlpKernels,
  Ip: number,
  gateUp: Linear | readonly [Linear, Linear],
  down: Linear,
): void {
  const { a, T } = p;
  p.section('mlp');
  if ('encode' in gateUp) {
    gateUp.encode(p.pass, gateUp.fused.norm ? a.x : normedInput(p, w.postNorm), k.act, T, p.prefill);
  } else {
    const hm = normedInput(p, w.postNorm);
    gateUp[0].encode(p.pass, hm, k.gate, T, p.prefill);
    gateUp[1].encode(p.pass, hm, k.up, T, p.prefill);
    k.silu(Ip).encode(p.pass, [k.gate, k.up], k.act, T);
  }
  p.section('down');
  encodeResidual(p, down, rotatedInput(p, p.k.rot?.of(w.I), k.act), w.outNorm);
}
