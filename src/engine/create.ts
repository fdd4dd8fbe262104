import type { Drafter } from '../decode/drafter.js';
import { ModelDrafter } from '../decode/model-drafter.js';
import { DeviceLostError, InvalidInputError } from '../errors.js';
import { createGpuContext, type GpuContext, type KernelForms, lossBehind } from '../gpu/device.js';
import { KV_FORMATS, type KvFormat } from '../kernels/kv/kv.js';
import { GREEDY_TREE_SHARPEN } from '../kernels/sample/topk.js';
import { type SteerPlan, steerHook } from '../kernels/steer/steer.js';
import type { DraftHead } from '../model/draft/head.js';
import { type OpenedModel, openModel } from '../model/load.js';
import { referenceTensors, w8a8Inputs } from '../model/quantized.js';
import { ReferenceRunner } from '../model/reference/reference.js';
import type { ModelRunner } from '../model/runner.js';
import { deriveSizes, type ModelSpec, ropeForContext } from '../model/spec/spec.js';
import { mapWeights } from '../model/weights.js';
import { formatOf, type Quant, type Rotation, type RotationChoice, rotationFor } from '../quant/pack.js';
import { resolveSteer, type SteerOptions } from '../steer/plan.js';
import { type ModelRef, resolveModel } from '../store/source.js';
import type { WeftTokenizer } from '../tokenizer/tokenizer.js';
import { Engine, type EngineModel } from './engine.js';
import { checkDeviceFit, estimateDeviceMemory, modelFootprint } from './limits.js';
import { openModelSource } from './open.js';
import type { OpenedDraft } from './open-draft.js';
import { templateMessage } from './tools.js';
import type { Acceptance, TextCodec } from './types.js';

/** Progress of loading a model: a step, or a warning about how it is placed. */
export type LoadProgress = LoadStep | LoadWarning;

/** A step of loading a model. */
export interface LoadStep {
  phase: 'open' | 'weights' | 'ready';
  /** Tensors placed so far, and in all. */
  done: number;
  total: number;
  /** The tensor being placed. */
  tensor?: string;
  /**
   * On the GPU, the most CPU memory placing has held at once so far, bytes (one slice of a matrix:
   * its f32 rows and packed words; see `placeWeights`).
   */
  peakTransientBytes?: number;
}

/**
 * Something about how the model is placed that the caller should know, e.g. W8A8 linears whose
 * input width has no Hadamard rotation and so keep unrotated activations.
 */
export interface LoadWarning {
  phase: 'warning';
  /** The warning in words (the CLI prints it on stderr). */
  message: string;
  /** The tensors it concerns (names, or prefixes ending in `*`). */
  linears: readonly string[];
}

