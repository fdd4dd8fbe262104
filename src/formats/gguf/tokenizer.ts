/**
 * Rebuilds a Hugging Face `tokenizer.json` (and the `tokenizer_config.json` keys weft reads) from
 * the vocabulary a GGUF file embeds, so GGUF models tokenize through the same `loadTokenizer` as
 * safetensors ones.
 *
 * - `tokenizer.ggml.model = "gpt2"`: byte-level BPE from `tokens` + `merges`; the pre-tokenizer
 *   regex follows `tokenizer.ggml.pre` (`llama-bpe`: Llama 3's, `qwen2`: Qwen's, else GPT-2's).
 * - `tokenizer.ggml.model = "llama"`: SentencePiece BPE. Merges are not stored; they are derived
 *   from `scores` as Transformers' SentencePieceExtractor does (every split of a piece into two
 *   pieces, ranked by the merged piece's score), with byte fallback and the `▁` normalizer.
 *
 * Token types (`tokenizer.ggml.token_type`): 1 normal, 2 unknown, 3 control, 4 user-defined,
 * 5 unused, 6 byte. Control and user-defined tokens become added tokens (control ones special).
 */
import { ModelFormatError } from '../errors.js';
import type { GgufFile, GgufValue } from './header.js';
import type { GgufEntry } from './write.js';

const LLAMA3_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

function list(
  g: GgufFile,
  key: string,
  item: 'string' | 'number',
  required: boolean,
): (string | number)[] | undefined {
  const v: GgufValue | undefined = g.metadata.get(key);
  if (v === undefined && !required) return undefined;
  if (!Array.isArray(v) || !v.every((x) => typeof x === item)) {
    throw new ModelFormatError(
      g.bytes.name,
      key,
      v === undefined ? v : typeof v,
      `must be a list of ${item}s`,
    );
  }
  return v.filter((x): x is string | number => typeof x === item);
}

function strings(g: GgufFile, key: string): string[] {
  return (list(g, key, 'string', true) ?? []).map(String);
}

function numbers(g: GgufFile, key: string): number[] | undefined {
  return list(g, key, 'number', false)?.map(Number);
}

/** A tokenizer.json object and the matching tokenizer_config.json keys. */
export interface GgufTokenizerFiles {
  readonly tokenizerJson: Record<string, unknown>;
  readonly tokenizerConfig: Record<string, unknown>;
}

/**
 * Builds tokenizer files from a GGUF's `tokenizer.ggml.*` metadata (see the module comment).
 * `tokenizer.chat_template`, BOS/EOS ids and `add_bos_token` carry over to the config. Throws
 * {@link ModelFormatError} for a missing or unsupported vocabulary.
 */
export function ggufTokenizer(g: GgufFile): GgufTokenizerFiles {
  const model = g.metadata.get('tokenizer.ggml.model');
  const { tokens, types } = vocabulary(g);
  const bos = tokenId(g, 'tokenizer.ggml.bos_token_id', tokens.length);
  const eos = tokenId(g, 'tokenizer.ggml.eos_token_id', tokens.length);
  const unk = tokenId(g, 'tokenizer.ggml.unknown_token_id', tokens.length);
  const addBosValue = g.metadata.get('tokenizer.ggml.add_bos_token');
  const addBos = (addBosValue ?? model === 'llama') === true && bos !== undefined;
  const bosToken = bos === undefined ? undefined : tokens[bos];
  const parts: TokenizerParts = {
    vocab: vocabMap(tokens),
    added: addedTokens(tokens, types, model),
    postProcessor: addBos && bos !== undefined && bosToken !== undefined ? bosProcessor(bos, bosToken) : null,
  };
  let tokenizerJson: Record<string, unknown>;
  if (model === 'gpt2') tokenizerJson = byteLevelJson(g, parts);
  else if (model === 'llama') tokenizerJson = sentencePieceJson(g, parts, tokens, types, unk);
  else {
    throw new ModelFormatError(
      g.bytes.name,
      'tokenizer.ggml.model',
      model,
      'unsupported tokenizer (gpt2 or llama)',
    );
  }
  const template = g.metadata.get('tokenizer.chat_template');
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    bos_token: bosToken ?? null,
    eos_token: eos === undefined ? null : tokens[eos],
  };
  if (typeof template === 'string') tokenizerConfig.chat_template = template;
  return { tokenizerJson, tokenizerConfig };
}

