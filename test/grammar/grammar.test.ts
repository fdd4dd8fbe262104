// Constrained decoding on the bundled demo target (models/kjv-target, a base model of KJV text)
// through the CPU reference runner: for 50 generated JSON schemas every output parses and validates
// (ajv), and speculation under the grammar (jump-forward, drafts grown under the grammar) gives the
// same ids, greedy and seeded; bad schemas, grammars and regexes are refused with GrammarError; EBNF
// and regex outputs match.
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { Engine } from '../../src/engine/engine.js';
import type { GenerateOptions } from '../../src/engine/types.js';
import { InvalidInputError } from '../../src/errors.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { GrammarError } from '../../src/grammar/errors.js';
import { generateSchemas } from '../fixtures/schemas.js';

let engine: Engine;
beforeAll(async () => {
  engine = await createEngine({
    model: await pathModel('models/kjv-target'),
    device: 'cpu',
    quant: 'f16',
    contextLength: 256,
    draft: { self: 'int4' },
  });
}, 60_000);
afterAll(() => engine.unload());

async function text(
  prompt: string,
  o: GenerateOptions,
): Promise<{ text: string; finish: string; ids: number[] }> {
  let out = '';
  let finish = '';
  const ids: number[] = [];
  for await (const c of engine.generate(prompt, o)) {
    out += c.text;
    ids.push(...c.ids);
    if (c.finishReason) finish = c.finishReason;
  }
  return { text: out, finish, ids };
}