/** Options of {@link createEngine}. */
export interface CreateEngineOptions {
  /**
   * The model, as {@link resolveModel} reads it, read in place (without the weights cache): a URL
   * prefix of a Hugging Face-layout folder (absolute or relative to the page; safetensors or weft's
   * converted `model.weft.safetensors`), a URL of a `.gguf` file, a Hugging Face id `org/name`
   * (optionally with one GGUF file of the repository, `org/name/file.gguf`, and a revision,
   * `@revision`), picked `File`s, a `ModelSource`, or `ModelFiles` (the weights cache, files in
   * memory, or in Node `await pathModel(path)` for a folder or a `.gguf` file).
   */
  model: ModelRef;
  /**
   * Weight precision on the GPU (default f16, or the file's own format: a weft-q checkpoint's, or
   * a quantized GGUF's, whose blocks are then placed as stored; f32 where exactness matters).
   */
  quant?: Quant;
  /**
   * `'hadamard'` rotates the input of every `*_proj` linear online and packs its weights as W·Rᵀ
   * before rounding, which spreads outliers and lowers the error of int4/int2/w8a8; `'none'` turns
   * it off. Default: a weft-q checkpoint's own; else for `quant: 'w8a8'` every `*_proj` input whose
   * width is a Hadamard size (K·2^m, a multiple of 16) is rotated and the others are reported in
   * a {@link LoadWarning}; else `'none'`. Applies to every model the engine places: the target and
   * a draft model.
   */
  rotate?: Rotation;
  /** 'gpu' (default) runs on WebGPU; 'cpu' runs the plain-TS reference (slow; for checks). */
  device?: 'gpu' | 'cpu';
  /**
   * Tokens of context, prompt and completion together: the KV cache is allocated for exactly this
   * many (default min(model's `max_position_embeddings`, 2048); at most the model's). See
   * `WeftEngine.contextLength`.
   */
  contextLength?: number;
  /**
   * How the KV cache stores keys and values: `'f16'` (IEEE halves, rounded to nearest even: half
   * the cache memory and half the bytes attention reads, so longer contexts fit; the default on a
   * GPU) or `'f32'` (exact; the default on a software adapter such as SwiftShader, where attention's
   * bytes cost little, and with `device: 'cpu'`), or `'int8'` / `'int4'` (per token and head a
   * scale and the values rounded to it: about a quarter / an eighth of f32's memory and bytes read,
   * for long contexts; keys rotated first, see `kvRotate`). The reference runner stores the same
   * format. Applies to the target and a draft model.
   */
  kvCache?: KvFormat;
  /**
   * With an int8 or int4 cache: rotate each key head by a Hadamard transform before rounding (and
   * the queries the same way, so every score is unchanged), which spreads the keys' outlier channels
   * and lowers the rounding's error (default true; heads whose size is not a power of two stay plain).
   */
  kvRotate?: boolean;
  /**
   * The forms of the heavy kernels (matmul, attention, W8A8; see `GpuContext.kernels`): `'gpu'`,
   * launched wide for a GPU, or `'serial'`, one thread per output for a CPU implementation of
   * WebGPU. Default: `'serial'` on a software adapter, `'gpu'` elsewhere. Not with `gpu` (its
   * context has its forms).
   */
  kernels?: KernelForms;
  /** Base URL of the model hub for `org/name` ids (default https://huggingface.co). */
  hubBase?: string;
  /**
   * A drafter for speculative decoding: a separate small model that shares the tokenizer, or the
   * target's own weights at low precision (`{ self: 'int4' }`), or a draft head trained on the
   * target's hidden states (`{ head: ref }`, a folder whose config.json has `model_type`
   * "weft_draft_head"; a `{ model }` that is a head is recognised too). N-gram drafting needs no model.
   * A head runs beside a GPU target on the GPU (each speculative step one submission: its drafts,
   * the verify pass and the acceptance), or on the CPU with `on: 'cpu'` (a step per draft depth
   * driven from the host; only where the GPU's fixed cost per pass dwarfs the head's arithmetic).
   * Over the reference runner it always runs on the CPU. `{ assistant: ref }` is Gemma 4's assistant
   * drafter (`Gemma4AssistantForCausalLM`, e.g. google/gemma-4-E2B-it-assistant beside
   * gemma-4-E2B-it; a `{ model }` that is one is recognised too): it attends over the target's own
   * KV cache. Beside a GPU target it reads that cache and the target's embedding back once per draft
   * forward and computes its small step on the host. `'assistant'` takes the one published beside a
   * hub model (`org/name-assistant`).
   */
  draft?:
    | { model: ModelRef; quant?: Quant }
    | { self: 'int4' | 'int2' }
    | { head: ModelRef; on?: 'gpu' | 'cpu' }
    | { assistant: ModelRef }
    | 'assistant'
    | 'mtp';
  /**
   * Acceptance rule of speculative sampling for requests that do not name one: 'gumbel' (default,
   * the same text as plain sampling with the seed) or 'rejection' (the classic min(1, p/q) rule on
   * chains). Greedy requests ignore it.
   */
  acceptance?: Acceptance;
  /**
   * Activation steering: remove ("ablate") or add a direction in the residual stream after chosen
   * layers, from a steering file measured on this model (`weft steer measure`) or given vectors.
   */
  steer?: SteerOptions;
  /**
   * Bytes of GPU memory the model may take, checked with the adapter's buffer limits before
   * anything is allocated (a model that does not fit is refused with `DeviceLimitError`). Default:
   * an estimate, `navigator.deviceMemory` GiB where the browser reports it, else unchecked;
   * `Infinity` turns the memory check off (the buffer limits are always checked).
   */
  deviceMemory?: number;
  /**
   * Bytes of GPU memory a mixture-of-experts model's experts may take. Where they do not all fit,
   * each mixture layer keeps a GPU cache of as many experts as fit and the rest packed in CPU
   * memory, loaded into the cache when a token chooses them (the output is unchanged; each step
   * then waits on the host once per mixture layer). Default: every expert on the GPU. A budget
   * below one token's experts per layer is refused, naming the bytes it needs.
   */
  expertBudget?: number;
  /** A GPU context to use instead of creating one. */
  gpu?: GpuContext;
  /**
   * With `gpu`: a new context to place the model on when that one's device is lost, while loading
   * or during a request (see `Engine`); the engine never destroys a context the app gave. Without
   * it, a loss of the app's device ends the request in flight with {@link DeviceLostError}, and
   * every later request with the same error.
   */
  replaceGpu?: (lost: DeviceLostError) => GpuContext | Promise<GpuContext>;
  onProgress?: (event: LoadProgress) => void;
}

