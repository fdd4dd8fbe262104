// Errors, explained: what went wrong in words a visitor understands, and what to do about it.
import { byId, h } from './dom.js';

const box = byId('problem', HTMLDivElement);

const NO_WEBGPU =
  'This browser has no WebGPU. Use a recent Chrome or Edge (version 113 or newer) on a computer with a supported GPU; check that hardware acceleration is on (Settings → System) and see chrome://gpu. On Linux you may need chrome://flags/#enable-unsafe-webgpu.';

/** The title and advice for an error, by the name it crossed the worker with. */
export function explain(err: unknown): { title: string; advice: string } {
  const name = err instanceof Error ? err.name : '';
  const message = err instanceof Error ? err.message : String(err);
  switch (name) {
    case 'GpuUnavailableError':
      return { title: 'WebGPU is not available.', advice: NO_WEBGPU };
    case 'DeviceLostError':
      return {
        title: 'The GPU stopped responding (device lost).',
        advice:
          'This happens after a driver reset, when the GPU runs out of memory, or when the computer sleeps. Press “Load model” to start again; if it happens again, pick a smaller quantization (int4) or a smaller model, and close other GPU-heavy tabs.',
      };
    case 'QuotaError':
      return {
        title: 'Not enough storage for this model.',
        advice: 'Delete downloaded models below, free disk space, or pick a smaller model.',
      };
    case 'DownloadError':
      return {
        title: 'The model could not be downloaded.',
        advice: /\b40[13]\b/.test(message)
          ? 'This model is gated on Hugging Face (it needs a signed-in account that accepted its licence); pick another model.'
          : /\b404\b/.test(message)
            ? 'Check the model id and revision.'
            : 'Check your connection and try again; what was already downloaded is kept.',
      };
    case 'SteerMismatchError':
      return {
        title: 'This steering file was measured on another model.',
        advice:
          'A steering direction only means something in the model it was measured on. Measure one for this model with “npx weft steer measure”, or press “No steering”.',
      };
    case 'InvalidInputError':
      return message.startsWith('steer:')
        ? {
            title: 'The steering settings do not fit this model.',
            advice: 'Check the layers (0 to the number of layers − 1) and the scale, or press “No steering”.',
          }
        : { title: 'Something went wrong.', advice: '' };
    case 'ModelFormatError':
    case 'UnsupportedModelError':
      return {
        title: 'This model cannot be read.',
        advice:
          'weft runs Llama, Mistral, Qwen2, Qwen3, Qwen3.5, Gemma 3, Gemma 4, SmolLM3, Phi-3, LFM2 and Ministral 3 models and their mixtures of experts, from Hugging Face safetensors, GGUF files or weft folders.',
      };
    default:
      return { title: 'Something went wrong.', advice: '' };
  }
}

/** Shows `err` above the page, with advice. */
export function showProblem(err: unknown): void {
  const { title, advice } = explain(err);
  const detail = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  box.dataset.error = err instanceof Error ? err.name : 'unknown';
  box.replaceChildren(
    h('strong', {}, title),
    ...(advice ? [h('p', {}, advice)] : []),
    h('p', { class: 'detail' }, detail),
  );
  box.hidden = false;
}

/** Shows that WebGPU is missing before anything was tried. */
export function showNoWebGpu(): void {
  box.dataset.error = 'GpuUnavailableError';
  box.replaceChildren(h('strong', {}, 'WebGPU is not available.'), h('p', {}, NO_WEBGPU));
  box.hidden = false;
}

/** Hides the message. */
export function clearProblem(): void {
  box.hidden = true;
}
