// What a model's mixture blocks take on the GPU (BlockKind.footprint): every expert's gate, up and
// down as packed (under an expert budget, the slots of each layer's GPU cache), the f32 router (and selection bias), the shared expert, the norms, and the
// scratch of one pass as gpu.ts allocates it: the routing table and weights, the route kernel's
// logits, each choice's gate, up and product rows (Gemma 4's dense MLP reuses them: as wide as the
// wider) and down rows, the shared expert's rows, and the mixture's own output row where it is normed.
import { routeTableLayout, routeWeightWords } from '../../../kernels/moe/table.js';
import { packedBytes, type WeightFormat } from '../../../quant/formats.js';
import type { ModelSpec } from '../../spec/spec.js';
import { MAX_FORWARD_TOKENS } from '../gpu.js';
import type { FootprintOptions, KindFootprint } from '../kind.js';
import { type MoeBlock, moeOf } from './block.js';

/** Bytes of one expert's gate, up and down in `format`. */
export function expertBytes(spec: ModelSpec, format: WeightFormat): number {
  const H = spec.hidden;
  const I = moeOf(spec).intermediate;
  return 2 * packedBytes(format, I, H) + packedBytes(format, H, I);
}

/** The bytes of a model's mixture blocks (see BlockKind.footprint). */
export function moeFootprint(
  spec: ModelSpec,
  blocks: readonly MoeBlock[],
  format: WeightFormat,
  o: FootprintOptions,
): KindFootprint {
  if (blocks.length === 0) return { weights: 0, kvCache: 0, state: 0, activations: 0, bound: [] };
  const m = moeOf(spec);
  const H = spec.hidden;
  const Is = m.sharedIntermediate;
  const shared = Is === undefined ? 0 : 2 * packedBytes(format, Is, H) + packedBytes(format, H, Is) + 4 * H;
  // Under an expert budget, each layer's GPU cache holds what fits of it (the placer's slots).
  const each = expertBytes(spec, format);
  const fit = o.expertBudget === undefined ? m.experts : Math.floor(o.expertBudget / blocks.length / each);
  const perBlock =
    Math.min(m.experts, fit) * each +
    4 * m.experts * H + // router
    (m.selectionBias ? 4 * m.experts : 0) +
    shared +
    4 * H * (spec.sandwichNorms ? 2 : 1) +
    (m.scaledRouterNorm ? 4 * H : 0) +
    (m.perExpertScale ? 4 * m.experts : 0) +
    // Gemma 4's dense MLP beside the experts, its input norm and the two output norms.
    (m.besideDense ? 3 * packedBytes(format, spec.intermediate, H) + 3 * 4 * H : 0);
  const T = MAX_FORWARD_TOKENS;
  const choices = T * m.topK;
  const shape = { experts: m.experts, topK: m.topK, maxRows: T };
  const rows = Math.max(choices * m.intermediate, m.besideDense ? T * spec.intermediate : 0);
  const scratch =
    4 * routeTableLayout(shape).words +
    4 * routeWeightWords(shape, Is !== undefined) +
    4 * T * m.experts + // the route kernel's logits
    4 * 3 * rows + // gate, up, act(gate) · up
    4 * choices * H + // each choice's down
    (Is ? 4 * T * (3 * Is + H) : 0) +
    (m.besideDense || spec.sandwichNorms ? 4 * T * H : 0);
  return { weights: blocks.length * perBlock, kvCache: 0, state: 0, activations: scratch, bound: [] };
}
