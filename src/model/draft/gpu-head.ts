import { InvalidInputError } from '../../errors.js';
import { uploadBuffer } from '../../gpu/buffers.js';
import type { GpuContext } from '../../gpu/device.js';
import { BindGroupCache } from '../../kernels/bind.js';
import { HeadFeatures, VocabScatter } from '../../kernels/draft-head/draft-head.js';
import { Embedding } from '../../kernels/embed/embed.js';
import { Matmul, prepareMatmul } from '../../kernels/matmul/matmul.js';
import { type GpuMatrix, uploadMatrix } from '../../kernels/matmul/matrix.js';
import { quantize } from '../../quant/formats.js';
import { MAX_FORWARD_TOKENS } from '../blocks/gpu.js';
import type { HeadStageBuffers, HeadStages } from '../gpu/draft-stages.js';
import { createGpuRunner, type GpuRunner } from '../gpu/runner.js';
import { type DraftHead, headModelSpec } from './head.js';

// A draft head on the GPU (the architecture: model/head.ts). It runs as a one-layer GpuRunner over
// the target's vocabulary, beside its target on one device, so a device step (decode/device-step.ts)
// drafts with it as with any draft model: its catch-up, every draft depth, the target's verify
// pass and the acceptance in one submission, one readback per step. Around the decoder layer:
//
//   input (HeadStages.encodeInput, four dispatches): e = the target's embedding rows of the ids
//     (the target's table, borrowed); f = each row's feature (HeadFeatures: the target's feature
//     store at p - 1 while the target has scored it, else the head's own output at the parent's
//     slot, which its visibility mask names); x = fc_e · rmsnorm(e) + fc_f · rmsnorm(f), the two
//     halves of fc with their norms fused into the matmuls (the second adds into x).
//   layer: the runner's, with attention that never sees the entry at slot 0 (firstSlot 1). Its
//     output g goes to the head's feature store at the row's slot (the runner's feature scatter).
//   logits: the LM head holds the draft vocabulary's rows of the target's; VocabScatter writes its
//     [R, Vd] output at the d2t ids of [R, V] rows that are -∞ everywhere else.
//
// The weights are placed at f16 (the shipped head is stored so: exact) or f32, the embedding in
// whatever format the target's is.

/** Options of {@link createGpuHeadRunner}. */
export interface GpuHeadOptions {
  /** KV cache slots of the head (default the target's). */
  capacity?: number;
  /** Format of the head's weights: f16 (the default; the shipped head is stored so) or f32. */
  quant?: 'f16' | 'f32';
}

/**
 * Places `head` on its target's device as a runner (see above). The target must keep its features
 * (GpuRunnerOptions.features); the head's rows read them where they lie.
 */
export async function createGpuHeadRunner(
  head: DraftHead,
  target: GpuRunner,
  o: GpuHeadOptions = {},
): Promise<GpuRunner> {
  const store = target.featureStore;
  if (!store)
    throw new InvalidInputError(`draft head ${head.name}: the target runner does not keep its features`);
  const ctx = target.gpu;
  const s = head.spec;
  const H = s.hidden;
  const spec = headModelSpec(s, target.spec);
  const w = head.weights;
  // The head's layer under a one-layer model's names, its final norm and LM rows: f32 arrays.
  const arrays = new Map<string, { shape: number[]; data: Float32Array }>([
    ['model.layers.0.input_layernorm.weight', { shape: [H], data: w.inputNorm }],
    ['model.layers.0.post_attention_layernorm.weight', { shape: [H], data: w.postNorm }],
    ['model.layers.0.self_attn.q_proj.weight', { shape: [s.heads * s.headDim, H], data: w.q }],
    ['model.layers.0.self_attn.k_proj.weight', { shape: [s.kvHeads * s.headDim, H], data: w.k }],
    ['model.layers.0.self_attn.v_proj.weight', { shape: [s.kvHeads * s.headDim, H], data: w.v }],
    ['model.layers.0.self_attn.o_proj.weight', { shape: [H, s.heads * s.headDim], data: w.o }],
    ['model.layers.0.mlp.gate_proj.weight', { shape: [s.intermediate, H], data: w.gate }],
    ['model.layers.0.mlp.up_proj.weight', { shape: [s.intermediate, H], data: w.up }],
    ['model.layers.0.mlp.down_proj.weight', { shape: [H, s.intermediate], data: w.down }],
    ['model.norm.weight', { shape: [H], data: head.norm }],
    ['lm_head.weight', { shape: [s.draftVocab, H], data: head.lmRows }],
  ]);
  const weights = {
    tensors: arrays,
    readF32: async (name: string): Promise<Float32Array> => {
      const t = arrays.get(name);
      if (!t) throw new InvalidInputError(`draft head ${head.name}: no tensor ${name}`);
      return t.data;
    },
  };
  const quant = o.quant ?? 'f16';
  const stages = await HeadInput.create(ctx, head, target, quant);
  try {
    return await createGpuRunner(
      { spec, weights },
      {
        quant,
        capacity: o.capacity ?? target.capacity,
        gpu: ctx,
        ownsContext: false,
        features: true,
        head: { embed: target.embedding, lmRows: s.draftVocab, stages },
      },
    );
  } catch (e) {
    stages.destroy();
    throw e;
  }
}

