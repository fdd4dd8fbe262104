// Steering settings: a steering file (measured with `weft steer measure` on the model being loaded),
// its mode, scale and layers. Steering is a load-time option of the engine, so these apply when the
// model is (re)loaded; the file's bytes travel to the engine worker with the load options.

import { InvalidInputError, readSteerFile, type SteerMode, type SteerOptions } from '../../src/index.js';
import { byId } from './dom.js';
import { clearProblem } from './problem.js';

const fileInput = byId('steer-file', HTMLInputElement);
const clearButton = byId('steer-clear', HTMLButtonElement);
const modeSelect = byId('steer-mode', HTMLSelectElement);
const scaleInput = byId('steer-scale', HTMLInputElement);
const layersInput = byId('steer-layers', HTMLInputElement);
const inputsCheck = byId('steer-inputs', HTMLInputElement);
const note = byId('steer-note', HTMLParagraphElement);

const MODES: readonly SteerMode[] = ['ablate', 'add'];

/**
 * The chosen file, read and checked as soon as it is picked, so a broken file is reported at once
 * (a file of another model can only be caught at load, against the model's checksum).
 */
let chosen: { name: string; bytes: Uint8Array } | undefined;

function sync(): void {
  const enabled = chosen !== undefined;
  for (const e of [modeSelect, layersInput, inputsCheck, clearButton]) e.disabled = !enabled;
  // "ablate" has no scale.
  scaleInput.disabled = !enabled || modeSelect.value !== 'add';
  if (!enabled) {
    note.textContent = 'No steering file: the model runs unchanged.';
    delete note.dataset.state;
  }
}

async function pick(): Promise<void> {
  const file = fileInput.files?.[0];
  chosen = undefined;
  // A message about the previous file no longer applies.
  clearProblem();
  sync();
  if (!file) return;
  const bytes = new Uint8Array(await file.arrayBuffer());
  try {
    const f = await readSteerFile(bytes, file.name);
    chosen = { name: file.name, bytes };
    sync();
    // The file's defaults fill the fields; the user may change them before loading.
    modeSelect.value = f.mode;
    scaleInput.value = String(Number(f.scale.toPrecision(4)));
    layersInput.value = f.defaultLayers === 'all' ? 'all' : f.defaultLayers.join(',');
    sync();
    note.textContent = `${file.name}: ${f.layers.size || 1} vector(s) of width ${f.hidden}, measured on model ${f.modelChecksum.slice(0, 12)}…; applies when the model is (re)loaded.`;
    note.dataset.state = 'ready';
  } catch (err) {
    fileInput.value = '';
    note.textContent = `${file.name} is not a steering file: ${err instanceof Error ? err.message : String(err)}`;
    note.dataset.state = 'invalid';
  }
}

fileInput.addEventListener('change', () => void pick());
modeSelect.addEventListener('change', sync);
clearButton.addEventListener('click', () => {
  fileInput.value = '';
  chosen = undefined;
  sync();
});
sync();

/** The layers field: `all`, or comma-separated layer indices. */
function parseLayersField(text: string): readonly number[] | 'all' {
  if (text === 'all') return 'all';
  const parts = text.split(',').map((s) => s.trim());
  if (!parts.every((p) => /^\d+$/.test(p)))
    throw new InvalidInputError(`steer: layers "${text}" must be "all" or comma-separated layer indices`);
  return parts.map(Number);
}

/**
 * The engine's `steer` option for the next load, or undefined when no file is chosen. Throws
 * InvalidInputError (message starting "steer:") when the layers field does not parse.
 */
export function steerSettings(): SteerOptions | undefined {
  if (!chosen) return undefined;
  const mode = MODES.find((m) => m === modeSelect.value) ?? 'ablate';
  const scale = Number(scaleInput.value);
  const layersText = layersInput.value.trim();
  return {
    // A copy: the worker receives it by structured clone, and the page keeps its own for reloads.
    file: chosen.bytes.slice(),
    fileName: chosen.name,
    mode,
    ...(scaleInput.value.trim() !== '' && Number.isFinite(scale) ? { scale } : {}),
    ...(layersText ? { layers: parseLayersField(layersText) } : {}),
    inputs: inputsCheck.checked,
  };
}

/** A short description of the active steering, for the "Loaded" line. */
export function steerSummary(o: SteerOptions | undefined): string {
  if (!o) return '';
  const layers =
    o.layers === undefined
      ? "the file's layers"
      : o.layers === 'all'
        ? 'all layers'
        : `layer${o.layers.length === 1 ? '' : 's'} ${o.layers.join(',')}`;
  return o.mode === 'add'
    ? `, steered: add ×${o.scale ?? "the file's scale"} at ${layers}`
    : `, steered: ablate at ${layers}`;
}
