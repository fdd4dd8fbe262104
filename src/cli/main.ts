// `weft` command line (Node). Streams generated text to stdout, or prints one JSON object with
// --json. Errors print one line and exit non-zero.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createEngine } from '../engine/create.js';
import type { DrafterKind, GenerateOptions, GenerationChunk, GenerationStats } from '../engine/types.js';
import type { EngineWorkerLoadEvent } from '../engine/worker-protocol.js';
import { InvalidInputError, WeftError } from '../errors.js';
import type { KernelForms } from '../gpu/device.js';
import { adapterKind, createGpuContext, describeAdapter } from '../gpu/device.js';
import { requestAdapter } from '../gpu/host.js';
import { useVulkanDriver, VULKAN_DRIVERS, type VulkanDriver } from '../host/vulkan.js';
import { GGUF_IN_FOLDER, openModel } from '../model/load.js';
import type { Quant, Rotation } from '../quant/pack.js';
import { chromiumPath, runInChromium } from './chromium-host.js';
import {
  CONVERT_USAGE,
  parseConvertArgs,
  parseExportGgufArgs,
  runConvert,
  runExportGguf,
} from './convert.js';
import { isLocalModel, modelFilesFor } from './model-arg.js';
import { STEER_GENERATE_USAGE, type SteerArgs, steerArgs, steerCommand, steerOption } from './steer.js';

const USAGE = `usage: weft generate --model <dir|url|org/name> [options]

  --model M            model folder (Hugging Face layout, or weft convert's output), .gguf file,
                       URL prefix, or hub id org/name
  --prompt TEXT        prompt text (or --prompt-ids 1,2,3)
  --prompt-ids IDS     comma-separated prompt token ids, used as given
  --chat               wrap the prompt as a user message with the model's chat template
  --max-tokens N       tokens to generate (default 64)
  --temperature T      0 is greedy (default 0)
  --top-p P            nucleus sampling mass (default 1)
  --top-k K            keep the K most likely tokens (default 0: off)
  --seed S             sampling seed (default 0)
  --quant Q            f32|f16|int8|int4|int2|w8a8, or a GGUF block format
                       q4_0|q4_1|q5_0|q5_1|q5_k|q6_k|q3_k|iq4_nl|iq4_xs
                       (default: a converted model's or a quantized GGUF's own, its blocks placed as
                       stored, each matrix in its own type; else f16)
  --rotate R           hadamard|none: rotate every *_proj input before rounding (default: a converted model's own;
                       for w8a8 every input whose width is a Hadamard size, the others reported; else none)
  --context N          KV cache length (default min(model, 2048))
  --kv-cache F         f32, f16, int8 or int4: how the KV cache stores keys and values (default f16 on a
                       GPU, f32 on a software adapter; f16 halves its memory, int8 and int4 (keys
                       Hadamard-rotated per head) take about a quarter and an eighth of f32's)
  --expert-budget B    GPU memory a mixture's experts may take, in bytes or with K, M, G (powers of
                       1024): past it each mixture layer caches what fits on the GPU and loads the
                       other experts from CPU memory when chosen (default: every expert on the GPU)
  --device D           gpu (default) or cpu (the plain-TS reference forward)
  --host H             auto (default), node (this runtime's WebGPU: Dawn in Node; wgpu, Firefox's stack,
                       under deno run -A --unstable-webgpu) or chromium (headless Chromium's WebGPU)
  --vulkan V           Vulkan driver of the node host: auto (default: the GPU's, else SwiftShader, which
                       runs in chromium), swiftshader, lavapipe (Mesa 25's CPU driver: shader-f16) or
                       system (the loader's own choice); any but auto implies --host node
  --kernels K          gpu or serial: the kernel forms (default: serial on a software adapter, else gpu)
  --draft D            speculative decoding: none (default), ngram, self (the model at int4; self-int2
                       for int2), mtp (the checkpoint's own multi-token-prediction layer: Qwen3.5,
                       Qwen3.5-MoE), assistant (Gemma 4's, org/name-assistant beside a hub id
                       org/name), or a draft model folder sharing the tokenizer (a draft head's
                       or a Gemma 4 assistant's folder is recognised)
  --tree-budget K      most draft tokens verified per target pass (1..32, default 8)
  --acceptance A       gumbel (default: the same text as plain sampling with the seed) or rejection
                       (the classic min(1, p/q) rule on draft chains); greedy ignores it
  --json               print {"ids", "text", "stats"} at the end instead of streaming text
  --json-schema FILE   constrain the output to JSON valid under the JSON schema in FILE
  --grammar FILE       constrain the output to an EBNF grammar (XGrammar's GBNF-like dialect, rule root)
  --regex PATTERN      constrain the output to text matching PATTERN (constraints decode without --draft)
${STEER_GENERATE_USAGE}

       weft steer measure --help
${CONVERT_USAGE}`;

