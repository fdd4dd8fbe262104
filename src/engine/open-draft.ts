// What a `{ model }`, `{ head }` or `{ assistant }` draft of createEngine names, opened beside its
// target: loaded only when an engine is asked for one.
import { InvalidInputError } from '../errors.js';
import type { ModelFiles } from '../formats/io/files.js';
import type { Assistant } from '../model/draft/assistant.js';
import type { DraftHead } from '../model/draft/head.js';
import { type OpenedModel, openModel } from '../model/load.js';
import { ropeForContext } from '../model/spec/spec.js';
import { type ModelRef, parseHubRef, resolveModel } from '../store/source.js';
import type { WeftTokenizer } from '../tokenizer/tokenizer.js';
import { openModelSource } from './open.js';

/**
 * The assistant published beside a hub model (`draft: 'assistant'`): Google names it after its
 * target, `google/gemma-4-E2B-it` → `google/gemma-4-E2B-it-assistant`. A target given otherwise (a
 * URL, a folder, files, a GGUF file) has no such neighbour: InvalidInputError asks for
 * `draft: { assistant: ref }`.
 */
export function companionAssistant(model: ModelRef): ModelRef {
  const hub =
    typeof model === 'string'
      ? /^(\.{0,2}\/|[a-z]+:)/i.test(model)
        ? undefined
        : parseHubRef(model)
      : 'kind' in model && model.kind === 'hub'
        ? model
        : undefined;
  if (!hub || hub.file)
    throw new InvalidInputError(
      `draft 'assistant': the assistant is found beside a hub model id (org/name → org/name-assistant), and the model is ${describe(model)}; pass draft: { assistant: '<folder, URL or hub id>' }`,
    );
  const id = `${hub.id}-assistant`;
  // The target's revision names the target's history, not the assistant's: its default branch.
  const baseUrl = typeof model === 'string' ? undefined : (model as { baseUrl?: string }).baseUrl;
  return typeof model === 'string' ? id : { kind: 'hub', id, ...(baseUrl ? { baseUrl } : {}) };
}

function describe(model: ModelRef): string {
  if (typeof model === 'string') return JSON.stringify(model);
  if ('kind' in model && model.kind === 'hub') return `hub ${model.id}${model.file ? `/${model.file}` : ''}`;
  return 'name' in model && model.name ? JSON.stringify(model.name) : 'not a hub id';
}

/** A draft model's files and headers, opened beside its target. */
export interface OpenedDraft {
  files: ModelFiles;
  opened: OpenedModel;
}

/**
 * Opens what a `{ model }`, `{ head }` or `{ assistant }` draft names: a Gemma 4 assistant or a
 * draft head (read whole: they are small, with the target tensors they read), or a draft model (its headers and tokenizer), checked to share the
 * target's tokenizer: the same vocabulary size and the same token at every id. A draft model's
 * RoPE is the one for the engine's `context` (as the target's).
 */
export async function openDraft(
  draft: { model: ModelRef } | { head: ModelRef } | { assistant: ModelRef },
  target: OpenedModel,
  resolve: Parameters<typeof resolveModel>[1],
  { context }: { context: number },
): Promise<OpenedDraft | { head: DraftHead } | { assistant: Assistant }> {
  const ref = 'head' in draft ? draft.head : 'assistant' in draft ? draft.assistant : draft.model;
  const files = await openModelSource(resolveModel(ref, resolve));
  try {
    const assistant = await (await import('../model/draft/assistant.js')).assistantIn(
      files,
      target,
      'assistant' in draft,
    );
    if (assistant) {
      await files.close?.();
      return { assistant };
    }
    const heads = await import('../model/draft/head.js');
    if ('head' in draft || (await heads.isDraftHead(files))) {
      const head = await heads.openDraftHead(files, target);
      await files.close?.();
      return { head };
    }
    const opened = await openModel(files);
    const { vocabSize } = target.spec;
    if (opened.spec.vocabSize !== vocabSize)
      throw new InvalidInputError(
        `draft model ${files.name} has a vocabulary of ${opened.spec.vocabSize}, the target ${vocabSize}: they must share the tokenizer`,
      );
    const differs = target.tokenizer.firstDifference(opened.tokenizer);
    if (differs !== undefined) {
      const token = (t: WeftTokenizer) => JSON.stringify(t.tokenOf(differs) ?? null);
      throw new InvalidInputError(
        `draft model ${files.name} has another tokenizer: id ${differs} is ${token(opened.tokenizer)} there, ${token(target.tokenizer)} in the target; they must share the tokenizer`,
      );
    }
    return { files, opened: { ...opened, spec: ropeForContext(opened.spec, context) } };
  } catch (err) {
    await files.close?.();
    throw err;
  }
}
