// A checkpoint's own multi-token-prediction layer as a draft head (Qwen3.5's `mtp.*`; vLLM's and
// SGLang's Qwen3-Next MTP): the entry at position p reads the next token x_p and the target's
// hidden state h_{p-1} after its final norm,
//   x = fc · [rmsnorm(E[x_p]; 1 + w_embed) ; rmsnorm(norm_target(h_{p-1}); 1 + w_hidden)]
// then one decoder layer shaped as the model's full-attention layers (an output-gated q_proj,
// QK-norm, partial rotary, zero-centred norms) with its MLP (Qwen3.5-MoE's: a mixture of experts), and scores the token at p + 1 through
// the target's LM head after its own final norm (mtp.norm, 1 + w). Fed its own outputs, it drafts
// several depths: the draft head's runner (HeadRunner) drives it, its layer run by the model's own
// reference blocks.
import { InvalidInputError } from '../../errors.js';
import type { TensorReader } from '../../formats/weft-checkpoint.js';
import { attentionBlock, attentionTensors } from '../blocks/attention/block.js';
import { attentionRef, readAttention } from '../blocks/attention/reference.js';
import { mlpBlock, mlpTensors } from '../blocks/mlp/block.js';
import { mlpRef, readMlp } from '../blocks/mlp/reference.js';
import { moeBlock, moeTensors } from '../blocks/moe/block.js';
import { moeRef, readMoe } from '../blocks/moe/reference.js';
import { normWeight, ropeInverseFrequencies } from '../blocks/ops.js';
import type { RefPass } from '../blocks/pass.js';
import { RecurrentStates } from '../blocks/recurrent-state.js';
import type { ModelSpec } from '../spec/spec.js';
import type { DraftHead, HeadSpec } from './head.js';

/** Where the MTP layer's decoder layer keeps its tensors. */
const MTP_LAYER = 'mtp.layers.0';

/**
 * The tensors of a Qwen3.5 checkpoint's multi-token-prediction layer (`mtp.*`), in checkpoint
 * order: the norms of the next token's embedding and of the target's hidden state, their joint
 * projection `fc` [H, 2H], one full-attention decoder layer (as the model's attention layers: an
 * output-gated q_proj, QK-norm) with its MLP, and its final norm. It reads the target's embedding
 * table and LM head.
 */
export function mtpShapes(spec: ModelSpec): (readonly [string, readonly number[]])[] {
  const H = spec.hidden;
  // The layer's tensors: an attention and an MLP (or mixture) block of a one-layer spec, under mtp.layers.0.
  const layer = mtpLayerSpec(spec);
  const decoder = [
    ...attentionTensors(layer, attentionBlock(0, MTP_LAYER)),
    ...(layer.moe
      ? moeTensors(layer, moeBlock(0, layer.moe.experts, 'silu', MTP_LAYER))
      : mlpTensors(layer, mlpBlock(0, 'silu', MTP_LAYER))),
  ];
  return [
    ['mtp.pre_fc_norm_embedding.weight', [H]],
    ['mtp.pre_fc_norm_hidden.weight', [H]],
    ['mtp.fc.weight', [H, 2 * H]],
    ...decoder,
    ['mtp.norm.weight', [H]],
  ];
}

/**
 * The one-layer spec of the MTP layer: an attention layer, with a mixture (Qwen3.5-MoE's, experts
 * stored one by one under mtp.layers.0.mlp.experts) where the model has one.
 */
function mtpLayerSpec(spec: ModelSpec): ModelSpec {
  const { moe, ...rest } = spec;
  return {
    ...rest,
    layers: 1,
    layerKinds: ['attention'],
    ...(moe ? { moe: { ...moe, layers: [true] } } : {}),
  };
}

/** Whether a checkpoint holds an MTP layer. */
function hasMtp(weights: TensorReader): boolean {
  return weights.tensors.has('mtp.fc.weight');
}

/**
 * The MTP layer of `target`'s checkpoint as a {@link DraftHead} over the whole vocabulary, its
 * tensors checked against {@link mtpShapes}. Throws InvalidInputError when the checkpoint has none.
 */
