// Test page for the wllama parity tests (test/browser/gguf-*-wllama.test.ts): llama.cpp (wllama, in WebAssembly, on the
// CPU) greedy on a GGUF the Node side serves, as `window.wllamaGreedy`. The ids come from the
// logprobs of the sampling chain's candidates (`post_sampling_probs`): llama.cpp's server otherwise
// lists the top tokens of the raw logits, where a random model's banned byte tokens (≥ 0x80) show
// up, and the invalid UTF-8 of their text throws in the server's JSON (wllama then fails reading
// the reply, "Invalid typed array length"), which limited such runs to a few tokens.
import { Wllama } from '@wllama/wllama';

/** What a greedy run returns: the generated text and ids, and how many prompt tokens llama.cpp saw. */
export interface WllamaGreedy {
  text: string;
  /** The generated ids, from the per-token probabilities llama.cpp's server reports. */
  ids: number[] | null;
  promptTokens: number | undefined;
}

declare global {
  interface Window {
    wllamaGreedy(
      ggufUrl: string,
      prompt: string,
      maxTokens: number,
      banned: readonly number[],
      exactAttention?: boolean,
    ): Promise<WllamaGreedy>;
  }
}

/**
 * Greedy decoding of `maxTokens` after `prompt` with the `banned` ids biased by -1000 (a random
 * model's byte tokens would otherwise end the text mid-character, which llama.cpp's server refuses
 * to put in its JSON), in a context of 128 tokens. `exactAttention`: an f32 KV cache without flash
 * attention (llama.cpp's defaults store K and V in f16 and, on the CPU, take q·k in f16 too: a
 * mixture's router then meets rows a few 1e-3 off weft's f32 ones, enough to flip a close choice).
 */
window.wllamaGreedy = async (ggufUrl, prompt, maxTokens, banned, exactAttention = false) => {
  const wllama = new Wllama({ default: '/node_modules/@wllama/wllama/esm/wasm/wllama.wasm' });
  try {
    const blob = await (await fetch(ggufUrl)).blob();
    const exact = { cache_type_k: 'f32', cache_type_v: 'f32', flash_attn: false } as const;
    await wllama.loadModel([blob], {
      n_ctx: 128,
      n_batch: 128,
      n_threads: 1,
      ...(exactAttention ? exact : {}),
    });
    const request = {
      prompt,
      stream: false as const,
      max_tokens: maxTokens,
      temperature: 0,
      top_k: 1,
      ignore_eos: true,
      cache_prompt: false,
      logprobs: 1,
      post_sampling_probs: true,
    };
    // llama.cpp's server takes logit_bias as { id: bias }; wllama's typings give the key two
    // incompatible types (that object in RawCompletionParams, an array in SamplingParams).
    Reflect.set(request, 'logit_bias', Object.fromEntries(banned.map((id) => [String(id), -1000])));
    const r = await wllama.createCompletion(request);
    const choice = r.choices[0];
    return { text: choice?.text ?? '', ids: generatedIds(choice), promptTokens: r.timings?.prompt_n };
  } finally {
    await wllama.exit();
  }
};

/**
 * The ids in a completion choice's `logprobs.content[].id` (llama.cpp's server answers with its
 * chat-style logprobs, which wllama's `RawCompletionChoice` type does not describe).
 */
function generatedIds(choice: object | undefined): number[] | null {
  if (choice === undefined || !('logprobs' in choice)) return null;
  const lp = choice.logprobs;
  if (typeof lp !== 'object' || lp === null || !('content' in lp) || !Array.isArray(lp.content)) return null;
  return lp.content.map((c: unknown) =>
    typeof c === 'object' && c !== null && 'id' in c ? Number(c.id) : -1,
  );
}

document.querySelector('[data-testid="wllama-ready"]')!.textContent = 'ready';
