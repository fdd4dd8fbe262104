// One request's constraint on its output: a grammar (from a JSON schema, EBNF or a regex) compiled
// against the model's vocabulary, and a matcher that advances with each accepted token and gives
// the bitmask of tokens allowed next. The mask is applied to the logits before sampling, on the GPU
// (kernels/sample/mask.wgsl) and in the CPU reference alike (applyMaskRef).

import type {
  StructuralTag,
  CompiledGrammar as XgCompiledGrammar,
  GrammarCompiler as XgCompiler,
  GrammarMatcher as XgMatcher,
  TokenizerInfo as XgTokenizerInfo,
} from '@mlc-ai/web-xgrammar';
import { InvalidInputError } from '../errors.js';
import { maskWordsOf } from '../kernels/sample/mask.js';
import { GrammarError, type GrammarKind } from './errors.js';
import { engineMessages, engineQuiet, loadXGrammar, type XGrammar } from './xgrammar.js';

/**
 * What a request's output must match. 'json': any JSON object (OpenAI's `json_object`);
 * 'json_schema': JSON valid under `schema` (an object or its JSON text); 'grammar': an EBNF
 * grammar in XGrammar's dialect (GBNF-like, `root ::= ...`; `root` names the start rule);
 * 'regex': text matching `pattern` (the whole output); 'structural_tag': XGrammar's structural tag
 * (constant strings, tags, JSON schemas, grammars and regexes in sequence or as alternatives; a
 * forced tool call is one), the JSON in it written on one line as `json.dumps` writes it.
 */
export type ConstraintSpec =
  | { readonly kind: 'json' }
  | { readonly kind: 'json_schema'; readonly schema: unknown }
  | { readonly kind: 'grammar'; readonly ebnf: string; readonly root?: string }
  | { readonly kind: 'regex'; readonly pattern: string }
  | { readonly kind: 'structural_tag'; readonly tag: StructuralTag };

/**
 * How the tokenizer spells its tokens: 'byte_level' (GPT-2 style, `Ġ` for a space), 'byte_fallback'
 * (SentencePiece with `<0x0A>` byte tokens and `▁`), 'raw' (tokens are their text).
 */
export type VocabularyType = 'byte_level' | 'byte_fallback' | 'raw';

/**
 * A model's vocabulary as the grammar engine needs it: the token string of every id below `size`
 * (the model's vocabulary, padding included; '' for ids the tokenizer lacks, never allowed), how
 * they are spelt, and the ids that end generation (allowed once the grammar is complete).
 */
export interface Vocabulary {
  readonly tokens: readonly string[];
  readonly type: VocabularyType;
  readonly eosIds: readonly number[];
}

/** Whether `id` is allowed by `mask` (one row of {@link maskWordsOf} words). */
export function maskAllows(mask: Uint32Array, id: number): boolean {
  return ((mask[id >>> 5]! >>> (id & 31)) & 1) === 1;
}

/**
 * Compiles constraints for one vocabulary. Made once per model (the vocabulary is preprocessed
 * once and compiled grammars are cached by the grammar engine).
 */
export class GrammarCompiler {
  private constructor(
    private readonly xg: XGrammar,
    private readonly compiler: XgCompiler,
    private readonly info: XgTokenizerInfo,
    /** Vocabulary size (the mask covers ids 0..vocab-1). */
    readonly vocab: number,
    /** Ids that end generation, allowed once the output is complete. */
    private readonly eosIds: readonly number[],
  ) {}

  /** Loads the grammar engine and preprocesses `vocabulary`. */
  static async create(vocabulary: Vocabulary): Promise<GrammarCompiler> {
    const xg = await loadXGrammar();
    const V = vocabulary.tokens.length;
    if (V < 1) throw new InvalidInputError('GrammarCompiler: the vocabulary is empty');
    const info = await xg.TokenizerInfo.createTokenizerInfo(
      [...vocabulary.tokens],
      vocabulary.type,
      false,
      V,
      [...vocabulary.eosIds],
    );
    const compiler = await xg.GrammarCompiler.createGrammarCompiler(info, true);
    return new GrammarCompiler(xg, compiler, info, V, vocabulary.eosIds);
  }

