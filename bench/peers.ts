// The peers of the browser benchmark, run in the same page on the same prompts (token ids) and
// generating the same number of tokens, greedy: wllama (llama.cpp in WebAssembly) on GGUF files
// written by weft's exporter, and transformers.js (onnxruntime-web) on the ONNX export of
// tools/onnx/export.py. Timing is taken the same way as weft's stats: from the call to the first
// generated token (TTFT, whose inverse over the prompt is the prefill rate), then (n - 1) tokens
// over the time from the first to the last.
import { type SpeedFigures, summarize } from './browser.js';

/** One peer row, with the generated tokens of the last run. */
export interface PeerRow extends SpeedFigures {
  runtime: 'wllama' | 'transformers.js';
  /** The weight format the peer ran (GGUF Q8_0 / Q4_0, ONNX fp32). */
  format: string;
  /** What it ran on: 'wasm (N threads)', 'webgpu', or 'wasm (fallback: reason)'. */
  backend: string;
  /** Generated ids per prompt (last run), where the peer returns them. */
  ids: number[][] | null;
  /** Generated text per prompt (last run). */
  texts: string[];
}

/** A prompt as text and as weft's token ids (BOS included). */
export interface BenchPrompt {
  text: string;
  ids: number[];
}

/** Options shared by the peers. */
export interface PeerBenchOptions {
  prompts: BenchPrompt[];
  warmup: BenchPrompt;
  maxTokens: number;
  runs: number;
  log?: (line: string) => void;
}

/** A clock for one request: call → first token → last token. */
class RequestClock {
  private readonly t0 = performance.now();
  private tFirst = 0;
  private tLast = 0;
  tokens = 0;

  /** Records `n` newly generated tokens. */
  got(n: number): void {
    if (n <= 0) return;
    const t = performance.now();
    if (this.tokens === 0) this.tFirst = t;
    this.tLast = t;
    this.tokens += n;
  }

  figures(promptTokens: number): SpeedFigures {
    const ttft = this.tFirst - this.t0;
    return {
      prefillTokS: promptTokens / Math.max(1e-9, ttft / 1000),
      decodeTokS: Math.max(0, this.tokens - 1) / Math.max(1e-9, (this.tLast - this.tFirst) / 1000),
      ttftMs: ttft,
      tokensPerPass: 1,
      promptTokens,
      completionTokens: this.tokens,
    };
  }
}

async function measure(
  o: PeerBenchOptions,
  one: (
    prompt: BenchPrompt,
    maxTokens: number,
  ) => Promise<{ figures: SpeedFigures; text: string; ids: number[] | null }>,
): Promise<{ figures: SpeedFigures; texts: string[]; ids: number[][] | null }> {
  await one(o.warmup, Math.min(4, o.maxTokens));
  const runs: SpeedFigures[][] = [];
  let texts: string[] = [];
  let ids: number[][] | null = [];
  for (let r = 0; r < o.runs; r++) {
    const run: SpeedFigures[] = [];
    texts = [];
    ids = [];
    for (const p of o.prompts) {
      const g = await one(p, o.maxTokens);
      run.push(g.figures);
      texts.push(g.text);
      if (ids && g.ids) ids.push(g.ids);
      else ids = null;
    }
    runs.push(run);
  }
  return { figures: summarize(runs), texts, ids };
}

/**
 * wllama on one GGUF file (an URL served by the bench's server). `gpu` asks llama.cpp's WebGPU
 * backend for every layer; without it (the default) wllama runs on the CPU: that backend needs
 * shader-f16, which SwiftShader lacks.
 */
