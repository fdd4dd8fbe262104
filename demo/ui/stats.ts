// Live statistics of the current request: measured on the page while tokens stream, replaced by
// the engine's own figures (`lastStats`) when the request finishes.
import type { GenerationStats } from '../../src/index.js';
import { formatMs } from '../format.js';
import { byId, h } from './dom.js';

const list = byId('stats', HTMLDListElement);

/** What the page measured: request start, first token, tokens so far. */
export interface PageTiming {
  readonly start: number;
  firstToken: number | undefined;
  tokens: number;
  /** Tokens per target pass, from the draft trees seen (speculation only). */
  passes: number;
}

function row(key: string, label: string, value: string): HTMLElement {
  return h('div', {}, h('dt', {}, label), h('dd', { 'data-stat': key }, value));
}

/** Redraws the stats from the page's timing and, once finished, the engine's figures. */
export function showStats(t: PageTiming, final?: GenerationStats, state = 'generating'): void {
  const now = performance.now();
  const ttft = t.firstToken === undefined ? Number.NaN : t.firstToken - t.start;
  const decodeSeconds = t.firstToken === undefined ? 0 : (now - t.firstToken) / 1000;
  const liveRate = decodeSeconds > 0 && t.tokens > 1 ? (t.tokens - 1) / decodeSeconds : Number.NaN;
  const rate = final ? final.decode_tok_s : liveRate;
  const perPass = final ? final.tokens_per_pass : t.passes > 0 ? t.tokens / t.passes : Number.NaN;
  list.dataset.state = state;
  list.replaceChildren(
    row('state', 'State', state),
    row('tokens', 'Tokens', String(final?.completion_tokens ?? t.tokens)),
    row('tok-s', 'Tokens/s', Number.isFinite(rate) ? rate.toFixed(1) : '—'),
    row('ttft', 'Time to first token', formatMs(final ? final.time_to_first_token_ms : ttft)),
    row(
      'per-pass',
      'Tokens per target pass',
      Number.isFinite(perPass) && perPass > 0 ? perPass.toFixed(2) : '—',
    ),
    ...(final
      ? [
          row('prompt', 'Prompt tokens', `${final.prompt_tokens} (${final.cached_prompt_tokens} reused)`),
          row('passes', 'Target passes', String(final.target_passes)),
        ]
      : []),
  );
}
