// Conversations kept in this browser (IndexedDB, through idb-keyval): what the page restores on
// reload and lists for opening, renaming and deleting. Nothing here leaves the machine.
import { createStore, del, get, set, type UseStore, values } from 'idb-keyval';
import type { ChatMessage } from '../src/index.js';

/**
 * One turn of a conversation, as the transcript shows it: `user` asked (chat), `assistant`
 * replied (chat), or `prompt` is a text the model continued (`given`, then the continuation in
 * `text`). `state` is how the reply's generation ended, once it has.
 */
export interface Turn {
  readonly kind: 'user' | 'assistant' | 'prompt';
  readonly given?: string;
  text: string;
  state?: 'done' | 'stopped' | 'failed';
}

/** A conversation: chat turns, or completions, under a title the visitor can change. */
export interface Conversation {
  readonly id: string;
  title: string;
  /** Chat turns (user / assistant) rather than completions (prompt). */
  chat: boolean;
  turns: Turn[];
  updatedAt: number;
}

/** Whether `turn` is a model's reply (which can be copied and regenerated). */
export function isReply(turn: Turn): boolean {
  return turn.kind !== 'user';
}

/** A new, empty conversation (not stored until {@link ConversationStore.save}). */
export function newConversation(chat: boolean): Conversation {
  const id = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  return { id, title: '', chat, turns: [], updatedAt: Date.now() };
}

/** The chat messages of the turns before index `end` (the reply being generated). */
export function chatMessages(conversation: Conversation, end: number): ChatMessage[] {
  return conversation.turns
    .slice(0, end)
    .filter((t) => t.kind !== 'prompt')
    .map((t) => ({ role: t.kind === 'user' ? 'user' : 'assistant', content: t.text }));
}

/** A title from the conversation's first words. */
export function defaultTitle(conversation: Conversation): string {
  const first = conversation.turns[0];
  const words = (first?.given ?? first?.text ?? '').replace(/\s+/g, ' ').trim();
  return words.length > 48 ? `${words.slice(0, 47)}…` : words || 'Untitled';
}

/** The conversations in IndexedDB (database `weft-demo-v1`, one record per conversation). */
export class ConversationStore {
  private readonly db: UseStore = createStore('weft-demo-v1', 'conversations');

  /** Every stored conversation, most recently changed first. */
  async list(): Promise<Conversation[]> {
    const all = await values<Conversation>(this.db);
    return all.sort((a, b) => b.updatedAt - a.updatedAt);
  }

  /** One conversation, or undefined. */
  get(id: string): Promise<Conversation | undefined> {
    return get<Conversation>(id, this.db);
  }

  /** Stores `conversation` (stamping `updatedAt`, and a title from its first words if it has none). */
  save(conversation: Conversation): Promise<void> {
    conversation.updatedAt = Date.now();
    if (!conversation.title) conversation.title = defaultTitle(conversation);
    return set(conversation.id, conversation, this.db);
  }

  /** Deletes one conversation (no-op when there is none under `id`). */
  delete(id: string): Promise<void> {
    return del(id, this.db);
  }
}