export async function openMtpHead(target: {
  readonly name: string;
  readonly spec: ModelSpec;
  readonly weights: TensorReader;
}): Promise<DraftHead> {
  const { spec, weights } = target;
  if (!hasMtp(weights))
    throw new InvalidInputError(
      `draft 'mtp': ${target.name} has no multi-token-prediction layer (mtp.fc.weight and the rest of mtp.*)`,
    );
  const tensors = new Map<string, Float32Array>();
  for (const [name, shape] of mtpShapes(spec)) {
    const info = weights.tensors.get(name);
    if (!info || info.shape.join() !== shape.join())
      throw new InvalidInputError(
        `draft 'mtp': ${target.name}: ${name} is ${info ? `[${info.shape}]` : 'missing'}, expected [${shape}]`,
      );
    tensors.set(name, await weights.readF32(name));
  }
  const get = (name: string) => tensors.get(name)!;
  // The layer as the model's attention and MLP (or mixture) blocks of a one-layer spec, under mtp.layers.0.
  const layer = mtpLayerSpec(spec);
  const attentionLayer = attentionBlock(0, MTP_LAYER);
  const attention = readAttention(get, layer, attentionLayer);
  const ffn = layer.moe
    ? (() => {
        const block = moeBlock(0, layer.moe.experts, 'silu', MTP_LAYER);
        const w = readMoe(get, layer, block);
        // A mixture's experts run in `body` only: the fields of a trained head's MLP stay empty.
        const none = new Float32Array(0);
        return {
          postNorm: w.norm,
          gate: none,
          up: none,
          down: none,
          run: (p: RefPass) => moeRef(p, block, w),
        };
      })()
    : (() => {
        const block = mlpBlock(0, 'silu', MTP_LAYER);
        const w = readMlp(get, layer, block);
        return { ...w, run: (p: RefPass) => mlpRef(p, block, w) };
      })();
  const invFreq = ropeInverseFrequencies(layer.rope, layer.headDim);
  const recurrent = new RecurrentStates();
  const embed = await weights.readF32('model.embed_tokens.weight');
  const lm = spec.tiedEmbeddings ? embed : await weights.readF32('lm_head.weight');
  const headSpec: HeadSpec = {
    hidden: spec.hidden,
    // A mixture's MTP layer reads its topK experts and its shared expert per row.
    intermediate: layer.moe
      ? layer.moe.topK * layer.moe.intermediate + (layer.moe.sharedIntermediate ?? 0)
      : spec.intermediate,
    heads: spec.heads,
    kvHeads: spec.kvHeads,
    headDim: spec.headDim,
    rmsEps: spec.rmsEps,
    ropeTheta: spec.rope.theta,
    draftVocab: spec.vocabSize,
    target: { hidden: spec.hidden, vocabSize: spec.vocabSize, layers: spec.layers },
  };
  return {
    name: `${target.name} mtp`,
    spec: headSpec,
    weights: {
      fc: get('mtp.fc.weight'),
      normEmbed: normWeight(spec, get('mtp.pre_fc_norm_embedding.weight')),
      normHidden: normWeight(spec, get('mtp.pre_fc_norm_hidden.weight')),
      inputNorm: attention.inputNorm,
      q: get(attentionLayer.names.q),
      k: present(attention.k, attentionLayer.names.k),
      v: present(attention.v, attentionLayer.names.v),
      o: attention.o,
      postNorm: ffn.postNorm,
      gate: ffn.gate,
      up: ffn.up,
      down: ffn.down,
      d2t: Int32Array.from({ length: spec.vocabSize }, (_, i) => i),
    },
    embed,
    norm: normWeight(spec, get('mtp.norm.weight')),
    lmRows: lm,
    mtp: {
      featureNorm: normWeight(spec, await weights.readF32('model.norm.weight')),
      body(x, positions, slots, attended, cache) {
        const pass: RefPass = {
          spec: layer,
          T: positions.length,
          x,
          tokens: positions.map(() => 0), // the body reads no ids
          perLayerInputs: undefined,
          positions,
          cacheSlots: slots,
          parents: positions.map(() => -1),
          attended,
          invFreq: () => invFreq,
          kvFormat: 'f32',
          kvRotate: false,
          cache,
          recurrent,
          input: (a) => a,
        };
        attentionRef(pass, attentionLayer, attention);
        ffn.run(pass);
      },
    },
  };
}

/** A weight the MTP layer's full attention always has (its layers compute K and V). */
function present(w: Float32Array | undefined, name: string): Float32Array {
  if (!w) throw new Error(`mtp: ${name} was not read`);
  return w;
}
