// The load progress bar: download bytes, rate and ETA, then weights placed on the GPU.
import type { ChoiceLoadEvent } from '../../src/index.js';
import { formatBytes, formatEta, formatRate } from '../format.js';
import { byId } from './dom.js';

const box = byId('load-progress', HTMLDivElement);
const bar = byId('load-bar', HTMLProgressElement);
const detail = byId('load-detail', HTMLParagraphElement);
const warning = byId('load-warning', HTMLParagraphElement);

/** Shows the bar with a first line of text. */
export function startProgress(text: string): void {
  box.hidden = false;
  bar.removeAttribute('value');
  detail.textContent = text;
  warning.hidden = true;
  warning.textContent = '';
}

/** Updates the bar from one load event. */
export function showProgress(e: ChoiceLoadEvent): void {
  if (e.kind === 'download') {
    const p = e.progress;
    bar.value = p.bytesTotal > 0 ? p.bytesDone / p.bytesTotal : 0;
    detail.textContent = `Downloading ${e.role === 'draft' ? 'the draft model' : 'the model'}: ${formatBytes(p.bytesDone)} of ${formatBytes(p.bytesTotal)} · ${formatRate(p.rate)} · ${formatEta(p.etaSeconds)} left`;
  } else if (e.kind === 'load') {
    const p = e.progress;
    if (p.phase === 'open') {
      bar.removeAttribute('value');
      detail.textContent = 'Reading the model’s config and tokenizer…';
    } else if (p.phase === 'weights' && p.total > 0) {
      bar.value = p.done / p.total;
      detail.textContent = `Placing weights on the GPU: ${p.done} of ${p.total} tensors`;
    } else if (p.phase === 'warning') {
      // Kept after loading (the bar hides): how the model was placed differs from what was asked.
      warning.hidden = false;
      warning.textContent = warning.textContent ? `${warning.textContent} ${p.message}` : p.message;
    }
  }
}

/** Hides the bar. */
export function endProgress(): void {
  box.hidden = true;
}
