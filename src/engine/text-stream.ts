import type { Constraint } from '../grammar/constraint.js';
import type { DraftTreeView, FinishReason, GenerationChunk, TextCodec } from './types.js';

/**
 * Turns a growing list of token ids into text deltas. Tokens can split a UTF-8 character, so text
 * that ends in U+FFFD (an incomplete character) is held back until the next token completes it; and
 * text that could be the start of a stop string is held back until it can't.
 *
 * Each token is decoded in a short window, not with the whole completion: the window from
 * `prefixOffset` is decoded with and without the ids after `readOffset`, and the difference is
 * appended to `text` once it is complete (the scheme of `WeftTokenizer.streamDecoder`; starting both
 * decodes at the same id keeps SentencePiece's leading-space handling right). So a long completion
 * costs O(1) decode work per token instead of re-decoding everything.
 */
export class TextStream {
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  /** Text of ids[0, readOffset). */
  private text = '';
  private emitted = 0;
  /** Set once a stop string was seen: the text up to it, which has all been emitted. */
  stopped = false;

  constructor(
    private readonly decode: (ids: readonly number[]) => string,
    private readonly stops: readonly string[] = [],
  ) {}

  /** Appends tokens and returns the text that can be shown now. */
  push(ids: readonly number[]): string {
    for (const id of ids) {
      this.ids.push(id);
      const prefix = this.window(this.readOffset);
      const full = this.window(this.ids.length);
      if (full.length > prefix.length && !full.endsWith('\uFFFD')) {
        this.text += full.slice(prefix.length);
        this.prefixOffset = this.readOffset;
        this.readOffset = this.ids.length;
      }
    }
    return this.take(false);
  }

  /** Text of ids[prefixOffset, end). */
  private window(end: number): string {
    return end > this.prefixOffset ? this.decode(this.ids.slice(this.prefixOffset, end)) : '';
  }

  /** Returns whatever is still held back (end of generation). */
  flush(): string {
    return this.take(true);
  }

  private take(final: boolean): string {
    if (this.stopped) return '';
    // At the end, the ids not yet complete are shown as they decode (U+FFFD included).
    let text = final
      ? this.text + this.window(this.ids.length).slice(this.window(this.readOffset).length)
      : this.text;
    for (const s of this.stops) {
      const at = text.indexOf(s, Math.max(0, this.emitted - s.length + 1));
      if (at >= 0) {
        text = text.slice(0, at);
        this.stopped = true;
      }
    }
    let end = text.length;
    if (!final && !this.stopped) {
      while (end > this.emitted && text[end - 1] === '\uFFFD') end--;
      end = Math.max(this.emitted, end - this.heldForStop(text.slice(0, end)));
    }
    const out = text.slice(this.emitted, end);
    this.emitted = Math.max(this.emitted, end);
    return out;
  }

  /** Length of the longest suffix of `text` that is a proper prefix of a stop string. */
  private heldForStop(text: string): number {
    let held = 0;
    for (const s of this.stops) {
      for (let n = Math.min(s.length - 1, text.length); n > held; n--) {
        if (text.endsWith(s.slice(0, n))) {
          held = n;
          break;
        }
      }
    }
    return held;
  }
}

/**
 * A request's output: the tokens the target chose, turned into the chunks a request yields. A
 * token ends the request when it is an end-of-sequence id (not emitted), when its text reaches a
 * stop string, or when it is the request's last (`limit`); every emitted token advances the
 * request's constraint.
 */
export class TokenOutput {
  /** Tokens emitted so far, in order. */
  readonly ids: number[] = [];
  private readonly stream: TextStream;
  private readonly eos: Set<number>;
  private finish: FinishReason = 'length';

  /** How many tokens were emitted so far. */
  get count(): number {
    return this.ids.length;
  }

  constructor(
    codec: Pick<TextCodec, 'decode' | 'eosIds'>,
    stop: string | readonly string[] | undefined,
    private readonly limit: number,
    private readonly constraint: Pick<Constraint, 'accept'> | undefined,
  ) {
    const stops = stop === undefined ? [] : typeof stop === 'string' ? [stop] : [...stop];
    this.eos = new Set(codec.eosIds);
    this.stream = new TextStream((ids) => codec.decode(ids, { skipSpecialTokens: true }), stops);
  }

  /** The chunk of `pending` tokens (with the step's draft tree), and whether it ends the request. */
  take(
    pending: readonly number[],
    tree: DraftTreeView | undefined,
  ): { chunk: GenerationChunk; done: boolean } {
    const ids: number[] = [];
    let text = '';
    let done = false;
    for (const t of pending) {
      if (this.eos.has(t)) {
        this.finish = 'stop';
        done = true;
        break;
      }
      this.constraint?.accept(t);
      this.ids.push(t);
      ids.push(t);
      text += this.stream.push([t]);
      if (this.stream.stopped) {
        this.finish = 'stop';
        done = true;
        break;
      }
      if (this.ids.length >= this.limit) {
        done = true;
        break;
      }
    }
    const view = tree ? { tree } : {};
    return done
      ? { chunk: { ids, text: text + this.stream.flush(), finishReason: this.finish, ...view }, done }
      : { chunk: { ids, text, ...view }, done };
  }
}