/**
 * The pieces (`tokenizer.ggml.tokens`) in id order and their token types
 * (`tokenizer.ggml.token_type`, all 1 = normal when absent), checked to be the same length.
 */
function vocabulary(g: GgufFile): { tokens: string[]; types: number[] } {
  const tokens = strings(g, 'tokenizer.ggml.tokens');
  const types = numbers(g, 'tokenizer.ggml.token_type') ?? tokens.map(() => 1);
  if (types.length !== tokens.length) {
    throw new ModelFormatError(
      g.bytes.name,
      'tokenizer.ggml.token_type',
      types.length,
      `expected ${tokens.length} entries`,
    );
  }
  return { tokens, types };
}

/** The token id stored under `key`, undefined when absent; it must be an id below `count`. */
function tokenId(g: GgufFile, key: string, count: number): number | undefined {
  const v = g.metadata.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= count) {
    throw new ModelFormatError(g.bytes.name, key, v, `must be a token id below ${count}`);
  }
  return v;
}

/** tokenizer.json's `model.vocab`: each piece to its first id. */
function vocabMap(tokens: readonly string[]): Record<string, number> {
  // No prototype: a token may be spelled `__proto__`.
  const vocab: Record<string, number> = Object.create(null);
  tokens.forEach((t, i) => {
    if (!Object.hasOwn(vocab, t)) vocab[t] = i;
  });
  return vocab;
}

/**
 * tokenizer.json's `added_tokens`: control (3) and user-defined (4) pieces, and for SentencePiece
 * the unknown (2) one; all but user-defined ones are special.
 */
function addedTokens(
  tokens: readonly string[],
  types: readonly number[],
  model: GgufValue | undefined,
): unknown[] {
  return tokens.flatMap((content, i) =>
    types[i] === 3 || types[i] === 4 || (types[i] === 2 && model === 'llama')
      ? [
          {
            id: i,
            content,
            single_word: false,
            lstrip: false,
            rstrip: false,
            normalized: false,
            special: types[i] !== 4,
          },
        ]
      : [],
  );
}

/** A post-processor that puts BOS (id `bos`, piece `bosToken`) before each sequence. */
function bosProcessor(bos: number, bosToken: string): Record<string, unknown> {
  return {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: bosToken, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [
      { SpecialToken: { id: bosToken, type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: bosToken, type_id: 1 } },
      { Sequence: { id: 'B', type_id: 1 } },
    ],
    special_tokens: { [bosToken]: { id: bosToken, ids: [bos], tokens: [bosToken] } },
  };
}

/** The parts of tokenizer.json both vocabulary kinds share. */
interface TokenizerParts {
  readonly vocab: Record<string, number>;
  readonly added: unknown[];
  /** The BOS template when BOS is added, else null. */
  readonly postProcessor: Record<string, unknown> | null;
}

/**
 * tokenizer.json for `tokenizer.ggml.model = "gpt2"`: byte-level BPE over `tokenizer.ggml.merges`,
 * split first by the regex `tokenizer.ggml.pre` names.
 */
function byteLevelJson(
  g: GgufFile,
  { vocab, added, postProcessor }: TokenizerParts,
): Record<string, unknown> {
  const merges = strings(g, 'tokenizer.ggml.merges');
  const pre = g.metadata.get('tokenizer.ggml.pre');
  const regex = pre === 'llama-bpe' ? LLAMA3_REGEX : pre === 'qwen2' ? QWEN2_REGEX : GPT2_REGEX;
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  return {
    version: '1.0',
    added_tokens: added,
    normalizer: pre === 'qwen2' ? { type: 'NFC' } : null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false },
        byteLevel,
      ],
    },
    post_processor: postProcessor ?? byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      vocab,
      merges,
      byte_fallback: false,
      ignore_merges: pre === 'llama-bpe',
    },
  };
}

