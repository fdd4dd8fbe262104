import { describe, expect, it } from 'vitest';
import { longestAcceptedPath } from '../../../src/decode/tree.js';
import { InvalidInputError } from '../../../src/errors.js';
import { argmax } from '../../../src/kernels/sample/gumbel.js';
import { ReferenceKvCache, ReferenceRunner } from '../../../src/model/reference/reference.js';
import type { ModelSpec } from '../../../src/model/spec/spec.js';
import { weightShapes } from '../../../src/model/tensors.js';
import { chainParents, draftTree, pathTo } from '../../../src/model/tree.js';
import { mapWeights, type NamedTensors, readWeights, type Tensor } from '../../../src/model/weights.js';
import { randomWeights, seededRandom, tinySpecs } from '../../fixtures/reference.js';
import { greedy } from '../../helpers/reference.js';

// Consistency of the one forward across its uses. The reference computes every row with the same
// loop order whatever else shares the call, and attends to keys in slot order, so these properties
// hold bit for bit; the tests demand exact equality (the GPU forward's tests use tolerances).

/** Rows [from, to) of a [T, V] logits array. */
function rows(logits: Float32Array, V: number, from: number, to: number): Float32Array {
  return logits.slice(from * V, to * V);
}

/** A random tree in DFS order: each node's parent is drawn from the path to the previous node. */
function randomDfsParents(rand: () => number, n: number): number[] {
  const parents: number[] = [];
  const path: number[] = [];
  for (let i = 0; i < n; i++) {
    const keep = Math.floor(rand() * (path.length + 1));
    path.length = keep;
    parents.push(keep === 0 ? -1 : path[keep - 1]!);
    path.push(i);
  }
  return parents;
}

function randomTokens(rand: () => number, n: number, V: number): number[] {
  return Array.from({ length: n }, () => Math.floor(rand() * V));
}