/**
 * The engine's view of a tokenizer: text ↔ ids, its vocabulary for constrained decoding, and its
 * chat template (OpenAI messages and tools rendered as Transformers passes them to the template).
 */
export function codecOf(tok: WeftTokenizer, vocabSize: number): TextCodec {
  return {
    encode: (text, o) => tok.encode(text, o),
    // Checkpoints pad the vocabulary past the tokenizer's; such ids decode to nothing.
    decode: (ids, o) =>
      tok.decode(
        ids.filter((id) => id < tok.vocabSize),
        o,
      ),
    eosIds: tok.eosIds,
    vocabulary: () => ({ tokens: tok.tokenStrings(vocabSize), type: tok.spelling }),
    ...(tok.hasChatTemplate
      ? {
          applyChatTemplate: (messages, o) =>
            tok.applyChatTemplate(messages.map(templateMessage), {
              addGenerationPrompt: o.addGenerationPrompt,
              ...(o.tools ? { variables: { tools: o.tools } } : {}),
            }),
        }
      : {}),
  };
}

/**
 * The KV cache format `createEngine` takes when `kvCache` is not given: halves on a GPU, where
 * attention's bytes count (at 4k context an f32 cache is read as much as ~40% of a 1B int4 model's
 * weights per token); f32 (exact) on a software adapter, where arithmetic, not bytes, sets the
 * pace, and off the GPU (`gpu` undefined).
 */
export function defaultKvCache(gpu: Pick<GpuContext, 'adapter'> | undefined): KvFormat {
  return gpu && !gpu.adapter.software ? 'f16' : 'f32';
}

/**
 * Loads a model and returns an engine over it. The same call works in a page, a Web Worker and
 * Node; in Node pass `await pathModel(path)` (`weft/node`) for a local folder or `.gguf` file.
 * A device lost while the model is placed costs one more try on a new device (see
 * {@link nextGpu}); a second loss throws {@link DeviceLostError}.
 */
export async function createEngine(options: CreateEngineOptions): Promise<Engine> {
  try {
    return new Engine(await loadModel(options, options.gpu));
  } catch (err) {
    if (!(err instanceof DeviceLostError)) throw err;
    const t0 = performance.now();
    const model = await loadModel(options, await nextGpu(options, err));
    return new Engine({ ...model, losses: { count: 1, ms: performance.now() - t0 } });
  }
}

