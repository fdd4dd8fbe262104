// The cost of constrained decoding per token, for `npm run bench`: the grammar engine's work on the
// CPU (the next-token bitmask and the advance past the chosen token, XGrammar's WASM, the same code
// a page or worker runs) over a JSON reply tokenized by the demo target's tokenizer, the bytes of
// mask written to the GPU per step, and (when the engine runs in this process) decode tok/s of the
// same prompts plain and under a JSON schema, measured in one run; and over the 50 generated
// schemas of test/grammar/grammar.test.ts, greedy, decode tok/s and tokens per target pass of plain
// constrained decoding, jump-forward alone, and n-gram and (with a draft model) self-draft trees
// grown under the grammar without and with jump-forward, with a check that every run's ids equal
// plain decoding's.
import { withSources } from './ssr.mjs';

const SCHEMA = {
  type: 'object',
  properties: {
    king: { enum: ['david', 'saul', 'solomon'] },
    age: { type: 'integer', minimum: 1, maximum: 120 },
    sons: { type: 'array', items: { type: 'string', pattern: '^[a-z]{1,8}$' }, maxItems: 3 },
  },
  required: ['king', 'age', 'sons'],
};
const REPLY = '{"king":"david","age":70,"sons":["amnon","absalom","solomon"]}';

/** The rows of the schema comparison: name, and the options a run adds to the schema's. */
const SPECULATION_ROWS = [
  ['plain constrained', { drafter: 'none', jumpForward: false }],
  ['jump-forward', { drafter: 'none' }],
  ['n-gram under the grammar', { drafter: 'ngram', jumpForward: false }],
  ['n-gram + jump-forward', { drafter: 'ngram' }],
  ['self-draft under the grammar', { drafter: 'draft', jumpForward: false }],
  ['self-draft + jump-forward', { drafter: 'draft' }],
];

/**
 * Masking figures for `tokenizer` (a WeftTokenizer) and a model vocabulary of `vocab` ids; with
 * `engine` (a weft Engine in this process), also decode speed plain vs constrained on `prompts`,
 * and speculation under the grammar over the first `o.schemas` (default 50) generated schemas,
 * with the self-draft rows when `o.draft` says the engine has a draft model.
 */
export async function grammarFigures(weft, tokenizer, vocab, engine, prompts, maxTokens, o = {}) {
  const t0 = performance.now();
  const compiler = await weft.GrammarCompiler.create({
    tokens: tokenizer.tokenStrings(vocab),
    type: tokenizer.spelling,
    eosIds: tokenizer.eosIds,
  });
  const t1 = performance.now();
  const constraint = await compiler.compile({ kind: 'json_schema', schema: SCHEMA });
  const t2 = performance.now();
  const ids = tokenizer.encode(REPLY, { addSpecialTokens: false });
  let maskMs = 0;
  let acceptMs = 0;
  const rounds = 20;
  for (let r = 0; r < rounds; r++) {
    for (const id of ids) {
      const a = performance.now();
      await constraint.mask();
      const b = performance.now();
      constraint.accept(id);
      acceptMs += performance.now() - b;
      maskMs += b - a;
    }
    constraint.rollBack(ids.length);
  }
  constraint.dispose();
  compiler.dispose();
  const steps = rounds * ids.length;
  const figures = {
    vocab,
    vocabularySetupMs: t1 - t0,
    schemaCompileMs: t2 - t1,
    tokens: steps,
    maskUsPerToken: (1000 * maskMs) / steps,
    acceptUsPerToken: (1000 * acceptMs) / steps,
    maskBytesPerStep: Math.ceil(vocab / 32) * 4,
  };
  if (engine) {
    const run = async (o) => {
      let tokens = 0;
      let ms = 0;
      for (const p of prompts) {
        for await (const _ of engine.generate(p, { maxTokens, drafter: 'none', jumpForward: false, ...o }));
        tokens += Math.max(0, engine.lastStats.completion_tokens - 1);
        ms += (engine.lastStats.completion_tokens - 1) / Math.max(1e-9, engine.lastStats.decode_tok_s);
      }
      return tokens / Math.max(1e-9, ms);
    };
    await run({}); // warm-up
    const plain = await run({});
    const constrained = await run({ jsonSchema: SCHEMA });
    figures.decodeTokS = { plain, constrained, ratio: constrained / plain };
    figures.speculation = await speculationRows(engine, o.schemas ?? 50, o.draft ?? false);
  }
  return figures;
}