for (const [name, spec] of Object.entries(tinySpecs)) {
  describe(`reference model (${name})`, () => {
    const V = spec.vocabSize;
    const source = randomWeights(spec, 100);

    it('decode after prefill, and chunked prefill in 3s, equal one-shot prefill at every position', () => {
      const rand = seededRandom(1);
      const ids = randomTokens(rand, 11, V);
      const model = new ReferenceRunner(spec, source);
      const full = model.logitsFor(ids);
      expect(model.kvLength).toBe(11);

      model.trim(0);
      const parts = [model.prefill(ids.slice(0, 4))];
      for (const id of ids.slice(4)) parts.push(model.prefill([id]));
      expect(concat(parts)).toEqual(full);

      model.trim(0);
      const chunks: Float32Array[] = [];
      for (let i = 0; i < ids.length; i += 3) chunks.push(model.prefill(ids.slice(i, i + 3)));
      expect(concat(chunks)).toEqual(full);
      // Sanity: logits vary with position (so equality is not vacuous).
      expect(rows(full, V, 0, 1)).not.toEqual(rows(full, V, 1, 2));
    });

    it('tree verification: each node’s logits equal running its root-to-node path as a sequence', () => {
      const rand = seededRandom(2);
      const model = new ReferenceRunner(spec, source);
      const oracle = new ReferenceRunner(spec, source);
      for (let trial = 0; trial < 3; trial++) {
        const prefix = randomTokens(rand, 2 + trial * 3, V);
        const parents = randomDfsParents(rand, 5 + trial * 4);
        const tokens = randomTokens(rand, parents.length, V);
        const tree = draftTree(parents);
        model.logitsFor(prefix);
        const logits = model.logits({ tokens, parents });
        expect(model.kvLength).toBe(prefix.length); // nothing committed
        parents.forEach((_, i) => {
          const path = pathTo(tree, i).map((j) => tokens[j]!);
          const seq = oracle.logitsFor([...prefix, ...path]);
          const T = prefix.length + path.length;
          expect(rows(logits, V, i, i + 1)).toEqual(rows(seq, V, T - 1, T));
        });
      }
    });

    it('commitPath after a tree, then decoding on, equals running the accepted sequence from scratch', () => {
      const rand = seededRandom(3);
      const model = new ReferenceRunner(spec, source);
      const oracle = new ReferenceRunner(spec, source);
      const prefix = randomTokens(rand, 5, V);
      const parents = randomDfsParents(rand, 12);
      const tokens = randomTokens(rand, parents.length, V);
      const tree = draftTree(parents);
      // The deepest node's path (the longest), so rows really move.
      const deepest = argmax(tree.depth);
      const path = pathTo(tree, deepest);
      model.logitsFor(prefix);
      model.logits({ tokens, parents });
      model.commit(path);
      expect(model.kvLength).toBe(prefix.length + path.length);
      const more = randomTokens(rand, 3, V);
      const after = model.prefill(more);
      const accepted = [...prefix, ...path.map((j) => tokens[j]!)];
      const seq = oracle.logitsFor([...accepted, ...more]);
      expect(after).toEqual(rows(seq, V, accepted.length, accepted.length + more.length));

      // Trim rolls back: redo the last two tokens and get the same logits.
      model.trim(model.kvLength - 2);
      expect(model.prefill(more.slice(1))).toEqual(rows(seq, V, accepted.length + 1, accepted.length + 3));
    });

    it('greedy speculative decoding with random trees emits exactly plain greedy decoding', () => {
      const rand = seededRandom(4);
      const prompt = randomTokens(rand, 4, V);
      const n = 24;
      const plain = greedy(new ReferenceRunner(spec, source), prompt, n);

      const model = new ReferenceRunner(spec, source);
      const out: number[] = [];
      // Node 0 of every tree is the pending token (the last emitted one, not yet in the cache); the
      // drafts hang below it and copy the plain answer 60% of the time, so paths get accepted.
      let pending = argmax(rows(model.logitsFor(prompt), V, prompt.length - 1, prompt.length));
      let acceptedDrafts = 0;
      while (out.length < n) {
        out.push(pending);
        if (out.length === n) break;
        const parents = [-1, ...randomDfsParents(rand, 6).map((p) => (p < 0 ? 0 : p + 1))];
        const tree = draftTree(parents);
        const tokens = parents.map((_, i) => {
          if (i === 0) return pending;
          const at = out.length - 1 + tree.depth[i]!;
          return rand() < 0.6 && at < n ? plain[at]! : Math.floor(rand() * V);
        });
        const logits = model.logits({ tokens, parents });
        const choices = { root: pending, nodes: parents.map((_, i) => argmax(rows(logits, V, i, i + 1))) };
        const got = longestAcceptedPath(tree, tokens, choices);
        model.commit(got.nodes);
        // got.tokens = [pending, accepted drafts..., next pending]
        for (const t of got.tokens.slice(1, -1)) if (out.length < n) out.push(t);
        acceptedDrafts += got.nodes.length - 1;
        pending = got.tokens[got.tokens.length - 1]!;
        expect(model.kvLength).toBe(prompt.length + out.length);
      }
      expect(out.slice(0, n)).toEqual(plain);
      expect(acceptedDrafts).toBeGreaterThan(3);
    });

    it('interleaved RoPE on llama.cpp-permuted Q/K weights equals half RoPE on the originals', () => {
      const ispec: ModelSpec = { ...spec, rope: { ...spec.rope, layout: 'interleaved' } };
      const permuted = permuteQk(spec, source);
      const tokens = randomTokens(seededRandom(5), 8, V);
      const half = new ReferenceRunner(spec, source).logitsFor(tokens);
      const inter = new ReferenceRunner(ispec, permuted).logitsFor(tokens);
      let worst = 0;
      for (let i = 0; i < half.length; i++)
        worst = Math.max(worst, Math.abs(half[i]! - inter[i]!) / (1 + Math.abs(half[i]!)));
      expect(worst).toBeLessThan(1e-5);
      // The layouts differ: interleaved RoPE on the unpermuted weights gives other logits.
      const wrong = new ReferenceRunner(ispec, source).logitsFor(tokens);
      expect(Math.max(...wrong.map((w, i) => Math.abs(w - half[i]!)))).toBeGreaterThan(1e-3);
    });
  });
}

/** Concatenates [T_i, V] logits blocks. */
function concat(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * llama.cpp's converter permutation of q/k projections (and anything per q/k output row: biases,
 * q/k-norm weights) for interleaved RoPE: within each head of width d, new row 2i + j is old row
 * j * d/2 + i, so pairs (i, i + d/2) become (2i, 2i + 1).
 */