const QUANTS: readonly Quant[] = [
  'f32',
  'f16',
  'int8',
  'q4_0',
  'q4_1',
  'q5_0',
  'q5_1',
  'int4',
  'q5_k',
  'q6_k',
  'q3_k',
  'iq4_nl',
  'iq4_xs',
  'int2',
  'w8a8',
];

/** Parsed `weft generate` arguments. */
export interface GenerateArgs {
  model: string;
  prompt: { text: string } | { ids: number[] };
  chat: boolean;
  options: Omit<GenerateOptions, 'signal'>;
  /** Runtime weight format; undefined: the checkpoint's own (weft convert), else f16. */
  quant: Quant | undefined;
  /** Online Hadamard rotation of the `*_proj` inputs (see createEngine's `rotate`); undefined: the checkpoint's. */
  rotate: Rotation | undefined;
  context: number | undefined;
  /** KV cache element type (see createEngine's `kvCache`); undefined: the engine's default. */
  kvCache: 'f32' | 'f16' | 'int8' | 'int4' | undefined;
  /** Bytes a mixture's experts may take on the GPU (see createEngine's `expertBudget`). */
  expertBudget: number | undefined;
  device: 'gpu' | 'cpu';
  host: 'auto' | 'node' | 'chromium';
  /** The node host's Vulkan driver (see useVulkanDriver). */
  vulkan: VulkanDriver | 'auto';
  /** Kernel forms (see createEngine's `kernels`); undefined: the adapter's default. */
  kernels: KernelForms | undefined;
  /** 'none', 'ngram', 'self-int4', 'self-int2', or a draft model folder. */
  draft: string;
  json: boolean;
  /** Activation steering (see steer.ts). */
  steer: SteerArgs | undefined;
}

function num(
  name: string,
  value: string | undefined,
  fallback: number,
  check: (n: number) => boolean,
): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || !check(n))
    throw new InvalidInputError(`--${name}: invalid value "${value}"`);
  return n;
}

/** A byte count: digits with an optional K, M or G (KiB, MiB, GiB also read), positive. */
function bytesOf(name: string, value: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?\s*$/i.exec(value);
  const n = m ? Number(m[1]) * 1024 ** ' KMG'.indexOf((m[2] || ' ').toUpperCase()) : Number.NaN;
  if (!(n >= 1)) throw new InvalidInputError(`--${name}: invalid value "${value}" (bytes, or e.g. 512M, 4G)`);
  return Math.floor(n);
}

function oneOf<T extends string>(
  name: string,
  value: string | undefined,
  allowed: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  const hit = allowed.find((a) => a === value);
  if (!hit) throw new InvalidInputError(`--${name}: "${value}" is not one of ${allowed.join(', ')}`);
  return hit;
}

/** Parses the arguments after `weft generate`. */
export function parseGenerateArgs(argv: string[]): GenerateArgs {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions(argv);
  } catch (e) {
    throw new InvalidInputError(e instanceof Error ? e.message : String(e));
  }
  const { values } = parsed;
  return fromValues(values);
}

function parseOptions(argv: string[]) {
  return parseArgs({
    args: argv,
    strict: true,
    options: {
      model: { type: 'string' },
      prompt: { type: 'string' },
      'prompt-ids': { type: 'string' },
      chat: { type: 'boolean', default: false },
      'max-tokens': { type: 'string' },
      temperature: { type: 'string' },
      'top-p': { type: 'string' },
      'top-k': { type: 'string' },
      draft: { type: 'string' },
      'tree-budget': { type: 'string' },
      acceptance: { type: 'string' },
      seed: { type: 'string' },
      quant: { type: 'string' },
      rotate: { type: 'string' },
      context: { type: 'string' },
      'kv-cache': { type: 'string' },
      'expert-budget': { type: 'string' },
      device: { type: 'string' },
      host: { type: 'string' },
      vulkan: { type: 'string' },
      kernels: { type: 'string' },
      json: { type: 'boolean', default: false },
      'json-schema': { type: 'string' },
      grammar: { type: 'string' },
      regex: { type: 'string' },
      steer: { type: 'string' },
      'steer-mode': { type: 'string' },
      'steer-scale': { type: 'string' },
      'steer-layers': { type: 'string' },
      'steer-inputs': { type: 'boolean' },
    },
  });
}

