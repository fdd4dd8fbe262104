// Live statistics of the current request: tokens and rates measured on the page as chunks arrive,
// passes and tokens per pass from the engine's own counts (each chunk carries them), replaced by
// the engine's figures (`lastStats`) when the request finishes. And the model's GPU memory.
import type { GenerationChunk, GenerationProgress, GenerationStats } from '../../src/index.js';
import { formatBytes, formatMs } from '../format.js';
import { byId, h } from './dom.js';

const list = byId('stats', HTMLDListElement);
const memory = byId('gpu-memory', HTMLParagraphElement);

/** The window of the recent decoding rate, ms. */
const RECENT_MS = 1000;

/** What the page saw of a request: when it started, when tokens arrived, the engine's counts. */
export class LiveFigures {
  readonly start = performance.now();
  firstToken: number | undefined;
  tokens = 0;
  /** The engine's counts as of the latest chunk. */
  progress: GenerationProgress | undefined;
  /** Arrival time and token count of each chunk after the first token. */
  private readonly arrivals: { t: number; n: number }[] = [];

  /** Takes in a chunk as it arrives. */
  add(chunk: GenerationChunk): void {
    const t = performance.now();
    if (this.firstToken === undefined) {
      this.firstToken = t;
      // The first token ends the prompt's prefill: the rates count the tokens after it.
      if (chunk.ids.length > 1) this.arrivals.push({ t, n: chunk.ids.length - 1 });
    } else if (chunk.ids.length > 0) this.arrivals.push({ t, n: chunk.ids.length });
    this.tokens += chunk.ids.length;
    if (chunk.progress) this.progress = chunk.progress;
    while (this.arrivals.length > 0 && this.arrivals[0]!.t <= t - RECENT_MS) this.arrivals.shift();
  }

  /** Tokens per second after the first token, over the request so far. */
  overallRate(now: number): number {
    if (this.firstToken === undefined || now <= this.firstToken || this.tokens < 2) return Number.NaN;
    return (this.tokens - 1) / ((now - this.firstToken) / 1000);
  }

  /** Tokens per second over the last second (since the first token, when that is more recent). */
  recentRate(now: number): number {
    if (this.firstToken === undefined || now <= this.firstToken) return Number.NaN;
    const from = Math.max(now - RECENT_MS, this.firstToken);
    const n = this.arrivals.reduce((sum, a) => sum + (a.t > from ? a.n : 0), 0);
    return n / ((now - from) / 1000);
  }
}

/** A figure: `text` shows `value` (kept whole in data-value for tests); NaN shows as a dash. */
function row(key: string, label: string, text: string, value?: number): HTMLElement {
  const known = value === undefined || Number.isFinite(value);
  const attrs: Record<string, string> = { 'data-stat': key };
  if (value !== undefined) attrs['data-value'] = String(value);
  return h('div', {}, h('dt', {}, label), h('dd', attrs, known ? text : '—'));
}

/**
 * Redraws the stats from what the page saw and, once finished, the engine's figures. Tokens per
 * pass is the engine's running count (decode tokens over decode passes), never a page estimate.
 */
export function showStats(f: LiveFigures, final?: GenerationStats, state = 'generating'): void {
  const now = performance.now();
  const p = f.progress;
  const ttft = final
    ? final.time_to_first_token_ms
    : f.firstToken === undefined
      ? Number.NaN
      : f.firstToken - f.start;
  const rate = final ? final.decode_tok_s : f.overallRate(now);
  const recent = f.recentRate(now);
  const perPass = final
    ? final.tokens_per_pass
    : p && p.decodePasses > 0
      ? p.decodeTokens / p.decodePasses
      : Number.NaN;
  const passes = final ? final.target_passes : (p?.targetPasses ?? Number.NaN);
  const tokens = final?.completion_tokens ?? f.tokens;
  list.dataset.state = state;
  list.replaceChildren(
    row('state', 'State', state),
    row('tokens', 'Tokens', String(tokens), tokens),
    row('tok-s', 'Tokens/s (overall)', rate.toFixed(1), rate),
    row('tok-s-recent', 'Tokens/s (last second)', recent.toFixed(1), recent),
    row('ttft', 'Time to first token', formatMs(ttft), ttft),
    row('per-pass', 'Tokens per target pass', perPass.toFixed(2), perPass > 0 ? perPass : Number.NaN),
    row('passes', 'Target passes (prefill included)', String(passes), passes),
    ...(final
      ? [
          row(
            'prompt',
            'Prompt tokens',
            `${final.prompt_tokens} (${final.cached_prompt_tokens} reused)`,
            final.prompt_tokens,
          ),
        ]
      : []),
  );
}

/**
 * The model's GPU memory from the engine's figures of its last request: the weights one forward
 * reads (every matrix, one embedding row), the draft model's, and the KV cache's buffers.
 */
export function showGpuMemory(stats: GenerationStats | undefined): void {
  if (!stats || stats.kv_bytes === undefined || stats.weight_bytes_per_pass === undefined) {
    memory.textContent = stats ? 'GPU memory: not on a GPU.' : 'GPU memory: measured at the first request.';
    delete memory.dataset.weights;
    delete memory.dataset.kv;
    return;
  }
  const draft = stats.draft_weight_bytes_per_pass;
  memory.dataset.weights = String(stats.weight_bytes_per_pass);
  memory.dataset.kv = String(stats.kv_bytes);
  memory.replaceChildren(
    'GPU memory: weights ',
    h('strong', {}, formatBytes(stats.weight_bytes_per_pass)),
    draft === undefined ? '' : ` (draft model ${formatBytes(draft)})`,
    ' · KV cache ',
    h('strong', {}, formatBytes(stats.kv_bytes)),
    '.',
  );
  memory.title =
    'Weights: the packed matrices one forward pass reads (every layer, the output head, one embedding row). KV cache: the keys and values of every attention layer, for the whole context.';
}
