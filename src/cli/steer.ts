// `weft steer measure` and the `--steer` options of `weft generate` (Node). Measuring runs the
// plain-TS reference forward in Node; generation checks the file against the model here and hands
// the engine plain vectors, so both hosts (Node's Dawn and headless Chromium) steer the same way.
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { InvalidInputError } from '../errors.js';
import type { ModelFiles } from '../formats/io/files.js';
import type { SteerMode } from '../kernels/steer/steer.js';
import { modelChecksum, openModel } from '../model/load.js';
import { ReferenceRunner } from '../model/reference/reference.js';
import type { ModelSpec } from '../model/spec/spec.js';
import { mapWeights, readAllF32 } from '../model/weights.js';
import { checkSteerModel, parseLayers, readSteerFile, writeSteerFile } from '../steer/format.js';
import { measureDirections } from '../steer/measure.js';
import type { SteerOptions } from '../steer/plan.js';
import { modelFilesFor } from './model-arg.js';

/** Usage of `weft steer`. */
const STEER_USAGE = `usage: weft steer measure --model <dir> --positive a.txt --negative b.txt --layer L|all --out f.safetensors

  Runs each line of both files through the model (CPU reference), takes the residual stream at each
  line's last token after the chosen layers, and writes the normalized difference of the means.
  --layer L|all        layer index, comma-separated indices, or all
  --mode M             default mode stored in the file: ablate (default) or add
  --scale S            default "add" scale stored (default: the mean distance between the means)`;

/** Usage lines of the `--steer` options of `weft generate`. */
export const STEER_GENERATE_USAGE = `  --steer FILE         steering file (weft steer measure) applied while generating
  --steer-mode M       ablate or add (default: the file's)
  --steer-scale S      multiple of the direction "add" adds (default: the file's)
  --steer-layers L     layers whose output is steered: indices (comma-separated) or all
                       (default: the file's layers; a layer needs a vector in the file)
  --steer-inputs       also steer each chosen block's input, before its attention
                       (with --steer-layers all: every block's input and output)`;

/** The `--steer` arguments of `weft generate`. */
export interface SteerArgs {
  file: string;
  mode: SteerMode | undefined;
  scale: number | undefined;
  /** `--steer-layers`: undefined for the file's layers. */
  layers: readonly number[] | 'all' | undefined;
  inputs: boolean;
}

/**
 * Parses `--steer`, `--steer-mode`, `--steer-scale`, `--steer-layers` and `--steer-inputs`
 * (undefined without `--steer`).
 */
export function steerArgs(values: {
  steer?: string | undefined;
  'steer-mode'?: string | undefined;
  'steer-scale'?: string | undefined;
  'steer-layers'?: string | undefined;
  'steer-inputs'?: boolean | undefined;
}): SteerArgs | undefined {
  const mode = values['steer-mode'];
  const scaleText = values['steer-scale'];
  const layersText = values['steer-layers'];
  if (values.steer === undefined) {
    const given = (
      [
        ['--steer-mode', mode],
        ['--steer-scale', scaleText],
        ['--steer-layers', layersText],
        ['--steer-inputs', values['steer-inputs'] || undefined],
      ] as const
    ).filter(([, v]) => v !== undefined);
    if (given.length > 0)
      throw new InvalidInputError(
        `${given.map(([k]) => k).join(', ')} ${given.length === 1 ? 'needs' : 'need'} --steer FILE`,
      );
    return undefined;
  }
  if (mode !== undefined && mode !== 'ablate' && mode !== 'add')
    throw new InvalidInputError(`--steer-mode: "${mode}" is not one of ablate, add`);
  const scale = scaleText === undefined ? undefined : Number(scaleText);
  if (scaleText !== undefined && (scaleText.trim() === '' || !Number.isFinite(scale)))
    throw new InvalidInputError(`--steer-scale: invalid value "${scaleText}"`);
  let layers: readonly number[] | 'all' | undefined;
  try {
    layers = layersText === undefined ? undefined : parseLayers(layersText, '--steer-layers', 'value');
  } catch {
    throw new InvalidInputError(
      `--steer-layers: "${layersText}" is not "all" or comma-separated layer indices`,
    );
  }
  return { file: values.steer, mode, scale, layers, inputs: values['steer-inputs'] ?? false };
}