function fromValues(values: ReturnType<typeof parseOptions>['values']): GenerateArgs {
  if (!values.model) throw new InvalidInputError('--model is required');
  if ((values.prompt === undefined) === (values['prompt-ids'] === undefined))
    throw new InvalidInputError('give exactly one of --prompt and --prompt-ids');
  let prompt: GenerateArgs['prompt'];
  if (values['prompt-ids'] !== undefined) {
    const ids = values['prompt-ids'].split(',').map((s) => Number(s.trim()));
    if (ids.length === 0 || ids.some((i) => !Number.isInteger(i) || i < 0))
      throw new InvalidInputError(
        `--prompt-ids: "${values['prompt-ids']}" is not a comma-separated list of token ids`,
      );
    prompt = { ids };
  } else {
    prompt = { text: values.prompt ?? '' };
  }
  if (values.chat && 'ids' in prompt)
    throw new InvalidInputError('--chat needs --prompt text, not --prompt-ids');
  return {
    model: values.model,
    prompt,
    chat: values.chat ?? false,
    options: {
      maxTokens: num('max-tokens', values['max-tokens'], 64, (n) => Number.isInteger(n) && n >= 1),
      temperature: num('temperature', values.temperature, 0, (n) => n >= 0),
      topP: num('top-p', values['top-p'], 1, (n) => n > 0 && n <= 1),
      topK: num('top-k', values['top-k'], 0, (n) => Number.isInteger(n) && n >= 0),
      seed: num('seed', values.seed, 0, (n) => Number.isInteger(n) && n >= 0),
      treeBudget: num(
        'tree-budget',
        values['tree-budget'],
        8,
        (n) => Number.isInteger(n) && n >= 1 && n <= 32,
      ),
      acceptance: oneOf('acceptance', values.acceptance, ['gumbel', 'rejection'] as const, 'gumbel'),
      ...constraintOptions(values),
    },
    quant: values.quant === undefined ? undefined : oneOf('quant', values.quant, QUANTS, 'f16'),
    rotate:
      values.rotate === undefined
        ? undefined
        : oneOf('rotate', values.rotate, ['none', 'hadamard'] as const, 'none'),
    context:
      values.context === undefined
        ? undefined
        : num('context', values.context, 0, (n) => Number.isInteger(n) && n >= 2),
    kvCache:
      values['kv-cache'] === undefined
        ? undefined
        : oneOf('kv-cache', values['kv-cache'], ['f32', 'f16', 'int8', 'int4'] as const, 'f16'),
    expertBudget:
      values['expert-budget'] === undefined ? undefined : bytesOf('expert-budget', values['expert-budget']),
    device: oneOf('device', values.device, ['gpu', 'cpu'] as const, 'gpu'),
    host: hostOf(values),
    vulkan: oneOf('vulkan', values.vulkan, VULKAN_DRIVERS, 'auto'),
    kernels:
      values.kernels === undefined
        ? undefined
        : oneOf('kernels', values.kernels, ['gpu', 'serial'] as const, 'gpu'),
    draft: values.draft === 'self' ? 'self-int4' : (values.draft ?? 'none'),
    json: values.json ?? false,
    steer: steerArgs(values),
  };
}

/** `--host`: a named Vulkan driver is the node host's, so it implies (and needs) `--host node`. */
function hostOf(values: ReturnType<typeof parseOptions>['values']): GenerateArgs['host'] {
  const host = oneOf('host', values.host, ['auto', 'node', 'chromium'] as const, 'auto');
  const vulkan = values.vulkan;
  if (vulkan === undefined || vulkan === 'auto') return host;
  if (host === 'chromium')
    throw new InvalidInputError(
      `--vulkan ${vulkan} is the node host's driver; Chromium chooses its own (use --host node)`,
    );
  return 'node';
}