/**
 * The context a model is placed on again after `lost`: the app's replacement (`replaceGpu`) where
 * the app gave its own context, else undefined (a new one of the engine's own). Throws `lost` where
 * the app gave a context and no way to replace it.
 */
async function nextGpu(options: CreateEngineOptions, lost: DeviceLostError): Promise<GpuContext | undefined> {
  if (!options.gpu) return undefined;
  if (!options.replaceGpu) throw lost;
  return options.replaceGpu(lost);
}

/**
 * Opens `options.model` and places it, with its drafter, on `given` (the app's context) or on a
 * new context of the model's own: the model an {@link Engine} runs, with the way to place it again
 * on a new device after a loss (the source opened again: memory, the weights cache or the files
 * read in place). A failure caused by the device's loss throws the {@link DeviceLostError}.
 */
async function loadModel(options: CreateEngineOptions, given: GpuContext | undefined): Promise<EngineModel> {
  const progress = options.onProgress ?? (() => {});
  const resolve = { hubBase: options.hubBase };
  // Resolve and open: the model's headers, then the settings they allow and the draft's headers.
  const files = await openModelSource(resolveModel(options.model, resolve));
  progress({ phase: 'open', done: 0, total: 0 });
  const read = await openModel(files);
  for (const w of read.warnings ?? []) progress({ phase: 'warning', message: w.message, linears: w.tensors });
  const settings = await chooseSettings(options, read);
  // The RoPE this context runs (LongRoPE's long factors past the original context).
  const opened = { ...read, spec: ropeForContext(read.spec, settings.context) };
  // The checkpoint's own MTP layer (Qwen3.5), or a draft model or head of its own. The draft
  // heads' code loads only when one is asked for.
  const draft =
    options.draft === 'mtp'
      ? {
          head: await (await import('../model/draft/mtp.js')).openMtpHead({
            name: files.name,
            spec: opened.spec,
            weights: opened.weights,
          }),
        }
      : options.draft === 'assistant'
        ? await (async () => {
            const { companionAssistant, openDraft } = await import('./open-draft.js');
            return openDraft({ assistant: companionAssistant(options.model) }, opened, resolve, settings);
          })()
        : options.draft && !('self' in options.draft)
          ? await (await import('./open-draft.js')).openDraft(options.draft, opened, resolve, settings)
          : undefined;
  const draftModel = draft && 'opened' in draft ? draft : undefined;
  const head = draft && 'head' in draft ? draft.head : undefined;
  const assistant = draft && 'assistant' in draft ? draft.assistant : undefined;
  // Place: one GPU context for the target and its draft model (the target's runner owns it),
  // checked against the device before anything is uploaded.
  let gpu: GpuContext | undefined;
  try {
    gpu = settings.cpu ? undefined : (given ?? (await createGpuContext({ kernels: options.kernels })));
    if (gpu) checkFits(gpu, options, opened.spec, settings, draftModel);
  } catch (err) {
    if (gpu && !given) gpu.destroy();
    await draftModel?.files.close?.();
    throw err;
  }
  try {
    const placer = new Placer(options, settings, gpu, !given, progress);
    const runner = await placer.place(opened, settings.quant, {
      owner: true,
      steer: settings.steer,
      features: !!head || !!assistant,
    });
    // Build the drafter over the placed target.
    const drafter = assistant
      ? new ModelDrafter(
          `assistant ${assistant.name}`,
          await (await import('../model/draft/assistant-runner.js')).openAssistantRunner(
            assistant,
            runner,
            settings.context,
          ),
          { sharpen: GREEDY_TREE_SHARPEN },
        )
      : await makeDrafter(placer, options.draft, opened, runner, draftModel, head);
    // A loss while placing may not have failed a step yet: wait for the uploads to land.
    if (gpu) await Promise.race([gpu.device.queue.onSubmittedWorkDone(), gpu.lost]);
    gpu?.assertAlive();
    progress({ phase: 'ready', done: 1, total: 1 });
    return {
      id: files.name,
      runner,
      codec: codecOf(opened.tokenizer, runner.spec.vocabSize),
      drafter,
      acceptance: options.acceptance,
      gpu,
      // Off the GPU, or on an app's context that the app cannot replace, a loss is final.
      replace:
        gpu && (!given || options.replaceGpu)
          ? async (lost) => loadModel(options, await nextGpu(options, lost))
          : undefined,
    };
  } catch (err) {
    throw (await lossBehind(gpu, err)) ?? err;
  } finally {
    // Every tensor is on the device now (or the load failed): release file handles.
    await files.close?.();
  }
}

