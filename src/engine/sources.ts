// What weft's engine worker does with a model named as plain data: resolve it, open it (remote
// models through the weights cache unless told otherwise, local files in place), and load it.

import type { DownloadProgress } from '../store/download.js';
import { type ModelChoice, resolveModel } from '../store/source.js';
import { type CreateEngineOptions, createEngine, type LoadProgress } from './create.js';
import type { Engine } from './engine.js';
import { type OpenSourceOptions, openModelSource } from './open.js';

/** Load options of {@link loadChoice}: a {@link ModelChoice} and the engine's own settings. */
export interface ChoiceLoadOptions
  extends Omit<CreateEngineOptions, 'model' | 'draft' | 'onProgress' | 'gpu' | 'replaceGpu'> {
  readonly choice: ModelChoice;
  /** A separate draft model for speculative decoding (it must share the target's tokenizer). */
  readonly draft?: ModelChoice;
  /**
   * Whether remote models go through the weights cache (downloaded once, resumable and verified,
   * then read from IndexedDB, also offline) or are read in place. Default true.
   */
  readonly cache?: boolean;
}

/**
 * Events of {@link loadChoice}, in order: `download` while remote files are fetched into the cache
 * (`role` says whether they are the target's or the draft's), `load` while weights are placed on
 * the device, and one `model` when the engine is ready (`chat`: the tokenizer has a chat template,
 * so prompts are conversations; otherwise the model continues plain text).
 */
export type ChoiceLoadEvent =
  | { readonly kind: 'download'; readonly role: 'target' | 'draft'; readonly progress: DownloadProgress }
  | { readonly kind: 'load'; readonly progress: LoadProgress }
  | { readonly kind: 'model'; readonly name: string; readonly chat: boolean };

/**
 * Loads a {@link ModelChoice} (and its draft model, if any) into an engine, reporting
 * {@link ChoiceLoadEvent}s. This is what the engine worker runs for the demo page.
 */
export async function loadChoice(
  options: ChoiceLoadOptions,
  onEvent: (e: ChoiceLoadEvent) => void,
  open: Omit<OpenSourceOptions, 'cache' | 'onProgress'> = {},
): Promise<Engine> {
  const { choice, draft, cache = true, ...engineOptions } = options;
  const resolve = (model: ModelChoice) =>
    resolveModel(model, options.hubBase === undefined ? {} : { hubBase: options.hubBase });
  const files = await openModelSource(resolve(choice), {
    ...open,
    cache,
    onProgress: (progress) => onEvent({ kind: 'download', role: 'target', progress }),
  });
  const draftFiles = draft
    ? await openModelSource(resolve(draft), {
        ...open,
        cache,
        onProgress: (progress) => onEvent({ kind: 'download', role: 'draft', progress }),
      })
    : undefined;
  const engine = await createEngine({
    ...engineOptions,
    model: files,
    ...(draftFiles ? { draft: { model: draftFiles } } : {}),
    onProgress: (progress) => onEvent({ kind: 'load', progress }),
  });
  onEvent({ kind: 'model', name: files.name, chat: engine.hasChatTemplate });
  return engine;
}