/** The constraint of `--json-schema FILE`, `--grammar FILE` or `--regex PATTERN` (at most one). */
function constraintOptions(values: ReturnType<typeof parseOptions>['values']): GenerateOptions {
  const given = (['json-schema', 'grammar', 'regex'] as const).filter((k) => values[k] !== undefined);
  if (given.length > 1)
    throw new InvalidInputError(
      `give at most one of --json-schema, --grammar and --regex, got ${given.join(', ')}`,
    );
  const read = (flag: string, file: string) => {
    if (!existsSync(file)) throw new InvalidInputError(`--${flag}: no file ${file}`);
    return readFileSync(file, 'utf8');
  };
  if (values['json-schema'] !== undefined) {
    const text = read('json-schema', values['json-schema']);
    try {
      return { jsonSchema: JSON.parse(text) };
    } catch (cause) {
      throw new InvalidInputError(`--json-schema: ${values['json-schema']} is not JSON: ${cause}`, { cause });
    }
  }
  if (values.grammar !== undefined) return { grammar: read('grammar', values.grammar) };
  if (values.regex !== undefined) return { regex: values.regex };
  return {};
}

/** Engine load options and the request's drafter for `--draft`. */
function draftSetup(args: GenerateArgs) {
  const load = {
    quant: args.quant,
    rotate: args.rotate,
    device: args.device,
    contextLength: args.context,
    kvCache: args.kvCache,
    ...(args.expertBudget === undefined ? {} : { expertBudget: args.expertBudget }),
    ...(args.kernels && args.device === 'gpu' ? { kernels: args.kernels } : {}),
    ...(args.draft === 'self-int4' || args.draft === 'self-int2'
      ? { draft: { self: args.draft === 'self-int4' ? ('int4' as const) : ('int2' as const) } }
      : {}),
    ...(args.draft === 'mtp' ? { draft: 'mtp' as const } : {}),
    ...(args.draft === 'assistant' ? { draft: 'assistant' as const } : {}),
  };
  const isDir = !['none', 'ngram', 'self-int4', 'self-int2', 'mtp', 'assistant'].includes(args.draft);
  if (isDir && !(existsSync(args.draft) && statSync(args.draft).isDirectory()))
    throw new InvalidInputError(
      `--draft: "${args.draft}" is not none, ngram, self, self-int2, mtp, assistant or a model folder`,
    );
  const drafter: DrafterKind = args.draft === 'none' ? 'none' : args.draft === 'ngram' ? 'ngram' : 'draft';
  return { load, drafter, draftDir: isDir ? args.draft : undefined };
}

/**
 * Node's Dawn can run kernels unless its only adapter is SwiftShader (see chromium-host.ts). Points
 * Dawn at the chosen Vulkan driver first when the node host may run.
 */
async function pickHost(args: GenerateArgs): Promise<'node' | 'chromium'> {
  if (args.host === 'chromium') return 'chromium';
  if (args.device === 'gpu') useVulkanDriver(args.vulkan);
  if (args.host !== 'auto') return args.host;
  if (args.device === 'cpu') return 'node';
  const adapter = await requestAdapter().catch(() => null);
  const crashes = !adapter || adapterKind(adapter.info) === 'swiftshader';
  return crashes && chromiumPath() ? 'chromium' : 'node';
}