/** What {@link createEngine} settles from its options and the opened model before placing it. */
interface EngineSettings {
  /** Tokens of context: the KV cache's slots. */
  context: number;
  quant: Quant;
  rotate: RotationChoice;
  /** Run on the reference runner. */
  cpu: boolean;
  /** The KV cache format, when given (else the device's default, {@link defaultKvCache}). */
  kvCache: KvFormat | undefined;
  /** Steering of the target (a drafter only proposes; the target decides). */
  steer: SteerPlan | undefined;
  /** The draft model's precision. */
  draftQuant: Quant;
}

/** Checks the options against `opened` and settles what they leave open. */
async function chooseSettings(options: CreateEngineOptions, opened: OpenedModel): Promise<EngineSettings> {
  const { spec } = opened;
  const context = options.contextLength ?? Math.min(spec.maxPositions, 2048);
  if (!Number.isInteger(context) || context < 2)
    throw new InvalidInputError(`contextLength must be an integer >= 2, got ${context}`);
  if (context > spec.maxPositions)
    throw new InvalidInputError(
      `contextLength ${context} exceeds the model's context of ${spec.maxPositions} tokens (${
        spec.rope.scaling?.type === 'longrope' && !spec.rope.scaling.long
          ? 'original_max_position_embeddings: the checkpoint has no long LongRoPE factors for past it'
          : 'max_position_embeddings'
      })`,
    );
  // A weft-q checkpoint or a quantized GGUF defaults to the format it is stored in (placed by copy).
  const quant = options.quant ?? opened.packed?.format ?? 'f16';
  const rotate: RotationChoice =
    options.rotate ?? opened.packed?.rotation ?? (quant === 'w8a8' ? 'auto' : 'none');
  if (options.kvCache !== undefined && !KV_FORMATS.includes(options.kvCache))
    throw new InvalidInputError(
      `kvCache must be one of ${KV_FORMATS.map((f) => `'${f}'`).join(', ')}, got ${JSON.stringify(options.kvCache)}`,
    );
  if (options.kvRotate !== undefined && typeof options.kvRotate !== 'boolean')
    throw new InvalidInputError(`kvRotate must be true or false, got ${JSON.stringify(options.kvRotate)}`);
  if (options.kernels !== undefined && options.kernels !== 'gpu' && options.kernels !== 'serial')
    throw new InvalidInputError(`kernels must be 'gpu' or 'serial', got ${JSON.stringify(options.kernels)}`);
  if (options.replaceGpu !== undefined && !options.gpu)
    throw new InvalidInputError(
      'replaceGpu replaces a context the app gave (gpu); without gpu the engine makes its own contexts',
    );
  if (options.kernels !== undefined && options.gpu)
    throw new InvalidInputError(
      `kernels: '${options.kernels}' cannot apply to a given gpu context (its kernels are '${options.gpu.kernels}'); pass it to createGpuContext instead`,
    );
  const steer = options.steer;
  return {
    context,
    quant,
    rotate,
    cpu: (options.device ?? 'gpu') === 'cpu',
    kvCache: options.kvCache,
    steer: steer
      ? await resolveSteer(steer, spec, steer.file ? await opened.checksum() : undefined)
      : undefined,
    draftQuant:
      (typeof options.draft === 'object' && 'model' in options.draft && options.draft.quant) || quant,
  };
}