/**
 * Each of {@link SPECULATION_ROWS} (the self-draft ones when `draft`) over the first `count`
 * schemas of test/fixtures/schemas.ts (greedy, the test's prompt and budget), in one run: decode tok/s (tokens after the first over
 * decode time, as GenerationStats.decode_tok_s), tokens per target pass, and how many schemas'
 * ids differ from plain constrained decoding's (0: jump-forward and grammar-aware drafts are exact).
 */
async function speculationRows(engine, count, draft) {
  const { generateSchemas } = await withSources((load) => load('/test/fixtures/schemas.ts'));
  const schemas = generateSchemas(50, 2026).slice(0, count);
  const plainIds = [];
  const rows = [];
  for (const [name, o] of SPECULATION_ROWS) {
    if (o.drafter === 'draft' && !draft) continue;
    let tokens = 0;
    let ms = 0;
    let emitted = 0;
    let passes = 0;
    let differ = 0;
    for (const [i, schema] of schemas.entries()) {
      const ids = [];
      for await (const c of engine.generate('And God said,', { jsonSchema: schema, maxTokens: 160, ...o }))
        ids.push(...c.ids);
      const s = engine.lastStats;
      tokens += Math.max(0, s.completion_tokens - 1);
      ms += (1000 * Math.max(0, s.completion_tokens - 1)) / Math.max(1e-9, s.decode_tok_s);
      // The prompt is one prefill pass; the rest are decode passes.
      emitted += s.tokens_per_pass * (s.target_passes - 1);
      passes += s.target_passes - 1;
      if (rows.length === 0) plainIds.push(ids);
      else if (JSON.stringify(ids) !== JSON.stringify(plainIds[i])) differ++;
    }
    rows.push({ name, tokS: (1000 * tokens) / Math.max(1e-9, ms), tokensPerPass: emitted / passes, differ });
  }
  return { schemas: schemas.length, rows };
}

/** The figures as report lines. */
export function grammarLines(f) {
  const lines = [
    `Grammar masking (XGrammar WASM on the CPU, vocab ${f.vocab}): vocabulary setup ${f.vocabularySetupMs.toFixed(0)} ms once per model, schema compile ${f.schemaCompileMs.toFixed(1)} ms per request`,
    `  per token: next-token mask ${f.maskUsPerToken.toFixed(1)} µs + accept ${f.acceptUsPerToken.toFixed(1)} µs (${f.tokens} tokens), ${f.maskBytesPerStep} B of mask written per step, one mask dispatch per pass`,
  ];
  if (f.decodeTokS)
    lines.push(
      `  decode: plain ${f.decodeTokS.plain.toFixed(2)} tok/s, JSON-schema constrained ${f.decodeTokS.constrained.toFixed(2)} tok/s (ratio ${f.decodeTokS.ratio.toFixed(3)})`,
    );
  else lines.push('  decode tok/s plain vs constrained: not measured (the engine runs in Chromium)');
  if (f.speculation) {
    const [plain] = f.speculation.rows;
    lines.push(`  speculation under the grammar, ${f.speculation.schemas} generated schemas, greedy:`);
    for (const r of f.speculation.rows)
      lines.push(
        `    ${r.name.padEnd(30)} ${r.tokS.toFixed(2).padStart(8)} tok/s (x${(r.tokS / plain.tokS).toFixed(2)})  ${r.tokensPerPass.toFixed(2)} tokens/pass  ids ${r.differ === 0 ? '= plain' : `differ on ${r.differ} schemas`}`,
      );
  }
  return lines;
}