  /**
   * Compiles `spec` and starts a matcher at its beginning. A schema, grammar or regex the engine
   * refuses throws {@link GrammarError} naming the problem.
   */
  async compile(spec: ConstraintSpec): Promise<Constraint> {
    const kind: GrammarKind =
      spec.kind === 'json' ? 'json_schema' : spec.kind === 'structural_tag' ? 'grammar' : spec.kind;
    const result = await engineMessages(() => this.compiled(spec));
    if (!result.ok) {
      const cause = result.error;
      if (cause instanceof GrammarError || cause instanceof InvalidInputError) throw cause;
      throw new GrammarError(kind, problemOf(result.lines, cause), { cause });
    }
    const compiled = result.value;
    const matcher = await this.xg.GrammarMatcher.createGrammarMatcher(
      compiled,
      this.eosIds.length > 0 ? [...this.eosIds] : undefined,
      false,
      64,
    );
    compiled.dispose();
    return new Constraint(matcher, this.vocab);
  }

  private async compiled(spec: ConstraintSpec): Promise<XgCompiledGrammar> {
    switch (spec.kind) {
      case 'json':
        // OpenAI's json_object: one JSON object, any keys (strict mode off allows them), compact.
        return this.compiler.compileJSONSchema('{"type":"object"}', false, -1, [',', ':'], false);
      case 'json_schema': {
        const text = typeof spec.schema === 'string' ? spec.schema : JSON.stringify(spec.schema);
        if (typeof text !== 'string') throw new GrammarError('json_schema', 'the schema is not JSON');
        checkSchema(typeof spec.schema === 'string' ? parseSchema(spec.schema) : spec.schema);
        // Compact JSON (no free whitespace), so a model cannot pad its output with spaces.
        return this.compiler.compileJSONSchema(text, false, -1, [',', ':'], true);
      }
      case 'grammar':
        if (typeof spec.ebnf !== 'string' || spec.ebnf.trim() === '')
          throw new GrammarError('grammar', 'the grammar is empty');
        return this.compiler.compileGrammar(spec.ebnf, spec.root ?? 'root');
      case 'regex':
        if (typeof spec.pattern !== 'string' || spec.pattern === '')
          throw new GrammarError('regex', 'the pattern is empty');
        checkRegex(spec.pattern);
        return this.compiler.compileStructuralTag({
          type: 'structural_tag',
          format: { type: 'regex', pattern: spec.pattern },
        });
      case 'structural_tag':
        if (typeof spec.tag !== 'object' || spec.tag === null)
          throw new GrammarError('grammar', 'the structural tag is not an object');
        return this.compiler.compileStructuralTag(JSON.stringify(await this.lineJson(spec.tag)));
      default:
        throw new InvalidInputError(
          `constraint kind must be json, json_schema, grammar or regex, got ${JSON.stringify(spec)}`,
        );
    }
  }

  /**
   * `node` (a structural tag or a part of one) with each JSON schema in it replaced by the grammar
   * of its JSON on one line with `, ` and `: ` between items, as `json.dumps` writes it and chat
   * templates render tool calls. XGrammar's own JSON inside a structural tag allows any whitespace
   * between items, where a model can pad without end; `jsonSchema` is compact for the same reason.
   */
  private async lineJson(node: unknown): Promise<unknown> {
    if (Array.isArray(node)) return Promise.all(node.map((n) => this.lineJson(n)));
    if (typeof node !== 'object' || node === null) return node;
    if ('type' in node && node.type === 'json_schema' && 'json_schema' in node) {
      checkSchema(node.json_schema);
      const grammar = await this.xg.Grammar.fromJSONSchema(
        JSON.stringify(node.json_schema),
        false,
        -1,
        [', ', ': '],
        true,
      );
      try {
        return { type: 'grammar', grammar: grammar.toString() };
      } finally {
        grammar.dispose();
      }
    }
    const entries = Object.entries(node).map(async ([k, v]) => [k, await this.lineJson(v)] as const);
    return Object.fromEntries(await Promise.all(entries));
  }

  /** Frees the engine's copy of the vocabulary. */
  dispose(): void {
    this.compiler.dispose();
    this.info.dispose();
  }
}

function parseSchema(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new GrammarError('json_schema', `not JSON: ${messageOf(cause)}`, { cause });
  }
}

/**
 * JS's own syntax check of a pattern first: each refusal by the engine aborts its WASM call, and
 * after a refused pattern inside a JSON schema the next call to the engine was seen to hang.
 */
function checkRegex(pattern: string, kind: GrammarKind = 'regex', where = ''): void {
  try {
    new RegExp(pattern, 'u');
  } catch (cause) {
    throw new GrammarError(kind, `${where}${messageOf(cause)}`, { cause });
  }
}

const SCHEMA_TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);