/**
 * Refuses, before any upload, a target (and its draft model or self-draft) that does not fit the
 * device's buffer limits and memory (see {@link checkDeviceFit}).
 */
function checkFits(
  gpu: GpuContext,
  options: CreateEngineOptions,
  spec: ModelSpec,
  settings: EngineSettings,
  draftModel: OpenedDraft | undefined,
): void {
  const { context, quant, draftQuant } = settings;
  const draft = typeof options.draft === 'object' ? options.draft : undefined;
  const limits = {
    maxBufferSize: gpu.limits.maxBufferSize,
    maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
    deviceMemory: options.deviceMemory ?? estimateDeviceMemory(),
  };
  // A head's and an assistant's weights are small (an assistant's stay on the host).
  const companion =
    draft && 'self' in draft
      ? { what: `self-draft at ${draft.self}`, spec, format: formatOf(draft.self) }
      : draftModel
        ? {
            what: `draft model ${draftModel.files.name} at ${draftQuant}`,
            spec: draftModel.opened.spec,
            format: formatOf(draftQuant),
          }
        : undefined;
  const kv = { context, kvFormat: settings.kvCache ?? defaultKvCache(gpu) };
  if (
    options.expertBudget !== undefined &&
    !(Number.isFinite(options.expertBudget) && options.expertBudget > 0)
  )
    throw new InvalidInputError(
      `expertBudget must be a positive number of bytes, got ${options.expertBudget}`,
    );
  checkDeviceFit(
    spec,
    formatOf(quant),
    options.expertBudget === undefined ? kv : { ...kv, expertBudget: options.expertBudget },
    limits,
    companion && { what: companion.what, footprint: modelFootprint(companion.spec, companion.format, kv) },
  );
}

/** Places opened models as runners: on the GPU context, or as reference runners off it. */
class Placer {
  constructor(
    private readonly options: CreateEngineOptions,
    readonly settings: EngineSettings,
    /** Undefined: the reference runner (device 'cpu'). */
    private readonly gpu: GpuContext | undefined,
    /** Whether the engine made `gpu` (and its target's runner destroys it), not the app. */
    private readonly ownsGpu: boolean,
    private readonly progress: (event: LoadProgress) => void,
  ) {}

  /** The KV cache format of every runner placed. */
  get kvFormat(): KvFormat {
    return this.settings.kvCache ?? defaultKvCache(this.gpu);
  }

  /**
   * A runner of `model` at `q`: `owner` destroys the GPU context with it (unless the caller gave
   * it), `steer` steers it, `features` keeps its features for a draft head.
   */
  async place(
    model: OpenedModel,
    q: Quant,
    o: { owner: boolean; steer?: SteerPlan | undefined; features?: boolean },
  ): Promise<ModelRunner> {
    const { progress, gpu } = this;
    const { rotate, context } = this.settings;
    const total = model.weights.tensors.size;
    const unrotated = q === 'w8a8' ? unrotatedLinears(model.spec, rotate) : undefined;
    if (unrotated) progress(unrotated);
    if (!gpu) {
      progress({ phase: 'weights', done: 0, total });
      // The GPU runner's values: stored matrices dequantized, the others rounded as it packs them.
      const tensors = await referenceTensors(model, q, rotate);
      progress({ phase: 'weights', done: total, total });
      const ref = new ReferenceRunner(model.spec, mapWeights(tensors), {
        capacity: context,
        kvFormat: this.kvFormat,
        kvRotate: this.options.kvRotate ?? true,
      });
      if (o.steer) ref.residualHook = steerHook(o.steer);
      if (q === 'w8a8') ref.linearInput = w8a8Inputs(rotate);
      return ref;
    }
    const { createGpuRunner } = await import('../model/gpu/runner.js');
    return createGpuRunner(model, {
      quant: q,
      capacity: context,
      onProgress: progress,
      gpu,
      ownsContext: o.owner && this.ownsGpu,
      rotate,
      kvFormat: this.kvFormat,
      kvRotate: this.options.kvRotate ?? true,
      steer: o.steer,
      features: o.features ?? false,
      // The target's experts (a draft placed beside it is its own, smaller model).
      ...(o.owner && this.options.expertBudget !== undefined
        ? { expertBudget: this.options.expertBudget }
        : {}),
    });
  }
}

