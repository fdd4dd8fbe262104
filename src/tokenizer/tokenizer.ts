import { Tokenizer } from '@huggingface/tokenizers';
import { InvalidInputError } from '../errors.js';
import { ModelFormatError } from '../formats/errors.js';
import { type ChatMessage, type ChatOptions, ChatTemplate } from './chat.js';

/** Options of {@link WeftTokenizer.encode}. */
export interface EncodeOptions {
  /**
   * Add the tokenizer's own special tokens (Llama's BOS, from its post-processor). Default true,
   * as Transformers does; pass false for text that continues a sequence or a rendered chat prompt
   * that already carries its BOS.
   */
  readonly addSpecialTokens?: boolean;
}

/** Options of {@link WeftTokenizer.decode}. */
export interface DecodeOptions {
  /** Drop special tokens (BOS, EOS, chat markers) from the text. Default false. */
  readonly skipSpecialTokens?: boolean;
}

/**
 * Turns a stream of token ids into text as they arrive. `push` returns the new text that is
 * complete so far: bytes of a character split across tokens (byte-level BPE, SentencePiece byte
 * fallback) are held back until the character is whole, and the text never needs to be revised.
 * `flush` returns whatever is held (with U+FFFD for an unfinished character) at end of stream.
 */
export interface StreamDecoder {
  push(id: number): string;
  flush(): string;
}

/** A tokenizer config as found in `tokenizer_config.json`; only the keys weft reads are typed. */
export interface TokenizerConfig {
  readonly bos_token?: unknown;
  readonly eos_token?: unknown;
  readonly chat_template?: unknown;
  readonly [key: string]: unknown;
}

/** How a tokenizer spells its token strings (see `spellingOf`). */
export type TokenSpelling = 'byte_level' | 'byte_fallback' | 'raw';

type JsonObject = { readonly [key: string]: unknown };

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A special token in a config is either a string or an AddedToken object `{ content }`. */
function tokenText(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (isObject(value) && typeof value.content === 'string') return value.content;
  return undefined;
}

/**
 * The chat template of a config: a string, or a list of `{ name, template }` (the `default` one,
 * else the first). Undefined when the config has none (base models, e.g. Llama 2's).
 */
function pickTemplate(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    const named = value.filter(
      (t): t is { name: string; template: string } =>
        isObject(t) && typeof t.name === 'string' && typeof t.template === 'string',
    );
    return (named.find((t) => t.name === 'default') ?? named[0])?.template;
  }
  return undefined;
}

/**
 * weft's tokenizer: a Hugging Face `tokenizer.json` (run by `@huggingface/tokenizers`) plus what
 * `tokenizer_config.json` adds — BOS/EOS tokens and the Jinja chat template. Built by
 * {@link loadTokenizer}; the same object serves the engine (ids) and the demo (text, chat).
 */
export class WeftTokenizer {
  /** BOS id from the config's `bos_token`, if the model has one. */
  readonly bosId: number | undefined;
  /** Ids that end generation: the config's `eos_token` plus any given to {@link loadTokenizer}. */
  readonly eosIds: readonly number[];
  /** Ids of all special (added, `special: true`) tokens. */
  readonly specialIds: ReadonlySet<number>;
  /** Number of ids, counting added tokens (may be below the model's padded `vocab_size`). */
  readonly vocabSize: number;
  private readonly template: ChatTemplate | undefined;

  constructor(
    private readonly inner: Tokenizer,
    config: TokenizerConfig,
    extraEos: readonly number[],
    file: string,
    /** How the token strings of {@link WeftTokenizer.tokenStrings} are spelt. */
    readonly spelling: TokenSpelling = 'raw',
  ) {
    const bos = tokenText(config.bos_token);
    const eos = tokenText(config.eos_token);
    this.bosId = bos === undefined ? undefined : inner.token_to_id(bos);
    const eosId = eos === undefined ? undefined : inner.token_to_id(eos);
    if (eos !== undefined && eosId === undefined) {
      throw new ModelFormatError(file, 'eos_token', eos, 'not in the vocabulary');
    }
    this.eosIds = [...new Set([...(eosId === undefined ? [] : [eosId]), ...extraEos])];
    const special = new Set<number>();
    for (const [id, token] of inner.get_added_tokens_decoder()) if (token.special) special.add(id);
    this.specialIds = special;
    let size = 0;
    for (const id of inner.get_vocab(true).values()) size = Math.max(size, id + 1);
    this.vocabSize = size;
    const source = pickTemplate(config.chat_template);
    this.template = source === undefined ? undefined : new ChatTemplate(source, bos ?? '', eos ?? '', file);
  }

  /** Token ids of `text`. */
  encode(text: string, options: EncodeOptions = {}): number[] {
    return this.inner.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
  }