export async function runWllama(
  o: PeerBenchOptions & { gguf: string; format: string; wasm: string; gpu: boolean },
): Promise<PeerRow> {
  const { Wllama } = await import('@wllama/wllama');
  const wllama = new Wllama({ default: o.wasm }, { suppressNativeLog: true });
  // wllama's default thread count (half the cores): on a busy 2-core machine, giving llama.cpp's
  // spinning thread pool both cores made it 10-20x slower than one thread.
  await wllama.loadModelFromUrl(o.gguf, { n_ctx: 256, n_batch: 256, n_gpu_layers: o.gpu ? 999 : 0 });
  const threads = `${wllama.getNumThreads()} thread${wllama.getNumThreads() === 1 ? '' : 's'}`;
  const backend = o.gpu ? `webgpu requested, all layers (${threads})` : `wasm (${threads})`;
  try {
    const result = await measure(o, async (prompt, maxTokens) => {
      // wllama takes text only (its server code rejects token arrays); the prompt must come out as
      // exactly weft's ids, which the prompt token count checks.
      const request = {
        prompt: prompt.text,
        stream: true as const,
        max_tokens: maxTokens,
        temperature: 0,
        top_k: 1,
        ignore_eos: true,
        cache_prompt: false,
      };
      const clock = new RequestClock();
      let text = '';
      let timings: { prompt_n: number; predicted_n: number } | undefined;
      for await (const chunk of await wllama.createCompletion(request)) {
        // One streamed chunk per sampled token (an empty text when a token ends mid-character);
        // the final chunk carries only the finish reason and the timings.
        if (chunk.choices[0]?.finish_reason === null) clock.got(1);
        text += chunk.choices[0]?.text ?? '';
        if (chunk.timings) timings = chunk.timings;
      }
      if (timings?.prompt_n !== prompt.ids.length)
        throw new Error(
          `wllama processed ${timings?.prompt_n} prompt tokens, weft's prompt has ${prompt.ids.length}`,
        );
      if (timings.predicted_n !== clock.tokens)
        throw new Error(`wllama generated ${timings.predicted_n} tokens, ${clock.tokens} were streamed`);
      return { figures: clock.figures(prompt.ids.length), text, ids: null };
    });
    o.log?.(`wllama ${o.format}: decode ${result.figures.decodeTokS.toFixed(2)} tok/s`);
    return {
      runtime: 'wllama',
      format: o.format,
      backend,
      ...result.figures,
      ids: result.ids,
      texts: result.texts,
    };
  } finally {
    await wllama.exit();
  }
}

/**
 * transformers.js on the ONNX export (`<modelRoot><model>/onnx/model.onnx`, fp32), on `device`:
 * 'webgpu' (the page's adapter) or 'wasm' (onnxruntime-web on the CPU, the reference point that
 * shows which backend a WebGPU row really ran on). If the WebGPU backend cannot start, the row runs
 * on wasm and its `backend` says why.
 */
export async function runTransformersJs(
  o: PeerBenchOptions & { modelRoot: string; model: string; wasmRoot: string; device: 'webgpu' | 'wasm' },
): Promise<PeerRow> {
  const { AutoModelForCausalLM, AutoTokenizer, TextStreamer, Tensor, env } = await import(
    '@huggingface/transformers'
  );
  // Offline: the model and onnxruntime-web's wasm come from this server, never from a CDN.
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = o.modelRoot;
  env.useBrowserCache = false;
  const onnxEnv = env.backends.onnx;
  if (onnxEnv.wasm) {
    onnxEnv.wasm.wasmPaths = {
      mjs: `${o.wasmRoot}ort-wasm-simd-threaded.asyncify.mjs`,
      wasm: `${o.wasmRoot}ort-wasm-simd-threaded.asyncify.wasm`,
    };
  }
  const load = (device: 'webgpu' | 'wasm') =>
    AutoModelForCausalLM.from_pretrained(o.model, { device, dtype: 'fp32' });
  let backend: string = o.device;
  let model: Awaited<ReturnType<typeof load>>;
  try {
    model = await load(o.device);
  } catch (e) {
    if (o.device === 'wasm') throw e;
    backend = `wasm (fallback: WebGPU failed: ${e instanceof Error ? e.message : String(e)})`;
    o.log?.(`transformers.js: ${backend}`);
    model = await load('wasm');
  }
  const tokenizer = await AutoTokenizer.from_pretrained(o.model);
  try {
    const result = await measure(o, async (prompt, maxTokens) => {
      const ids: number[] = [];
      const clock = new RequestClock();
      const shape = [1, prompt.ids.length];
      await model.generate({
        inputs: new Tensor('int64', BigInt64Array.from(prompt.ids, BigInt), shape),
        attention_mask: new Tensor(
          'int64',
          BigInt64Array.from(prompt.ids, () => 1n),
          shape,
        ),
        max_new_tokens: maxTokens,
        min_new_tokens: maxTokens,
        do_sample: false,
        // Called once per generated token (the prompt is skipped), right after it is sampled.
        streamer: new TextStreamer(tokenizer, {
          skip_prompt: true,
          callback_function: () => {},
          token_callback_function: (tokens) => {
            clock.got(tokens.length);
            for (const t of tokens) ids.push(Number(t));
          },
        }),
      });
      return { figures: clock.figures(prompt.ids.length), text: tokenizer.decode(ids), ids };
    });
    o.log?.(`transformers.js (${backend}): decode ${result.figures.decodeTokS.toFixed(2)} tok/s`);
    return {
      runtime: 'transformers.js',
      format: 'ONNX fp32',
      backend,
      ...result.figures,
      ids: result.ids,
      texts: result.texts,
    };
  } finally {
    await model.dispose();
  }
}
