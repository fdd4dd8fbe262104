import { argmax } from '../../src/kernels/sample/gumbel.js';
import type { ReferenceRunner } from '../../src/model/reference/reference.js';

/**
 * Greedy generation from scratch on the CPU reference: the `n` argmax tokens (lowest id on ties)
 * that follow `prompt`. The cache is emptied first and left holding the prompt and all but the
 * last generated token.
 */
export function greedy(model: ReferenceRunner, prompt: readonly number[], n: number): number[] {
  const V = model.spec.vocabSize;
  const logits = model.logitsFor(prompt);
  const out: number[] = [];
  let next = argmax(logits.subarray(logits.length - V));
  for (let i = 0; i < n; i++) {
    out.push(next);
    if (i + 1 < n) next = argmax(model.prefill([next]));
  }
  return out;
}