describe('constrained decoding on the demo target', () => {
  it('50 generated JSON schemas: every output parses and validates; with jump-forward and grammar-aware drafts, speculative ids = plain ids, greedy and seeded', {
    timeout: 600_000,
  }, async () => {
    const ajv = new Ajv({ strict: false });
    const schemas = generateSchemas(50, 2026);
    const prompt = 'And God said,';
    let tokens = 0;
    // Self-int4 speculation with jump-forward on the greedy runs: tokens emitted, target passes.
    const self = { tokens: 0, passes: 0 };
    for (const [i, schema] of schemas.entries()) {
      const validate = ajv.compile(schema);
      // Plain constrained decoding (no drafter, no jump-forward): greedy on every schema, seeded
      // sampling at T = 1 on the odd ones and every fifth.
      const modes: GenerateOptions[] = [
        {},
        ...(i % 2 === 1 || i % 5 === 0 ? [{ temperature: 1, seed: i }] : []),
      ];
      for (const mode of modes) {
        const base: GenerateOptions = { jsonSchema: schema, maxTokens: 160, ...mode };
        const out = await text(prompt, { ...base, drafter: 'none', jumpForward: false });
        tokens += engine.lastStats!.completion_tokens;
        const label = `schema ${i} ${mode.temperature ? 'seeded' : 'greedy'}`;
        expect(out.finish, `${label}: ${JSON.stringify(schema)} gave ${out.text}`).toBe('stop');
        const parsed: unknown = JSON.parse(out.text);
        expect(
          validate(parsed),
          `${label}: ${JSON.stringify(schema)}\n${out.text}\n${ajv.errorsText(validate.errors)}`,
        ).toBe(true);
        if (i < 3) console.log(`[grammar] ${label}: ${out.text}`);
        // The same ids with jump-forward (the default) and drafts grown under the grammar: self-int4
        // draft trees on every fifth schema (the CPU reference verifies slowly), n-gram trees on
        // the others.
        const drafter = i % 5 === 0 ? 'draft' : 'ngram';
        expect((await text(prompt, { ...base, drafter })).ids, `${label} ${drafter}`).toEqual(out.ids);
        if (drafter === 'draft' && !mode.temperature) {
          const s = engine.lastStats!;
          // Every pass after the prompt's one prefill pass is a decode pass.
          const passes = s.target_passes - 1;
          self.tokens += s.tokens_per_pass * passes;
          self.passes += passes;
        }
      }
    }
    const perPass = self.tokens / self.passes;
    console.log(
      `[grammar] 50 schemas, ${tokens} plain tokens in all; self-int4 speculation with jump-forward on every fifth, greedy: ${perPass.toFixed(2)} tokens per target pass`,
    );
    // Issue 41: at most 0.6 target passes per output token (1.06 tokens per pass before).
    expect(perPass).toBeGreaterThanOrEqual(1 / 0.6);
  });

  it('json: one JSON object', { timeout: 60_000 }, async () => {
    const out = await text('In the beginning', { json: true, maxTokens: 120 });
    if (out.finish === 'stop') expect(typeof JSON.parse(out.text)).toBe('object');
    expect(out.text.startsWith('{')).toBe(true);
  });

  it('grammar (EBNF) and regex outputs match', { timeout: 60_000 }, async () => {
    const g = await text('And the LORD', {
      grammar: 'root ::= ("yea" | "nay") ", " [a-z]{1,8} "."',
      maxTokens: 40,
    });
    expect(g.finish).toBe('stop');
    expect(g.text).toMatch(/^(yea|nay), [a-z]{1,8}\.$/);
    const r = await text('And the LORD', { regex: '[A-Z][a-z]{2,6} [0-9]{1,3}', maxTokens: 40 });
    expect(r.finish).toBe('stop');
    expect(r.text).toMatch(/^[A-Z][a-z]{2,6} [0-9]{1,3}$/);
  });

  it('chat.completions response_format json_schema goes through the same constraint', {
    timeout: 60_000,
  }, async () => {
    const schema = { type: 'object', properties: { king: { enum: ['david', 'saul'] } }, required: ['king'] };
    const res = await engine.chat.completions.create({
      messages: [{ role: 'user', content: 'Who was king?' }],
      max_tokens: 40,
      temperature: 0,
      response_format: { type: 'json_schema', json_schema: { name: 'k', schema } },
    });
    expect(JSON.parse(res.choices[0]!.message.content)).toMatchObject({
      king: expect.stringMatching(/^(david|saul)$/),
    });
  });

  it('bad schemas, grammars and regexes are refused with GrammarError naming the problem', {
    timeout: 60_000,
  }, async () => {
    const refused = async (o: GenerateOptions) => {
      try {
        await text('And', { ...o, maxTokens: 4 });
      } catch (e) {
        return e;
      }
      return undefined;
    };
    const cases: [GenerateOptions, string, RegExp][] = [
      [{ jsonSchema: { type: 'objekt' } }, 'json_schema', /"objekt" is not a JSON type/],
      [{ jsonSchema: '{"type": ' }, 'json_schema', /not JSON/],
      [
        { jsonSchema: { type: 'object', properties: { a: 3 } } },
        'json_schema',
        /properties\/a must be an object/,
      ],
      [
        { jsonSchema: { type: 'object', properties: { a: { type: 'string', pattern: '(' } } } },
        'json_schema',
        /#\/properties\/a\/pattern: Invalid regular expression/,
      ],
      [{ grammar: 'root ::= "a" |' }, 'grammar', /EBNF parser error at line 1/],
      [{ grammar: 'start ::= "a"' }, 'grammar', /root/],
      [{ regex: '[a-' }, 'regex', /Invalid regular expression/],
    ];
    for (const [o, kind, problem] of cases) {
      const e = await refused(o);
      expect(e, JSON.stringify(o)).toBeInstanceOf(GrammarError);
      expect((e as GrammarError).kind).toBe(kind);
      expect((e as GrammarError).problem, JSON.stringify(o)).toMatch(problem);
    }
    // The engine stays usable after a refusal, and two constraints at once are refused.
    expect((await text('And', { regex: 'amen', maxTokens: 8 })).text).toBe('amen');
    await expect(text('And', { json: true, regex: 'a' })).rejects.toThrow(InvalidInputError);
    await expect(
      text('And', { json: true, drafter: 'ngram', acceptance: 'rejection', temperature: 1, maxTokens: 4 }),
    ).rejects.toThrow(/rejection/);
  });
});