  /** Text of `ids` (all of them at once; see {@link streamDecoder} for incremental output). */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    for (const id of ids) {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new InvalidInputError(`decode: id ${id} is outside the vocabulary [0, ${this.vocabSize})`);
      }
    }
    if (ids.length === 0) return '';
    return this.inner.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: false,
    });
  }

  /**
   * The token string of every id below `size` (e.g. `Ġworld`; '' for ids the tokenizer lacks, such
   * as a checkpoint's padding), the vocabulary a grammar engine compiles against.
   */
  tokenStrings(size: number = this.vocabSize): string[] {
    return Array.from({ length: size }, (_, id) => this.inner.id_to_token(id) ?? '');
  }

  /** The token string of one id (e.g. `Ġworld`), for debugging and tree visualisation. */
  tokenOf(id: number): string | undefined {
    return this.inner.id_to_token(id);
  }

  /** The first id that `other` maps to a different token string (or lacks), if any. */
  firstDifference(other: WeftTokenizer): number | undefined {
    const n = Math.max(this.vocabSize, other.vocabSize);
    for (let id = 0; id < n; id++) if (this.tokenOf(id) !== other.tokenOf(id)) return id;
    return undefined;
  }

  /** The id of one token string, e.g. `<|im_end|>`. */
  idOf(token: string): number | undefined {
    return this.inner.token_to_id(token);
  }

  /**
   * A {@link StreamDecoder}. It decodes a short window of recent ids twice per push — the window
   * alone and the window plus the new id — and emits the difference once it does not end in an
   * incomplete character (U+FFFD). Starting both decodes at the same id keeps SentencePiece's
   * leading-space handling consistent, as Hugging Face's text-generation-inference does.
   */
  streamDecoder(options: DecodeOptions = {}): StreamDecoder {
    const ids: number[] = [];
    let prefixOffset = 0;
    let readOffset = 0;
    const text = (from: number, to: number) => this.decode(ids.slice(from, to), options);
    return {
      push: (id) => {
        ids.push(id);
        const prefix = text(prefixOffset, readOffset);
        const full = text(prefixOffset, ids.length);
        if (full.length > prefix.length && !full.endsWith('\uFFFD')) {
          prefixOffset = readOffset;
          readOffset = ids.length;
          return full.slice(prefix.length);
        }
        return '';
      },
      flush: () => {
        const prefix = text(prefixOffset, readOffset);
        const full = text(prefixOffset, ids.length);
        prefixOffset = readOffset = ids.length;
        return full.slice(prefix.length);
      },
    };
  }

  /** Whether the config carries a chat template. */
  get hasChatTemplate(): boolean {
    return this.template !== undefined;
  }

  /**
   * Renders a conversation with the model's chat template (see {@link ChatTemplate.render}).
   * Throws {@link InvalidInputError} when the tokenizer has no template or the template rejects
   * the messages (its `raise_exception`).
   */
  applyChatTemplate(messages: readonly ChatMessage[], options: ChatOptions = {}): string {
    if (this.template === undefined) {
      throw new InvalidInputError('applyChatTemplate: this tokenizer_config.json has no chat_template');
    }
    return this.template.render(messages, options);
  }
}

/**
 * Builds a {@link WeftTokenizer} from a parsed `tokenizer.json` and (optionally) its
 * `tokenizer_config.json`. `extraEos` adds end-of-generation ids from `config.json` /
 * `generation_config.json` (see `specFromConfig`, `withGenerationConfig`), since instruct models
 * often stop on an end-of-turn token that the tokenizer config does not call EOS. A structurally
 * invalid tokenizer.json throws {@link ModelFormatError}.
 */
export function loadTokenizer(
  tokenizerJson: unknown,
  tokenizerConfig: unknown = {},
  extraEos: readonly number[] = [],
  file = 'tokenizer.json',
): WeftTokenizer {
  if (!isObject(tokenizerJson) || !isObject(tokenizerJson.model)) {
    throw new ModelFormatError(
      file,
      'model',
      isObject(tokenizerJson) ? tokenizerJson.model : tokenizerJson,
      'missing',
    );
  }
  if (!isObject(tokenizerConfig)) {
    throw new ModelFormatError('tokenizer_config.json', '(root)', tokenizerConfig, 'must be a JSON object');
  }
  let inner: Tokenizer;
  try {
    inner = new Tokenizer(tokenizerJson, tokenizerConfig);
  } catch (cause) {
    throw new ModelFormatError(
      file,
      'model',
      tokenizerJson.model.type,
      `cannot build the tokenizer: ${cause}`,
      {
        cause,
      },
    );
  }
  return new WeftTokenizer(inner, tokenizerConfig, extraEos, file, spellingOf(tokenizerJson));
}

/**
 * How a tokenizer.json spells its tokens, from its decoder: 'byte_level' (a ByteLevel decoder,
 * GPT-2 style), 'byte_fallback' (a ByteFallback step, SentencePiece style), else 'raw'.
 */
function spellingOf(tokenizerJson: JsonObject): TokenSpelling {
  const steps = (d: unknown): unknown[] =>
    isObject(d) ? (Array.isArray(d.decoders) ? d.decoders.flatMap(steps) : [d.type]) : [];
  const types = steps(tokenizerJson.decoder);
  if (types.includes('ByteLevel')) return 'byte_level';
  if (types.includes('ByteFallback')) return 'byte_fallback';
  return 'raw';
}
