import { WeftError } from '../errors.js';

/** What kind of constraint a {@link GrammarError} is about. */
export type GrammarKind = 'json_schema' | 'grammar' | 'regex';

/**
 * A constraint of a request (a JSON schema, an EBNF grammar or a regex) cannot be compiled:
 * `kind` says which, `problem` is the grammar engine's own message naming what is wrong. It lives
 * in its own module so that the page side of a worker can revive it without loading the grammar
 * engine.
 */
export class GrammarError extends WeftError {
  override readonly name = 'GrammarError';

  constructor(
    /** Which kind of constraint was refused. */
    readonly kind: GrammarKind,
    /** What is wrong with it, as the grammar engine reports it. */
    readonly problem: string,
    options?: { cause?: unknown },
  ) {
    super(`invalid ${kind}: ${problem}`, options);
  }
}