/**
 * tokenizer.json for `tokenizer.ggml.model = "llama"`: SentencePiece BPE with merges derived from
 * `tokenizer.ggml.scores` ({@link spmMerges}), byte fallback and the `▁` normalizer.
 */
function sentencePieceJson(
  g: GgufFile,
  { vocab, added, postProcessor }: TokenizerParts,
  tokens: readonly string[],
  types: readonly number[],
  unk: number | undefined,
): Record<string, unknown> {
  const scores = numbers(g, 'tokenizer.ggml.scores');
  if (scores === undefined || scores.length !== tokens.length) {
    throw new ModelFormatError(
      g.bytes.name,
      'tokenizer.ggml.scores',
      scores?.length,
      `expected ${tokens.length} scores`,
    );
  }
  return {
    version: '1.0',
    added_tokens: added,
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
      ],
    },
    pre_tokenizer: null,
    post_processor: postProcessor,
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ],
    },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: unk === undefined ? null : tokens[unk],
      vocab,
      merges: spmMerges(tokens, scores, types),
      fuse_unk: true,
      byte_fallback: true,
    },
  };
}

/**
 * SentencePiece BPE merges from piece scores, as Transformers' `SentencePieceExtractor`: for each
 * normal or user-defined piece (in id order), every split into two pieces that are both in the
 * vocabulary, sorted by (left id, right id); then all merges stably sorted by the merged piece's
 * score, highest first.
 */
function spmMerges(
  tokens: readonly string[],
  scores: readonly number[],
  types: readonly number[],
): string[][] {
  const ids = new Map<string, number>();
  tokens.forEach((t, i) => {
    if (!ids.has(t)) ids.set(t, i);
  });
  const merges: { l: string; r: string; score: number; li: number; ri: number }[] = [];
  for (let i = 0; i < tokens.length; i++) {
    if (types[i] !== 1 && types[i] !== 4) continue;
    const piece = [...tokens[i]!];
    const local: { l: string; r: string; score: number; li: number; ri: number }[] = [];
    for (let k = 1; k < piece.length; k++) {
      const l = piece.slice(0, k).join('');
      const r = piece.slice(k).join('');
      const li = ids.get(l);
      const ri = ids.get(r);
      if (li !== undefined && ri !== undefined) local.push({ l, r, score: scores[i]!, li, ri });
    }
    local.sort((a, b) => a.li - b.li || a.ri - b.ri);
    merges.push(...local);
  }
  merges.sort((a, b) => b.score - a.score);
  return merges.map((m) => [m.l, m.r]);
}

type JsonObject = { readonly [key: string]: unknown };

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The `tokenizer.ggml.*` metadata for a Hugging Face BPE tokenizer.json, the inverse of
 * {@link ggufTokenizer}: byte-level BPE becomes `gpt2` (with `pre` recognised from the split
 * regex), byte-fallback BPE becomes SentencePiece `llama`. tokenizer.json has no SentencePiece
 * scores, so they are written as minus the rank of the first merge that builds the piece, which
 * restores the merge order when read back. Gaps in the id space up to `vocabSize` are filled
 * with unused `[PADn]` tokens, as GGUF needs one token per embedding row.
 */
