// The CPU reference of a real-size int4 checkpoint too large to hold in f32 (LFM2-8B-A1B's 33 GB,
// Gemma 4 E2B's 20 GB): ReferenceRunner.logits for one chain on an empty cache, with each block's
// tensors dequantized (`referenceTensors`, as ReferenceRunner is fed), its own reference forward
// (`referenceBlock`, the code ReferenceRunner runs) run over the rows, and the tensors dropped.
// A per-layer-input table (Gemma 4's [262144, layers · 256], 9.4 GB in f32 at E2B) is read only at
// the rows of the pass's tokens: the reference reads no other row of it.
import { expect } from 'vitest';
import type { TensorReader } from '../../src/formats/weft-checkpoint.js';
import { blockTensors, referenceBlock } from '../../src/model/blocks/index.js';
import {
  linear,
  normWeight,
  rmsNorm,
  ropeInverseFrequencies,
  softcapRef,
} from '../../src/model/blocks/ops.js';
import type { RefPass, TakeTensor } from '../../src/model/blocks/pass.js';
import { RecurrentStates } from '../../src/model/blocks/recurrent-state.js';
import { finalNormName, modelBlocks } from '../../src/model/families/index.js';
import type { OpenedModel } from '../../src/model/load.js';
import { referenceTensors } from '../../src/model/quantized.js';
import { ReferenceKvCache } from '../../src/model/reference/reference.js';
import { deriveSizes, kvSourceLayer, layerAttention, layerSpec } from '../../src/model/spec/spec.js';
import { chainParents } from '../../src/model/tree.js';
import { effectiveWeights } from '../../src/quant/pack.js';
import { alignedRowStep } from '../../src/quant/rows.js';

/**
 * The reference's logits [T, V] of `tokens` run as one chain from an empty cache on `opened`'s
 * int4 weights (stored packed at int4, no rotation), each block's weights read, run and dropped in
 * turn. What ReferenceRunner.logits computes on `referenceTensors(opened, 'int4', 'none')`.
 */
export async function streamedReferenceLogits(
  opened: OpenedModel,
  tokens: readonly number[],
): Promise<Float32Array> {
  const { spec } = opened;
  const H = spec.hidden;
  const V = spec.vocabSize;
  const T = tokens.length;
  // The tensors named, as the reference would be fed them whole.
  const read = async (names: readonly string[]) => {
    const tensors = new Map(names.map((n) => [n, opened.weights.tensors.get(n)!]));
    const weights: TensorReader = { ...opened.weights, tensors };
    return referenceTensors({ spec, weights, packed: opened.packed }, 'int4', 'none');
  };
  const head = spec.tiedEmbeddings ? [] : ['lm_head.weight'];
  const global = await read(['model.embed_tokens.weight', finalNormName(spec), ...head]);
  const embed = global['model.embed_tokens.weight']!.data; // [V, H]
  const lmHead = spec.tiedEmbeddings ? embed : global['lm_head.weight']!.data; // [V, H]

  const x = new Float32Array(T * H); // [T, H] residual stream
  for (let t = 0; t < T; t++) x.set(embed.subarray(tokens[t]! * H, (tokens[t]! + 1) * H), t * H);
  if (spec.embedScale) {
    // As ReferenceRunner: the row times √H, the scale rounded to f32 first.
    const scale = Math.fround(Math.sqrt(H));
    for (let i = 0; i < x.length; i++) x[i] = Math.fround(x[i]! * scale);
  }
  const positions = tokens.map((_, i) => i);
  const invFreqs = Array.from({ length: spec.layers }, (_, layer) => {
    const rope = layerAttention(spec, layer).rope;
    return rope && ropeInverseFrequencies(rope, layerSpec(spec, layer).headDim);
  });
  // Per layer its own K/V width (Gemma 4's full layers are wider); none for a KV-shared layer.
  const widths = Array.from({ length: spec.layers }, (_, l) =>
    kvSourceLayer(spec, l) === l ? deriveSizes(layerSpec(spec, l)).kvWidth : 0,
  );
  const pass: RefPass = {
    spec,
    T,
    x,
    tokens,
    perLayerInputs: undefined,
    positions,
    cacheSlots: positions,
    parents: chainParents(T),
    attended: positions.map((i) => positions.slice(0, i + 1)),
    invFreq: (layer) => invFreqs[layer],
    kvFormat: 'f32',
    kvRotate: false,
    cache: new ReferenceKvCache(spec.layers, widths, T),
    recurrent: new RecurrentStates(),
    input: (a) => a,
  };
  for (const block of modelBlocks(spec)) {
    const table = block.kind === 'ple' ? block.names.table : undefined;
    const names = blockTensors(spec, block)
      .map(([name]) => name)
      .filter((n) => n !== table);
    const tensors = await read(names);
    const take: TakeTensor = (name, shape) => {
      const t = tensors[name]!;
      expect(t.shape).toEqual(shape);
      return t.data;
    };
    if (table === undefined) {
      referenceBlock(take, spec, block)(pass);
      continue;
    }
    // The table's rows of the pass's distinct tokens [U, cols], and the tokens as rows of it.
    const ids = [...new Set(tokens)];
    const rows = await tableRows(opened, table, ids);
    const local = { ...pass, tokens: tokens.map((t) => ids.indexOf(t)) };
    referenceBlock((name, shape) => (name === table ? rows : take(name, shape)), spec, block)(local);
    pass.perLayerInputs = local.perLayerInputs;
  }
  const h = new Float32Array(T * H); // [T, H] the final norm's output
  rmsNorm(x, H, normWeight(spec, global[finalNormName(spec)]!.data), spec.rmsEps, h);
  const logits = new Float32Array(T * V); // [T, V]
  linear(h, H, lmHead, V, undefined, logits);
  if (spec.logitSoftcap !== undefined) softcapRef(logits, spec.logitSoftcap);
  return logits;
}

/**
 * Rows `ids` [U, cols] of a table stored packed at int4, dequantized as `referenceTensors` gives
 * the whole table (`effectiveWeights` of its stored words), each read with the aligned run of rows
 * around it (`alignedRowStep`: one row where cols is a multiple of 256, as at Gemma 4's sizes).
 */
async function tableRows(opened: OpenedModel, name: string, ids: readonly number[]): Promise<Float32Array> {
  const [rows, cols] = opened.weights.tensors.get(name)!.shape as [number, number];
  const want = { format: 'int4', rows, cols, rotation: 'none' } as const;
  const out = new Float32Array(ids.length * cols);
  const step = alignedRowStep('int4', cols);
  for (const [i, id] of ids.entries()) {
    const row0 = id - (id % step);
    const count = Math.min(step, rows - row0);
    const q = await opened.weights.readPacked?.(name, want, { row0, rows: count });
    if (!q) throw new Error(`streamed reference: ${name} is not stored packed at int4 [${rows}, ${cols}]`);
    const w = effectiveWeights(q, count, cols, 'none'); // [count, cols]
    out.set(w.subarray((id - row0) * cols, (id - row0 + 1) * cols), i * cols);
  }
  return out;
}
