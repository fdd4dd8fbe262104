// Generation settings: sampling, length and speculative decoding, read fresh for every request.

import type { DrafterKind, GenerateOptions, KvFormat, Quant } from '../../src/index.js';
import { byId } from './dom.js';

const temperature = byId('temperature', HTMLInputElement);
const topP = byId('top-p', HTMLInputElement);
const maxTokens = byId('max-tokens', HTMLInputElement);
const drafter = byId('drafter', HTMLSelectElement);
const treeBudget = byId('tree-budget', HTMLInputElement);
const speculation = byId('speculation', HTMLSelectElement);
const quant = byId('quant', HTMLSelectElement);
const context = byId('context', HTMLInputElement);
const kvCache = byId('kv-cache', HTMLSelectElement);
const jsonOutput = byId('json-output', HTMLSelectElement);
const jsonSchema = byId('json-schema', HTMLTextAreaElement);
const jsonSchemaRow = byId('json-schema-row', HTMLDivElement);

const DRAFTERS: readonly DrafterKind[] = ['none', 'ngram', 'draft'];
const QUANTS: readonly Quant[] = ['f32', 'f16', 'int8', 'int4', 'int2', 'w8a8'];

// Sliders show their value beside the label.
for (const [input, id] of [
  [temperature, 'temperature-value'],
  [topP, 'top-p-value'],
  [treeBudget, 'tree-budget-value'],
] as const) {
  const out = byId(id, HTMLOutputElement);
  const sync = () => {
    out.value = input.value;
  };
  input.addEventListener('input', sync);
  sync();
}
const syncBudget = () => {
  treeBudget.disabled = drafter.value === 'none';
  speculation.disabled = drafter.value === 'none';
};
drafter.addEventListener('change', syncBudget);
syncBudget();
const syncJson = () => {
  jsonSchemaRow.hidden = jsonOutput.value !== 'schema';
};
jsonOutput.addEventListener('change', syncJson);
syncJson();

/**
 * The constraint of the "JSON output" setting. The schema goes as typed: the engine parses it and
 * refuses bad JSON or a bad schema with a GrammarError, shown like any other problem.
 */
function jsonOptions(): GenerateOptions {
  if (jsonOutput.value === 'object') return { json: true };
  if (jsonOutput.value === 'schema') return { jsonSchema: jsonSchema.value };
  return {};
}

/** Options of the next request. */
export function generateOptions(): GenerateOptions {
  const json = jsonOptions();
  const kind = DRAFTERS.find((d) => d === drafter.value) ?? 'none';
  return {
    temperature: Number(temperature.value),
    topP: Number(topP.value),
    maxTokens: Math.max(1, Math.floor(Number(maxTokens.value) || 1)),
    drafter: kind,
    // By default speculation where it pays on this device: the engine measures and drops it where
    // it loses; 'always' shows the drafter at every step, even where it is slower.
    ...(kind === 'none'
      ? {}
      : {
          treeBudget: Number(treeBudget.value),
          speculation: speculation.value === 'always' ? ('always' as const) : ('adaptive' as const),
        }),
    ...json,
  };
}

/**
 * Load-time settings: weight precision, context length (left empty: the model's own, up to 2048;
 * more than the model's own is refused by the engine with a message naming both) and the KV
 * cache's element type.
 */
export function loadSettings(): { quant: Quant; contextLength?: number; kvCache: KvFormat } {
  const asked = Math.floor(Number(context.value));
  return {
    quant: QUANTS.find((q) => q === quant.value) ?? 'f16',
    ...(context.value.trim() !== '' && asked > 0 ? { contextLength: Math.max(64, asked) } : {}),
    kvCache: kvCache.value === 'f16' ? 'f16' : 'f32',
  };
}

/** Selects a drafter (the demo picks 'draft' when a draft model was loaded). */
export function setDrafter(kind: DrafterKind): void {
  drafter.value = kind;
  syncBudget();
}
