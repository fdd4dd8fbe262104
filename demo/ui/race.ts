// The race panel: the plain run and the speculative run side by side, each with its output and the
// engine's figures, then whether the outputs are identical and the speed-up.
import type { DrafterKind, GenerationStats } from '../../src/index.js';
import type { RaceResult } from '../race.js';
import { byId, h } from './dom.js';

const panel = byId('race', HTMLElement);
const verdict = byId('race-verdict', HTMLParagraphElement);

const DRAFTERS: Record<DrafterKind, string> = {
  none: 'plain decoding',
  ngram: 'n-gram drafter',
  draft: 'draft model',
};

type Side = 'plain' | 'speculative';

function side(which: Side): HTMLElement {
  return byId(`race-${which}`, HTMLElement);
}

function figures(s: GenerationStats): HTMLElement {
  const fig = (key: string, label: string, value: number, text: string) =>
    h('div', {}, h('dt', {}, label), h('dd', { 'data-stat': key, 'data-value': String(value) }, text));
  return h(
    'dl',
    { class: 'stats' },
    fig('tok-s', 'Tokens/s (decode)', s.decode_tok_s, s.decode_tok_s.toFixed(1)),
    fig('per-pass', 'Tokens per target pass', s.tokens_per_pass, s.tokens_per_pass.toFixed(2)),
    fig('tokens', 'Tokens', s.completion_tokens, String(s.completion_tokens)),
  );
}

/** Shows the panel with both sides waiting: plain first, then `drafter` at `budget`. */
export function startRace(prompt: string, drafter: DrafterKind, budget: number | undefined): void {
  panel.hidden = false;
  byId('race-prompt', HTMLParagraphElement).replaceChildren('Prompt: ', h('q', {}, prompt));
  panel.dataset.state = 'running';
  const title = `${DRAFTERS[drafter]}${budget === undefined ? '' : `, tree budget ${budget}`}`;
  for (const [which, name] of [
    ['plain', 'Plain decoding (one token per pass)'],
    ['speculative', `Speculative: ${title}`],
  ] as const) {
    side(which).replaceChildren(
      h('h4', {}, name),
      h('p', { class: 'race-text', 'data-testid': `race-${which}-text` }, ''),
      h('p', { class: 'note' }, which === 'plain' ? 'Running…' : 'Waiting for the plain run…'),
    );
  }
  verdict.textContent = 'Racing: the same prompt, seed and settings, one run after the other.';
  delete verdict.dataset.identical;
}

/** The streamed text of one side. */
export function raceText(which: Side, text: string): void {
  const box = side(which);
  const p = box.querySelector('.race-text');
  if (p) p.textContent = text;
  const note = box.querySelector('.note');
  if (note) note.textContent = 'Running…';
}

/** Both runs' figures, and the verdict: identical outputs or not, and the speed-up. */
export function finishRace(r: RaceResult): void {
  panel.dataset.state = 'done';
  for (const [which, run] of [
    ['plain', r.plain],
    ['speculative', r.speculative],
  ] as const) {
    const box = side(which);
    const text = box.querySelector('.race-text');
    if (text) text.textContent = run.text;
    box.querySelector('.note')?.replaceWith(figures(run.stats));
  }
  verdict.dataset.identical = String(r.identical);
  verdict.dataset.speedup = String(r.speedup);
  const same = r.identical
    ? 'Identical outputs ✓ (checked token by token).'
    : 'The outputs differ ✗ — this should not happen: please report it.';
  const speed = `Speculation decodes ${r.speedup.toFixed(2)}× as fast as plain decoding (${r.speculative.stats.decode_tok_s.toFixed(1)} vs ${r.plain.stats.decode_tok_s.toFixed(1)} tokens/s).`;
  const why =
    r.speedup < 1
      ? ' Here drafting and verifying the trees cost more than the target passes they saved.'
      : '';
  verdict.replaceChildren(
    h('strong', {}, same),
    ' ',
    h('span', { 'data-testid': 'race-speedup' }, speed),
    why,
  );
}

/** The race ended without a result: stopped, or failed (the problem panel says why). */
export function endRace(how: 'stopped' | 'failed'): void {
  panel.dataset.state = how;
  verdict.textContent = how === 'stopped' ? 'Race stopped.' : 'The race failed.';
}

/** Says the race needs a drafter. */
export function raceNeedsDrafter(): void {
  panel.hidden = false;
  panel.dataset.state = 'idle';
  verdict.textContent =
    'Pick a speculative drafter (n-gram or draft model) to race it against plain decoding.';
}
