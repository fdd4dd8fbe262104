import { Template } from '@huggingface/jinja';
import { InvalidInputError } from '../errors.js';
import { ModelFormatError } from '../formats/errors.js';

/** One turn of a conversation, as chat templates expect it. */
export interface ChatMessage {
  readonly role: 'system' | 'user' | 'assistant' | 'tool';
  readonly content: string;
  /** Qwen3's separate thinking text for an assistant turn (optional). */
  readonly reasoning_content?: string;
  /** An assistant turn's tool calls, as templates read them (`{ function: { name, arguments } }`). */
  readonly tool_calls?: readonly unknown[];
  /** A tool turn: the id of the call it answers. */
  readonly tool_call_id?: string;
}

/** Options of {@link ChatTemplate.render}. */
export interface ChatOptions {
  /** End with the header of an assistant turn, so generation continues as the assistant. Default true. */
  readonly addGenerationPrompt?: boolean;
  /**
   * Qwen3: `false` renders an empty `<think></think>` block so the model answers without thinking;
   * undefined leaves the variable undefined, as Transformers does by default.
   */
  readonly enableThinking?: boolean;
  /** Further template variables (e.g. `tools`, `date_string`). */
  readonly variables?: Readonly<Record<string, unknown>>;
}

/**
 * A compiled Jinja chat template (from `tokenizer_config.json`'s `chat_template`) rendered with
 * `@huggingface/jinja`, with the variables Transformers passes: `messages`,
 * `add_generation_prompt`, `bos_token`, `eos_token`, `enable_thinking` (and jinja's built-in
 * `raise_exception`).
 */
export class ChatTemplate {
  private readonly template: Template;

  constructor(
    source: string,
    private readonly bosToken: string,
    private readonly eosToken: string,
    file = 'tokenizer_config.json',
  ) {
    try {
      this.template = new Template(source);
    } catch (cause) {
      throw new ModelFormatError(file, 'chat_template', source, `does not parse: ${cause}`, { cause });
    }
  }

  /**
   * Renders `messages` to the prompt text (which still needs encoding, with `addSpecialTokens:
   * false` when the template writes its own BOS). A template's `raise_exception(msg)` and any
   * other rendering failure become {@link InvalidInputError} carrying the template's message.
   */
  render(messages: readonly ChatMessage[], options: ChatOptions = {}): string {
    const variables: Record<string, unknown> = {
      ...options.variables,
      messages: messages.map((m) => ({ ...m })),
      add_generation_prompt: options.addGenerationPrompt ?? true,
      bos_token: this.bosToken,
      eos_token: this.eosToken,
    };
    if (options.enableThinking !== undefined) variables.enable_thinking = options.enableThinking;
    // `raise_exception` is a jinja built-in (it throws a plain Error with the template's message),
    // so it arrives here with the other rendering failures.
    try {
      return this.template.render(variables);
    } catch (cause) {
      throw new InvalidInputError(
        `chat template: ${cause instanceof Error ? cause.message : String(cause)}`,
        {
          cause,
        },
      );
    }
  }
}