/**
 * Reads a steering file and checks it against the model (refusing one measured on another model
 * with SteerMismatchError), then returns the engine's `steer` option as plain vectors.
 */
export async function steerOption(a: SteerArgs, files: ModelFiles, spec: ModelSpec): Promise<SteerOptions> {
  const f = await readSteerFile(readFileSync(a.file), a.file);
  checkSteerModel(f, await modelChecksum(files), spec.hidden);
  const layers: Record<number, number[]> = {};
  for (const [l, v] of f.layers) layers[l] = Array.from(v);
  return {
    vectors: { ...(f.shared ? { shared: Array.from(f.shared) } : {}), layers },
    layers: a.layers ?? f.defaultLayers,
    mode: a.mode ?? f.mode,
    scale: a.scale ?? f.scale,
    inputs: a.inputs,
  };
}

function lines(path: string): string[] {
  const out = readFileSync(path, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  if (out.length === 0) throw new InvalidInputError(`${path}: no non-empty lines`);
  return out;
}

async function measure(argv: string[]): Promise<void> {
  let values: Record<string, string | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        model: { type: 'string' },
        positive: { type: 'string' },
        negative: { type: 'string' },
        layer: { type: 'string' },
        out: { type: 'string' },
        mode: { type: 'string' },
        scale: { type: 'string' },
      },
    }));
  } catch (e) {
    throw new InvalidInputError(e instanceof Error ? e.message : String(e));
  }
  for (const k of ['model', 'positive', 'negative', 'layer', 'out'])
    if (!values[k]) throw new InvalidInputError(`--${k} is required`);
  const mode = values.mode ?? 'ablate';
  if (mode !== 'ablate' && mode !== 'add')
    throw new InvalidInputError(`--mode: "${mode}" is not one of ablate, add`);
  const files = await modelFilesFor(values.model ?? '');
  const opened = await openModel(files);
  const { spec, tokenizer } = opened;
  const chosen = parseLayers(values.layer ?? '', '--layer', '--layer');
  const layers = chosen === 'all' ? Array.from({ length: spec.layers }, (_, l) => l) : [...chosen];
  const tokenize = (text: string) => tokenizer.encode(text, { addSpecialTokens: true });
  const pos = lines(values.positive ?? '').map(tokenize);
  const neg = lines(values.negative ?? '').map(tokenize);
  const longest = Math.max(...pos.map((p) => p.length), ...neg.map((n) => n.length));
  const model = new ReferenceRunner(spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: longest,
  });
  const { vectors, norms } = measureDirections(model, pos, neg, layers);
  const meanNorm = [...norms.values()].reduce((s, n) => s + n, 0) / norms.size;
  const scale = values.scale === undefined ? meanNorm : Number(values.scale);
  if (!Number.isFinite(scale)) throw new InvalidInputError(`--scale: invalid value "${values.scale}"`);
  const bytes = writeSteerFile({
    hidden: spec.hidden,
    modelChecksum: await modelChecksum(files),
    layers: vectors,
    shared: undefined,
    defaultLayers: chosen,
    mode,
    scale,
  });
  await files.close?.();
  writeFileSync(values.out ?? '', bytes);
  const dist = layers.map((l) => `${l}:${norms.get(l)?.toFixed(3)}`).join(' ');
  process.stdout.write(
    `weft: wrote ${values.out} (${layers.length} layer(s), ${pos.length} positive and ${neg.length} negative prompts; distance between means ${dist})\n`,
  );
}

/** `weft steer <subcommand>`. */
export async function steerCommand(argv: string[]): Promise<void> {
  const [sub, ...rest] = argv;
  if (sub === 'measure') return measure(rest);
  if (sub === undefined || sub === '--help' || sub === '-h') {
    process.stdout.write(`${STEER_USAGE}\n`);
    return;
  }
  throw new InvalidInputError(`unknown steer command "${sub}" (try: weft steer measure)`);
}