function permuteQk(spec: ModelSpec, source: NamedTensors): NamedTensors {
  const d = spec.headDim;
  const permuteRows = (t: Tensor, rowWidth: number): Tensor => {
    const data = new Float32Array(t.data.length);
    const heads = t.data.length / rowWidth / d;
    for (let h = 0; h < heads; h++)
      for (let i = 0; i < d / 2; i++)
        for (let j = 0; j < 2; j++) {
          const from = (h * d + j * (d / 2) + i) * rowWidth;
          data.set(t.data.subarray(from, from + rowWidth), (h * d + 2 * i + j) * rowWidth);
        }
    return { shape: t.shape, data };
  };
  const record: Record<string, Tensor> = {};
  for (const [name, shape] of weightShapes(spec)) {
    const t = source.get(name);
    const qk = /self_attn\.[qk]_(proj|norm)\./.test(name);
    record[name] = qk ? permuteRows(t, shape.length === 2 ? shape[1]! : 1) : t;
  }
  return mapWeights(record);
}

describe('weights and input checks', () => {
  const spec = tinySpecs.qwen2;
  const source = randomWeights(spec, 7);

  it('names the tensor that is missing or mis-shaped', () => {
    const record: Record<string, Tensor> = {};
    for (const name of weightShapes(spec).keys()) record[name] = source.get(name);
    const { 'model.layers.1.self_attn.k_proj.bias': _dropped, ...missing } = record;
    expect(() => readWeights(spec, mapWeights(missing))).toThrow(
      /missing tensor model\.layers\.1\.self_attn\.k_proj\.bias/,
    );
    const bad = { ...record, 'model.norm.weight': { shape: [5], data: new Float32Array(5) } };
    expect(() => new ReferenceRunner(spec, mapWeights(bad))).toThrow(/model\.norm\.weight has shape \[5\]/);
    const short = { ...record, 'model.norm.weight': { shape: [spec.hidden], data: new Float32Array(3) } };
    expect(() => readWeights(spec, mapWeights(short))).toThrow(InvalidInputError);
    // Tied: no lm_head.weight needed, the head is the embedding.
    const w = readWeights(spec, mapWeights(record));
    expect(w.lmHead).toBe(w.embed);
    expect(weightShapes(tinySpecs.llama).get('lm_head.weight')).toEqual([37, 32]);
    expect(weightShapes(tinySpecs.qwen3).get('model.layers.0.self_attn.q_norm.weight')).toEqual([10]);
  });

  it('random test weights are a pure function of the seed', () => {
    const name = 'model.layers.1.mlp.down_proj.weight';
    expect(randomWeights(spec, 7).get(name).data).toEqual(source.get(name).data);
    expect(randomWeights(spec, 8).get(name).data).not.toEqual(source.get(name).data);
  });

  it('rejects bad forward inputs and bad specs with the values', () => {
    const model = new ReferenceRunner(spec, source, { capacity: 8 });
    expect(() => model.logits({ tokens: [1, 2], parents: [-1] })).toThrow(InvalidInputError);
    expect(() => model.logits({ tokens: [] })).toThrow(InvalidInputError);
    expect(() => model.logits({ tokens: [spec.vocabSize] })).toThrow(/tokens\[0\] = 41/);
    expect(() => model.logits({ tokens: chainParents(9).map(() => 1) })).toThrow(/slot 8/); // over capacity
    expect(() => model.logits({ tokens: [1, 2], parents: [-1, 1] })).toThrow(/parents\[1\] = 1/);
    model.prefill([1, 2]);
    expect(() => model.cache.commitPath([1])).toThrow(/slot 1/); // below the committed prefix
    expect(() => model.prefill(chainParents(7).map(() => 1))).toThrow(/slot 8/); // over capacity
    expect(() => model.commit([0])).toThrow(/node 0 is not in the last forward/);
    expect(() => model.trim(3)).toThrow(InvalidInputError);
    expect(() => new ReferenceRunner({ ...spec, kvHeads: 4 }, source)).toThrow(/not a multiple/);
    expect(() => new ReferenceKvCache(1, 4, 0)).toThrow(InvalidInputError);
  });
});