/** The head's {@link HeadStages}: its input stage and its vocabulary map. */
class HeadInput implements HeadStages {
  readonly weightBytes: number;

  private constructor(
    private readonly target: GpuRunner,
    private readonly embed: Embedding,
    private readonly features: HeadFeatures,
    private readonly fcEmbed: Matmul,
    private readonly fcHidden: Matmul,
    private readonly vocab: VocabScatter,
    private readonly owned: { matrices: GpuMatrix[]; buffers: GPUBuffer[] },
    readonly small: GPUBuffer,
  ) {
    const [e, f] = owned.matrices;
    this.weightBytes = e!.bytes + f!.bytes;
  }

  static async create(
    ctx: GpuContext,
    head: DraftHead,
    target: GpuRunner,
    quant: 'f16' | 'f32',
  ): Promise<HeadInput> {
    const s = head.spec;
    const H = s.hidden;
    const w = head.weights;
    // fc [H, 2H] as its two halves [H, H]: the columns that multiply the embedding, then the feature.
    const half = (offset: number) => {
      const out = new Float32Array(H * H);
      for (let r = 0; r < H; r++) out.set(w.fc.subarray(r * 2 * H + offset, r * 2 * H + offset + H), r * H);
      return out;
    };
    await Promise.all([
      Embedding.prepare(ctx, target.embedding.format),
      HeadFeatures.prepare(ctx),
      VocabScatter.prepare(ctx),
      prepareMatmul(ctx, quant, { rows: H, cols: H }, MAX_FORWARD_TOKENS, { norm: {} }),
      prepareMatmul(ctx, quant, { rows: H, cols: H }, MAX_FORWARD_TOKENS, { norm: {}, epilogue: 'add' }),
    ]);
    const binds = new BindGroupCache(ctx.device);
    const fcE = uploadMatrix(ctx, quantize(half(0), H, H, quant), 'head.fc.weight[:, :H]');
    const fcF = uploadMatrix(ctx, quantize(half(H), H, H, quant), 'head.fc.weight[:, H:]');
    const normEmbed = uploadBuffer(ctx, w.normEmbed, 'head.norm_embed.weight');
    const normHidden = uploadBuffer(ctx, w.normHidden, 'head.norm_hidden.weight');
    const d2t = uploadBuffer(ctx, Uint32Array.from(w.d2t), 'head.d2t');
    const small = uploadBuffer(ctx, new Float32Array(MAX_FORWARD_TOKENS * s.draftVocab), 'head-draft-logits');
    const maxM = MAX_FORWARD_TOKENS;
    return new HeadInput(
      target,
      new Embedding(ctx, binds, target.embedding),
      new HeadFeatures(ctx, binds, { hidden: H }),
      new Matmul(ctx, binds, fcE, { maxM, norm: { weight: normEmbed, eps: s.rmsEps } }),
      new Matmul(ctx, binds, fcF, { maxM, norm: { weight: normHidden, eps: s.rmsEps }, epilogue: 'add' }),
      new VocabScatter(ctx, binds, { vocab: target.spec.vocabSize, draftVocab: s.draftVocab }, d2t),
      { matrices: [fcE, fcF], buffers: [normEmbed, normHidden, d2t, small] },
      small,
    );
  }

  known(): number {
    return this.target.kvLength;
  }

  encodeInput(pass: GPUComputePassEncoder, a: HeadStageBuffers, T: number): void {
    const store = this.target.featureStore!;
    this.embed.encode(pass, a.ids, a.tmp, T);
    this.fcEmbed.encode(pass, a.tmp, a.x, T);
    this.features.encode(pass, a.positions, a.slots, a.vis, store, a.own, a.hr, T, this.known());
    this.fcHidden.encode(pass, a.hr, a.x, T);
  }

  encodeLogits(pass: GPUComputePassEncoder, logits: GPUBuffer, R: number): void {
    this.vocab.encode(pass, this.small, logits, R);
  }

  destroy(): void {
    this.fcEmbed.destroy();
    this.fcHidden.destroy();
    this.features.destroy();
    this.vocab.destroy();
    for (const m of this.owned.matrices) m.destroy();
    for (const b of this.owned.buffers) b.destroy();
  }
}