export function tokenizerGgufMetadata(
  tokenizerJson: unknown,
  tokenizerConfig: unknown,
  vocabSize: number,
  file = 'tokenizer.json',
): [string, GgufEntry][] {
  if (!isObject(tokenizerJson) || !isObject(tokenizerJson.model) || tokenizerJson.model.type !== 'BPE') {
    throw new ModelFormatError(
      file,
      'model.type',
      isObject(tokenizerJson) ? tokenizerJson.model : undefined,
      'only BPE tokenizers export to GGUF',
    );
  }
  const model = tokenizerJson.model;
  const tokens: string[] = [];
  const types: number[] = [];
  if (isObject(model.vocab)) {
    for (const [t, id] of Object.entries(model.vocab)) {
      if (typeof id === 'number') {
        tokens[id] = t;
        types[id] = /^<0x[0-9A-F]{2}>$/.test(t) && model.byte_fallback === true ? 6 : 1;
      }
    }
  }
  const special = new Map<string, number>();
  if (Array.isArray(tokenizerJson.added_tokens)) {
    for (const a of tokenizerJson.added_tokens) {
      if (isObject(a) && typeof a.id === 'number' && typeof a.content === 'string') {
        tokens[a.id] = a.content;
        types[a.id] = a.special === true ? (a.content === model.unk_token ? 2 : 3) : 4;
        special.set(a.content, a.id);
      }
    }
  }
  for (let i = 0; i < Math.max(vocabSize, tokens.length); i++) {
    if (tokens[i] === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = 5;
    }
  }
  const config = isObject(tokenizerConfig) ? tokenizerConfig : {};
  const idOf = (v: unknown) => {
    const text =
      typeof v === 'string' ? v : isObject(v) && typeof v.content === 'string' ? v.content : undefined;
    return text === undefined ? undefined : (special.get(text) ?? tokens.indexOf(text));
  };
  const out: [string, GgufEntry][] = [];
  const spm = model.byte_fallback === true;
  out.push(['tokenizer.ggml.model', { type: 'string', value: spm ? 'llama' : 'gpt2' }]);
  if (!spm) {
    const pre = JSON.stringify(tokenizerJson.pre_tokenizer ?? null);
    const name = pre.includes(JSON.stringify(LLAMA3_REGEX))
      ? 'llama-bpe'
      : pre.includes(JSON.stringify(QWEN2_REGEX))
        ? 'qwen2'
        : 'default';
    out.push(['tokenizer.ggml.pre', { type: 'string', value: name }]);
  }
  out.push(['tokenizer.ggml.tokens', { type: 'string[]', value: tokens }]);
  out.push(['tokenizer.ggml.token_type', { type: 'i32[]', value: types }]);
  if (spm) {
    // SentencePiece scores are not in tokenizer.json; rank each piece by the first merge that
    // produces it, so deriving merges back from scores (spmMerges) restores the merge order.
    // Pieces no merge produces rank after all merges, by id.
    const merges = Array.isArray(model.merges) ? model.merges : [];
    const rank = new Map<string, number>();
    merges.forEach((m, i) => {
      const piece = Array.isArray(m) ? m.join('') : String(m).replace(' ', '');
      if (!rank.has(piece)) rank.set(piece, i);
    });
    const scores = tokens.map((t, i) => -(rank.get(t) ?? merges.length + i));
    out.push(['tokenizer.ggml.scores', { type: 'f32[]', value: scores }]);
  } else {
    const merges = Array.isArray(model.merges) ? model.merges : [];
    out.push([
      'tokenizer.ggml.merges',
      { type: 'string[]', value: merges.map((m) => (Array.isArray(m) ? m.join(' ') : String(m))) },
    ]);
  }
  const bos = idOf(config.bos_token);
  const eos = idOf(config.eos_token);
  const unk = typeof model.unk_token === 'string' ? idOf(model.unk_token) : undefined;
  if (bos !== undefined && bos >= 0) out.push(['tokenizer.ggml.bos_token_id', { type: 'u32', value: bos }]);
  if (eos !== undefined && eos >= 0) out.push(['tokenizer.ggml.eos_token_id', { type: 'u32', value: eos }]);
  if (unk !== undefined && unk >= 0)
    out.push(['tokenizer.ggml.unknown_token_id', { type: 'u32', value: unk }]);
  const pp = JSON.stringify(tokenizerJson.post_processor ?? null);
  out.push([
    'tokenizer.ggml.add_bos_token',
    { type: 'bool', value: pp.includes('TemplateProcessing') && bos !== undefined },
  ]);
  if (typeof config.chat_template === 'string') {
    out.push(['tokenizer.chat_template', { type: 'string', value: config.chat_template }]);
  }
  return out;
}
