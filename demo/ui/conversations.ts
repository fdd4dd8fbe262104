// The list of stored conversations: open one, rename it (in place: Enter keeps, Escape cancels),
// or delete it.
import type { Conversation } from '../conversations.js';
import { byId, h } from './dom.js';

const list = byId('conversation-list', HTMLUListElement);

/** What the list's controls do. */
export interface ConversationActions {
  open(id: string): void;
  rename(id: string, title: string): void;
  remove(id: string): void;
}

/** Draws `conversations` (stored ones, newest first), marking `current`. */
export function drawConversations(
  conversations: readonly Conversation[],
  current: string | undefined,
  actions: ConversationActions,
  busy: boolean,
): void {
  if (conversations.length === 0) {
    list.replaceChildren(h('li', { class: 'note' }, 'None yet: what you send is kept here.'));
    return;
  }
  list.replaceChildren(
    ...conversations.map((c) => {
      const open = h('button', { type: 'button', class: 'title', title: 'Open this conversation' }, c.title);
      open.addEventListener('click', () => actions.open(c.id));
      const rename = h('button', { type: 'button', 'aria-label': `Rename ${c.title}` }, 'Rename');
      const remove = h('button', { type: 'button', 'aria-label': `Delete ${c.title}` }, 'Delete');
      remove.addEventListener('click', () => actions.remove(c.id));
      const item = h('li', { 'data-id': c.id }, open, rename, remove);
      if (c.id === current) item.setAttribute('aria-current', 'true');
      for (const b of [open, remove]) b.toggleAttribute('disabled', busy);
      rename.addEventListener('click', () => {
        const input = h('input', { type: 'text', value: c.title, 'aria-label': 'New title' });
        let done = false;
        const finish = (keep: boolean) => {
          if (done) return;
          done = true;
          const title = input.value.trim();
          if (keep && title && title !== c.title) actions.rename(c.id, title);
          else input.replaceWith(open);
        };
        input.addEventListener('keydown', (e) => {
          if (e.key === 'Enter') finish(true);
          else if (e.key === 'Escape') finish(false);
        });
        input.addEventListener('blur', () => finish(true));
        open.replaceWith(input);
        input.focus();
        input.select();
      });
      return item;
    }),
  );
}