async function generate(args: GenerateArgs): Promise<void> {
  const { load, drafter, draftDir } = draftSetup(args);
  const files = await modelFilesFor(args.model);
  // Tokenize in Node, so both hosts receive ids and chat templates render the same way.
  const { tokenizer, spec } = await openModel(files);
  const steer = args.steer && { steer: await steerOption(args.steer, files, spec) };
  await files.close?.();
  let ids: number[];
  if ('ids' in args.prompt) ids = args.prompt.ids;
  else if (args.chat) {
    const text = tokenizer.applyChatTemplate([{ role: 'user', content: args.prompt.text }], {
      addGenerationPrompt: true,
    });
    ids = tokenizer.encode(text, { addSpecialTokens: false });
  } else ids = tokenizer.encode(args.prompt.text, { addSpecialTokens: true });

  const out: number[] = [];
  let text = '';
  const onChunk = (c: GenerationChunk) => {
    out.push(...c.ids);
    text += c.text;
    if (!args.json && c.text) process.stdout.write(c.text);
  };
  let stats: GenerationStats | undefined;
  // Load warnings (e.g. W8A8 linears left unrotated) go to stderr, never silently.
  const warn = (e: EngineWorkerLoadEvent) => {
    if ('phase' in e && e.phase === 'warning') process.stderr.write(`weft: warning: ${e.message}\n`);
  };
  if ((await pickHost(args)) === 'chromium') {
    if (!isLocalModel(args.model))
      throw new InvalidInputError(
        `--host chromium needs a local model folder or .gguf file, got "${args.model}"`,
      );
    const served = await servedFolder(args.model);
    try {
      ({ stats } = await runInChromium(
        served.dir,
        draftDir,
        { load: { ...load, ...steer }, prompt: ids, generate: { ...args.options, drafter } },
        onChunk,
        warn,
      ));
    } finally {
      await served.release();
    }
  } else {
    const gpu =
      args.device === 'gpu'
        ? await createGpuContext(args.kernels ? { kernels: args.kernels } : {})
        : undefined;
    if (gpu && !args.json) process.stderr.write(`weft: ${describeAdapter(gpu.adapter)}\n`);
    const draft = draftDir
      ? {
          draft: {
            model: await modelFilesFor(draftDir),
            quant: args.quant,
          },
        }
      : {};
    const { kernels: _forms, ...onGpu } = load;
    const engine = await createEngine({
      model: files,
      ...onGpu,
      ...draft,
      ...steer,
      onProgress: warn,
      gpu,
    });
    for await (const c of engine.generate(ids, { ...args.options, drafter })) onChunk(c);
    stats = engine.lastStats;
    await engine.unload();
    gpu?.destroy();
  }
  if (args.json) {
    const s = stats;
    const pick = s && {
      prompt_tokens: s.prompt_tokens,
      completion_tokens: s.completion_tokens,
      prefill_tok_s: s.prefill_tok_s,
      decode_tok_s: s.decode_tok_s,
      target_passes: s.target_passes,
      tokens_per_pass: s.tokens_per_pass,
      draft_ms: s.draft_ms,
      verify_ms: s.verify_ms,
      device_step_ms: s.device_step_ms,
      draft_passes: s.draft_passes,
      // GPU only (absent with --device cpu): the device's work per decoded token and per pass.
      dispatches_per_token: s.dispatches_per_token,
      writes_per_token: s.writes_per_token,
      readbacks_per_pass: s.readbacks_per_pass,
      readback_bytes_per_pass: s.readback_bytes_per_pass,
      weight_bytes_per_pass: s.weight_bytes_per_pass,
      kv_bytes: s.kv_bytes,
      // GPU only: the adapter and the kernel forms it ran.
      adapter: s.adapter,
      kernels: s.kernels,
    };
    process.stdout.write(`${JSON.stringify({ ids: out, text, stats: pick })}\n`);
  } else process.stdout.write('\n');
}

/**
 * The folder the Chromium host serves for a local model: the folder itself, or for a `.gguf` file a
 * temporary folder holding a link to it as `model.gguf` (what `openModel` looks for in a folder
 * without config.json), removed by `release`.
 */
async function servedFolder(model: string): Promise<{ dir: string; release(): Promise<void> }> {
  if (statSync(model).isDirectory()) return { dir: model, release: async () => {} };
  const dir = await mkdtemp(join(tmpdir(), 'weft-gguf-'));
  await symlink(resolve(model), join(dir, GGUF_IN_FOLDER));
  return { dir, release: () => rm(dir, { recursive: true, force: true }) };
}

const stderrLine = (line: string) => process.stderr.write(`${line}\n`);

/** Entry point of the `weft` binary. Returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === 'generate') await generate(parseGenerateArgs(rest));
    else if (command === 'steer') await steerCommand(rest);
    else if (command === 'convert') await runConvert(parseConvertArgs(rest), stderrLine);
    else if (command === 'export-gguf') await runExportGguf(parseExportGgufArgs(rest), stderrLine);
    else if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 1 : 0;
    } else throw new InvalidInputError(`unknown command "${command}" (try: weft generate --help)`);
    return 0;
  } catch (err) {
    const msg =
      err instanceof WeftError
        ? `${err.name}: ${err.message}`
        : err instanceof Error
          ? err.message
          : String(err);
    process.stderr.write(`weft: ${msg.split('\n')[0]}\n`);
    if (process.env.WEFT_DEBUG && err instanceof Error) process.stderr.write(`${err.stack}\n`);
    return 1;
  }
}