/**
 * The drafter of `options.draft` over the placed target `runner`: a self-draft or draft model
 * placed beside it, or a draft head (on the GPU beside a GPU target, in the target's submissions;
 * over the reference runner, or with `on: 'cpu'`, on the CPU). Undefined without a draft.
 */
async function makeDrafter(
  placer: Placer,
  draft: CreateEngineOptions['draft'],
  opened: OpenedModel,
  runner: ModelRunner,
  draftModel: OpenedDraft | undefined,
  head: DraftHead | undefined,
): Promise<Drafter | undefined> {
  const { quant, draftQuant, context } = placer.settings;
  if (typeof draft === 'object' && 'self' in draft)
    return new ModelDrafter(`self-${draft.self}`, await placer.place(opened, draft.self, { owner: false }));
  if (draftModel) {
    const placed = await placer.place(draftModel.opened, draftQuant, { owner: false });
    await draftModel.files.close?.();
    return new ModelDrafter(draftModel.files.name, placed);
  }
  if (!head) return undefined;
  const { GpuRunner } = await import('../model/gpu/runner.js');
  // An MTP layer drafts on the CPU for now (the GPU head runs the EAGLE layer only).
  const onCpu =
    head.mtp !== undefined || (typeof draft === 'object' && 'head' in draft && draft.on === 'cpu');
  const onGpu = runner instanceof GpuRunner && !onCpu;
  const headRunner = onGpu
    ? await (await import('../model/draft/gpu-head.js')).createGpuHeadRunner(head, runner, {
        capacity: context,
        quant: quant === 'f32' ? 'f32' : 'f16',
      })
    : new (await import('../model/draft/head.js')).HeadRunner(head, runner, context);
  // A head's passes are cheap: its greedy trees go deep on confident paths (GREEDY_TREE_SHARPEN).
  return new ModelDrafter(`head ${head.name}`, headRunner, { sharpen: GREEDY_TREE_SHARPEN });
}

/**
 * Under `'auto'` rotation, the `*_proj` linears of a W8A8 model whose input width has no Hadamard
 * rotation as it stands (see `RotationChoice`): they keep unrotated int8 activations, which the
 * load reports rather than doing silently. Undefined when every input is rotated (or none is asked).
 */
function unrotatedLinears(spec: ModelSpec, rotate: RotationChoice): LoadWarning | undefined {
  if (rotate !== 'auto') return undefined;
  const { qWidth } = deriveSizes(spec);
  const inputs = [
    {
      width: spec.hidden,
      what: 'hidden size',
      projs: ['q_proj', 'k_proj', 'v_proj', 'gate_proj', 'up_proj'],
    },
    { width: qWidth, what: 'attention width', projs: ['o_proj'] },
    { width: spec.intermediate, what: 'intermediate size', projs: ['down_proj'] },
  ].filter((input) => rotationFor(rotate, input.width) === 'none');
  if (inputs.length === 0) return undefined;
  const linears = inputs.flatMap((input) => input.projs);
  const widths = inputs.map((input) => `${input.what} ${input.width}`).join(', ');
  return {
    phase: 'warning',
    message: `w8a8: ${linears.join(', ')} of every layer keep unrotated int8 activations (${widths}: not a multiple of 16 that is a Hadamard size K·2^m); pass rotate: 'hadamard' to pad them to one, or 'none' to silence this`,
    linears,
  };
}
