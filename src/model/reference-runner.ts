import { InvalidInputError } from '../errors.js';
import type { ModelSpec } from '../formats/spec.js';
import type { TensorReader } from '../formats/weft-checkpoint.js';
import type { KvFormat } from '../kernels/kv/kv.js';
import { sampleRef } from '../kernels/sample/gumbel.js';
import { ReferenceModel } from './reference.js';
import type { ForwardInput, ModelRunner, SamplerSpec } from './runner.js';
import { draftTree } from './tree.js';
import { mapWeights, type Tensor } from './weights.js';

/**
 * Reads every tensor of a checkpoint as f32 in Hugging Face layout (for the CPU reference; small
 * models only): safetensors values as stored, GGUF blocks dequantized, weft-q matrices as the
 * values they multiply by (dequantized, un-rotated, unpadded).
 */
export async function readAllF32(weights: TensorReader): Promise<Record<string, Tensor>> {
  const out: Record<string, Tensor> = {};
  for (const [name, info] of weights.tensors)
    out[name] = { shape: info.shape, data: await weights.readF32(name) };
  return out;
}

/**
 * Runs the plain-TS reference forward pass as a {@link ModelRunner} (CPU, slow, exact): the oracle
 * the GPU runner is compared with, and `--device cpu` in the CLI.
 */
export class ReferenceRunner implements ModelRunner {
  readonly model: ReferenceModel;
  readonly capacity: number;
  private lastTokens = 0;
  /** Logits [R, vocab] of the rows the last forward scored. */
  private scored: Float32Array = new Float32Array(0);

  constructor(
    readonly spec: ModelSpec,
    tensors: Record<string, Tensor>,
    capacity = Math.min(spec.maxPositions, 4096),
    kvFormat: KvFormat = 'f32',
  ) {
    this.capacity = capacity;
    this.model = new ReferenceModel(spec, mapWeights(tensors), { capacity, kvFormat });
  }

  get kvLength(): number {
    return this.model.cache.length;
  }

  async forward(input: ForwardInput, sampler: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    const T = input.tokens.length;
    if (T < 1) throw new InvalidInputError('forward: no tokens');
    const parents = input.parents ?? input.tokens.map((_, i) => i - 1);
    const tree = draftTree(parents);
    const base = this.kvLength;
    const logits = this.model.verifyTree(parents, input.tokens);
    this.lastTokens = T;
    const V = this.spec.vocabSize;
    const picked = rows === 'last' ? [T - 1] : input.tokens.map((_, i) => i);
    this.scored = rows === 'last' ? logits.slice((T - 1) * V, T * V) : logits;
    // The token after node i stands at position base + depth(i) + 1.
    return Int32Array.from(picked, (i) =>
      sampleRef(logits.subarray(i * V, (i + 1) * V), sampler.seed, base + tree.depth[i]! + 1, sampler),
    );
  }

  /** Logits [R, vocab] of the rows the last forward scored, or of `rows` (see {@link ModelRunner.lastLogits}). */
  async lastLogits(rows?: readonly number[]): Promise<Float32Array> {
    if (!rows) return this.scored.slice();
    const V = this.spec.vocabSize;
    const scoredRows = this.scored.length / V;
    const out = new Float32Array(rows.length * V);
    rows.forEach((r, i) => {
      if (!Number.isInteger(r) || r < 0 || r >= scoredRows)
        throw new InvalidInputError(`lastLogits: row ${r} is not one of the ${scoredRows} scored rows`);
      out.set(this.scored.subarray(r * V, (r + 1) * V), i * V);
    });
    return out;
  }

  commit(path: readonly number[]): void {
    for (const i of path) {
      if (!Number.isInteger(i) || i < 0 || i >= this.lastTokens)
        throw new InvalidInputError(
          `commit: node ${i} is not in the last forward (${this.lastTokens} tokens)`,
        );
    }
    this.model.acceptPath(path);
    this.lastTokens = 0;
  }

  trim(length: number): void {
    this.model.cache.trim(length);
  }

  dispose(): void {}
}
