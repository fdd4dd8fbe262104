// The transcript: a conversation's turns, each reply with Copy and (the last one) Regenerate
// buttons. The latest reply's text carries data-testid="output". It scrolls; while a reply
// streams it follows the end unless the reader has scrolled up.
import type { Conversation, Turn } from '../conversations.js';
import { isReply } from '../conversations.js';
import { byId, h } from './dom.js';

const box = byId('transcript', HTMLDivElement);

/** What the reply buttons do, by the turn's index in the conversation. */
export interface TranscriptActions {
  copy(index: number): Promise<void>;
  regenerate(index: number): void;
}

function drawTurn(turn: Turn, index: number, last: boolean, actions: TranscriptActions): HTMLElement {
  if (!isReply(turn)) return h('div', { class: `turn ${turn.kind}` }, turn.text);
  const text = h('span', { class: 'text' }, turn.text);
  if (turn.state) text.dataset.state = turn.state;
  if (last) text.dataset.testid = 'output';
  const copy = h('button', { type: 'button', class: 'copy', 'aria-label': 'Copy this reply' }, 'Copy');
  copy.addEventListener('click', () => {
    void actions.copy(index).then(
      () => flash(copy, 'Copied'),
      () => flash(copy, 'Copy failed'),
    );
  });
  const buttons: HTMLElement[] = [copy];
  if (last) {
    const again = h(
      'button',
      {
        type: 'button',
        class: 'regenerate',
        'data-testid': 'regenerate',
        'aria-label': 'Regenerate this reply',
      },
      'Regenerate',
    );
    again.addEventListener('click', () => actions.regenerate(index));
    buttons.push(again);
  }
  const lead = turn.given ? [h('span', { class: 'given' }, turn.given)] : [];
  return h(
    'div',
    { class: `turn ${turn.kind}`, 'data-turn': String(index) },
    ...lead,
    text,
    h('div', { class: 'actions' }, ...buttons),
  );
}

function flash(button: HTMLElement, label: string): void {
  const before = button.textContent;
  button.textContent = label;
  setTimeout(() => {
    button.textContent = before;
  }, 1500);
}

/** Draws every turn of `conversation`, scrolled to the end. */
export function drawTranscript(conversation: Conversation, actions: TranscriptActions): void {
  const turns = conversation.turns;
  let lastReply = turns.length - 1;
  while (lastReply >= 0 && !isReply(turns[lastReply]!)) lastReply--;
  box.replaceChildren(...turns.map((t, i) => drawTurn(t, i, i === lastReply, actions)));
  box.scrollTop = box.scrollHeight;
}

/** The text element of the latest reply (the one streaming), or undefined. */
export function replyText(): HTMLElement | undefined {
  return box.querySelector<HTMLElement>('[data-testid="output"]') ?? undefined;
}

/** Sets the streaming reply's text, keeping the view at the end if it was there. */
export function showReplyText(text: string): void {
  const el = replyText();
  if (!el) return;
  const atEnd = box.scrollHeight - box.scrollTop - box.clientHeight < 24;
  el.textContent = text;
  if (atEnd) box.scrollTop = box.scrollHeight;
}

/** Enables or disables the Regenerate button (not while generating, nor with no model). */
export function enableRegenerate(enabled: boolean): void {
  for (const b of box.querySelectorAll<HTMLButtonElement>('button.regenerate')) b.disabled = !enabled;
}

/** Marks the transcript busy (screen readers announce the reply once it is complete). */
export function setStreaming(streaming: boolean): void {
  box.setAttribute('aria-busy', String(streaming));
  replyText()?.classList.toggle('streaming', streaming);
}
