// A deterministic stand-in for a model, for testing the engine's control flow (queueing, abort,
// stop strings, cache reuse) without a forward pass. The "model" predicts next = (last * 7 + 3) % V
// over a character vocabulary, and records every forward call.

import type { TextCodec } from '../../src/engine/types.js';
import type { ForwardInput, ModelRunner, SamplerSpec } from '../../src/model/runner.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';

export const TOY_VOCAB = 'abcdefghijklmnopqrstuvwxyz .\n#';
export const TOY_EOS = TOY_VOCAB.indexOf('#');

export const toyCodec: TextCodec = {
  encode: (text) =>
    Array.from(text, (c) => {
      const i = TOY_VOCAB.indexOf(c);
      if (i < 0) throw new Error(`toy codec: no token for ${JSON.stringify(c)}`);
      return i;
    }),
  decode: (ids) => ids.map((i) => TOY_VOCAB[i]).join(''),
  eosIds: [TOY_EOS],
};

export class ToyRunner implements ModelRunner {
  readonly spec = { vocabSize: TOY_VOCAB.length, maxPositions: 4096 } as ModelSpec;
  readonly capacity: number;
  readonly calls: { tokens: number[]; kvLength: number }[] = [];
  private committed: number[] = [];
  private pending: number[] = [];
  /** Delay per forward, to let tests abort mid-stream. */
  delayMs = 0;
  disposed = false;

  /** From position `eosAfter` on, the model predicts `eosToken` (the codec's EOS by default). */
  constructor(
    capacity = 512,
    private readonly eosAfter = Infinity,
    private readonly eosToken = TOY_EOS,
  ) {
    this.capacity = capacity;
  }

  get kvLength(): number {
    return this.committed.length;
  }

  next(id: number, position: number): number {
    if (position >= this.eosAfter) return this.eosToken;
    const n = (id * 7 + 3) % TOY_VOCAB.length;
    return n === TOY_EOS ? 0 : n;
  }

  async forward(input: ForwardInput, _s: SamplerSpec, rows: 'last' | 'all'): Promise<Int32Array> {
    if (this.disposed) throw new Error('disposed');
    this.calls.push({ tokens: [...input.tokens], kvLength: this.kvLength });
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    this.pending = [...input.tokens];
    const base = this.kvLength;
    const out = input.tokens.map((t, i) => this.next(t, base + i + 1));
    return Int32Array.from(rows === 'last' ? out.slice(-1) : out);
  }

  commit(path: readonly number[]): void {
    this.committed.push(...path.map((i) => this.pending[i]!));
  }

  trim(length: number): void {
    this.committed.length = Math.min(length, this.committed.length);
  }

  dispose(): void {
    this.disposed = true;
  }
}
