// What one request settles before its first token, and how soon a second device loss ends it.

import { InvalidInputError } from '../errors.js';
import type { Constraint } from '../grammar/constraint.js';
import type { SamplerSpec } from '../model/runner.js';
import type { DecodeTally } from './decode-stats.js';
import type { TokenOutput } from './text-stream.js';
import type { GenerateOptions } from './types.js';

/**
 * A loss this soon after the engine recovered from one within a request (ms) ends the request:
 * a device that keeps being lost is not worth placing the model on again and again.
 */
export const RELOSS_WINDOW_MS = 10_000;

/** What one request settles before its first token, shared by its runs (see Engine.decode). */
export interface Request {
  readonly prompt: readonly number[];
  readonly o: GenerateOptions;
  readonly constraint: Constraint | undefined;
  readonly sampler: SamplerSpec;
  /** Tokens the request may emit (max_tokens, and the context's room). */
  readonly limit: number;
  readonly output: TokenOutput;
  readonly tally: DecodeTally;
  readonly abortCheck: () => void;
  /** Prompt tokens whose cached rows the request's first run reused. */
  reused: number | undefined;
  /** Bytes of weights one pass of the request's drafter reads (a model drafter on the GPU). */
  drafterBytes: number | undefined;
}

/** The step options of a request, checked: the decode loop, the tree budget, speculation, jump-forward. */
export function stepOptions(o: GenerateOptions): {
  loop: 'device' | 'host';
  budget: number;
  speculation: 'always' | 'adaptive';
  jumpForward: boolean;
} {
  const loop = o.decodeLoop ?? 'device';
  if (loop !== 'device' && loop !== 'host')
    throw new InvalidInputError(`decodeLoop must be "device" or "host", got ${JSON.stringify(loop)}`);
  const budget = o.treeBudget ?? 8;
  if (!Number.isInteger(budget) || budget < 1 || budget > 32)
    throw new InvalidInputError(`tree budget must be an integer in 1..32, got ${budget}`);
  const speculation = o.speculation ?? 'always';
  if (speculation !== 'always' && speculation !== 'adaptive')
    throw new InvalidInputError(
      `speculation must be "always" or "adaptive", got ${JSON.stringify(speculation)}`,
    );
  const jumpForward = o.jumpForward ?? true;
  if (typeof jumpForward !== 'boolean')
    throw new InvalidInputError(`jumpForward must be true or false, got ${JSON.stringify(jumpForward)}`);
  return { loop, budget, speculation, jumpForward };
}