/**
 * The checks the grammar engine skips (it takes an unknown `type` as "any value"): a schema is an
 * object or a boolean, and every `type` names a JSON type, at any depth.
 */
function checkSchema(schema: unknown, path = '#'): void {
  if (typeof schema === 'boolean') return;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema))
    throw new GrammarError(
      'json_schema',
      `${path} must be an object or a boolean, got ${JSON.stringify(schema)}`,
    );
  for (const [key, value] of Object.entries(schema)) {
    if (key === 'pattern') {
      if (typeof value !== 'string')
        throw new GrammarError('json_schema', `${path}/pattern must be a string`);
      checkRegex(value, 'json_schema', `${path}/pattern: `);
    } else if (key === 'type') {
      const types = Array.isArray(value) ? value : [value];
      for (const t of types)
        if (typeof t !== 'string' || !SCHEMA_TYPES.has(t))
          throw new GrammarError('json_schema', `${path}/type: ${JSON.stringify(t)} is not a JSON type`);
    } else if (key === 'properties' || key === '$defs' || key === 'definitions') {
      if (typeof value !== 'object' || value === null || Array.isArray(value))
        throw new GrammarError('json_schema', `${path}/${key} must be an object`);
      for (const [name, sub] of Object.entries(value)) checkSchema(sub, `${path}/${key}/${name}`);
    } else if (key === 'items' || key === 'additionalProperties' || key === 'not') {
      if (!Array.isArray(value)) checkSchema(value, `${path}/${key}`);
    } else if (key === 'anyOf' || key === 'oneOf' || key === 'allOf' || key === 'prefixItems') {
      if (!Array.isArray(value)) throw new GrammarError('json_schema', `${path}/${key} must be an array`);
      for (const [i, sub] of value.entries()) checkSchema(sub, `${path}/${key}/${i}`);
    }
  }
}

/** The engine's own words about a refused grammar (`[FATAL] file.cc:75: <problem>`), else the error's. */
function problemOf(lines: readonly string[], cause: unknown): string {
  const fatal = lines.find((l) => l.includes('[FATAL]'));
  if (fatal) return fatal.replace(/^.*\[FATAL\][^:]*:\d+:\s*/, '');
  return messageOf(cause);
}

function messageOf(cause: unknown): string {
  if (cause instanceof Error) return cause.message;
  return String(cause);
}

/**
 * The state of one constrained request: which tokens may come next. Advance it with every token
 * the request emits ({@link Constraint.accept}); {@link Constraint.mask} gives the bitmask of the
 * next position. Under speculative decoding, tree paths are explored with `accept` and undone with
 * {@link Constraint.rollBack}.
 */
export class Constraint {
  constructor(
    private readonly matcher: XgMatcher,
    /** Vocabulary size the mask covers. */
    readonly vocab: number,
  ) {}

  /** u32 words of one mask. */
  get words(): number {
    return maskWordsOf(this.vocab);
  }

  /** The bitmask [maskWords(vocab)] u32 of the tokens allowed next (EOS only once complete). */
  async mask(): Promise<Uint32Array> {
    const bits = await this.matcher.getNextTokenBitmask();
    const out = new Uint32Array(this.words);
    out.set(new Uint32Array(bits.buffer, bits.byteOffset, Math.min(bits.length, out.length)));
    return out;
  }

  /** Advances past `id`; throws InvalidInputError if the grammar does not allow it here. */
  accept(id: number): void {
    if (!this.matcher.acceptToken(id))
      throw new InvalidInputError(`constraint: token ${id} is not allowed by the grammar here`);
  }

  /** Whether `id` may come next (advances past it when it may). */
  tryAccept(id: number): boolean {
    // A refused token is an answer here, not a problem: drop the engine's warning about it.
    return engineQuiet(() => this.matcher.acceptToken(id));
  }

  /** Undoes the last `n` accepted tokens. */
  rollBack(n: number): void {
    if (n > 0) this.matcher.rollBack(n);
  }

  /**
   * The longest text the grammar allows next and nothing else (XGrammar's jump-forward string:
   * after `{` under a schema whose first required key is `a`, `"a":`); '' where several texts can
   * follow. Which tokens spell it is still open: the mask may allow several tokenisations.
   */
  jumpForward(): string {
    return this.matcher.findJumpForwardString();
  }

  /** Whether the output is complete (an EOS was accepted after a full match). */
  get done(): boolean {
    return this.matcher.isTerminated();
  }

  /** Frees the matcher. */
  dispose(): void {
    this.matcher.dispose();
  }
}
