// A quantized mixture-of-experts GGUF on the GPU (test/helpers/moe-gguf.ts): loaded at its own
// format (the default quant), each expert stack keeps its stored GGML type (Q4_K gate and up, Q6_K
// down where the mix says so), every expert copied from the stack's blocks (never decoded to f32);
// the logits are the reference's on the same blocks dequantized, and a pass reads the file's bytes.
import { describe, expect, it } from 'vitest';
import type { TensorReader } from '../../src/formats/weft-checkpoint.js';
import { createGpuRunner } from '../../src/model/gpu/runner.js';
import { destroyWeights, placeWeights } from '../../src/model/gpu/weights.js';
import { referenceTensors } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { GREEDY } from '../../src/model/runner.js';
import { mapWeights } from '../../src/model/weights.js';
import type { WeightFormat } from '../../src/quant/formats.js';
import { storedWeftFormat } from '../../src/quant/ggml-repack.js';
import { relErr } from '../helpers/compare.js';
import { gpu } from '../helpers/gpu.js';
import { expertParts, MOE_GGUF_MIXES, type MoeGgufMix, moeGguf } from '../helpers/moe-gguf.js';

const PROMPT = [5, 17, 99, 3, 250, 11, 42, 8, 300, 77];

/** `weights` with each matrix `readPacked` gave (a copy of stored rows) recorded with its format. */
function counting(weights: TensorReader): { weights: TensorReader; copied: Map<string, WeightFormat> } {
  const copied = new Map<string, WeightFormat>();
  return {
    copied,
    weights: {
      ...weights,
      readPacked: async (name, want, range) => {
        const m = await weights.readPacked?.(name, want, range);
        if (m) copied.set(name, m.format);
        return m;
      },
    },
  };
}

describe('a quantized qwen3_moe GGUF on the GPU', () => {
  it.each(Object.keys(MOE_GGUF_MIXES) as MoeGgufMix[])(
    '%s: the experts placed as stored, logits and greedy ids the reference’s on the same blocks, the file’s bytes per pass',
    async (mix) => {
      const { file, opened } = await moeGguf(mix);
      const { spec } = opened;
      const m = spec.moe!;
      const quant = opened.packed!.format;
      const typeOf = (stack: string) => storedWeftFormat(file.tensors.get(stack)!.type);
      // Each layer's stacks (gate | up, down) in their files' types, whatever the quant.
      const ctx = await gpu();
      const allocated = await placeWeights(ctx, opened, { quant, rotate: 'none', allocateOnly: true });
      const placed = allocated.blocks.flatMap((b) => (b.experts ?? []).map((s) => s.format));
      destroyWeights(allocated);
      const stored = Array.from({ length: spec.layers }, (_, l) => {
        const [gate, up, down] = ['gate', 'up', 'down'].map((p) => typeOf(`blk.${l}.ffn_${p}_exps.weight`));
        expect(gate).toBe(up);
        return [gate, down];
      }).flat();
      console.log(`[${mix}] quant ${quant}; expert stacks ${placed.join(', ')}`);
      expect(placed).toEqual(stored);
      expect(placed).toContain('q6_k');

      const { weights, copied } = counting(opened.weights);
      const dev = await createGpuRunner({ ...opened, weights }, { quant, capacity: 32, gpu: ctx });
      const got = await dev.forward({ tokens: PROMPT }, GREEDY, 'all');
      const logits = await dev.lastLogits();
      const bytesPerPass = dev.weightBytesPerPass;
      dev.dispose();
      // Every expert was copied from its stack's rows in the stack's type: none decoded to f32 (the
      // largest f32 read is a router [E, H]).
      for (const { name, stack } of expertParts(spec.layers, m.experts))
        expect(copied.get(name), name).toBe(typeOf(stack));
      expect(opened.weights.stats!.largestF32).toBe(m.experts * spec.hidden);

      const ref = new ReferenceRunner(spec, mapWeights(await referenceTensors(opened, quant, 'none')), {
        capacity: 32,
      });
      const want = await ref.forward({ tokens: PROMPT }, GREEDY, 'all');
      expect(relErr(logits, await ref.lastLogits())).toBeLessThan(1e-4);
      expect(Array.from(got)).toEqual(Array.from(want));

      // A pass reads every linear and the head (the tied embedding) as stored, one embedding row,
      // and topK experts of each stack: the file's bytes (routers are f32 vectors, not linears).
      const embed = file.tensors.get('token_embd.weight')!;
      const tied = !file.tensors.has('output.weight');
      let bytes = embed.byteLength / embed.ne[1]!;
      for (const t of file.tensors.values()) {
        const linear = t.ne.length === 2 && !t.name.includes('ffn_gate_inp') && (t !== embed || tied);
        if (linear) bytes += t.byteLength;
        if (t.ne.length === 3) bytes += (m.topK * t.byteLength) / m.experts;
      }
      console.log(`[${mix}] weight bytes per pass ${bytesPerPass}, the file's ${bytes}`);
      expect(bytesPerPass).toBe(bytes);
    },
  );
});
