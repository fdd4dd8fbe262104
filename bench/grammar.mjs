// The cost of constrained decoding per token, for `npm run bench`: the grammar engine's work on the
// CPU (the next-token bitmask and the advance past the chosen token, XGrammar's WASM, the same code
// a page or worker runs) over a JSON reply tokenized by the demo target's tokenizer, the bytes of
// mask written to the GPU per step, and (when the engine runs in this process) decode tok/s of the
// same prompts plain and under a JSON schema, measured in one run.

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

/**
 * Masking figures for `tokenizer` (a WeftTokenizer) and a model vocabulary of `vocab` ids; with
 * `engine` (a weft Engine in this process), also decode speed plain vs constrained on `prompts`.
 */
export async function grammarFigures(weft, tokenizer, vocab, engine, prompts, maxTokens) {
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
        for await (const _ of engine.generate(p, { maxTokens, drafter: 'none', ...o }));
        tokens += Math.max(0, engine.lastStats.completion_tokens - 1);
        ms += (engine.lastStats.completion_tokens - 1) / Math.max(1e-9, engine.lastStats.decode_tok_s);
      }
      return tokens / Math.max(1e-9, ms);
    };
    await run({}); // warm-up
    const plain = await run({});
    const constrained = await run({ jsonSchema: SCHEMA });
    figures.decodeTokS = { plain, constrained, ratio: constrained / plain };
  }
  return figures;
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
  return lines;
}
