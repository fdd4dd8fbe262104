// Node only: `weft convert` and `weft export-gguf`, thin wrappers over model/convert.ts that parse
// arguments and write files so that nothing is ever half written: everything goes to a temporary
// name next to the target, renamed into place only once complete, and removed on any failure.
import { existsSync, statSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type ConvertQuant, convertModel, EXPORT_TYPES, exportModelGguf } from '../convert/convert.js';
import type { GgufExportType } from '../convert/gguf-export.js';
import type { GgufMix } from '../convert/gguf-mix.js';
import { InvalidInputError } from '../errors.js';
import { pathModel } from '../formats/io/node-file.js';
import { WEFT_WEIGHTS } from '../model/load.js';
import type { Rotation } from '../quant/pack.js';

/** Usage of both commands. */
export const CONVERT_USAGE = `usage: weft convert <hf-dir|file.gguf> <out-dir> --quant int8|int4|int2 [--rotate hadamard|none] [--calibrate text.txt]
       weft export-gguf <hf-dir> <out.gguf> --type T [--calibrate text.txt]
         T: ${EXPORT_TYPES.map((t) => t.toLowerCase()).join('|')}`;

/** Parsed `weft convert` arguments. */
export interface ConvertArgs {
  readonly source: string;
  readonly out: string;
  readonly quant: ConvertQuant;
  readonly rotate: Rotation;
  /** A text file for calibrated (GPTQ) rounding, or undefined for round-to-nearest. */
  readonly calibrate: string | undefined;
}

/** Parsed `weft export-gguf` arguments. */
export interface ExportGgufArgs {
  readonly source: string;
  readonly out: string;
  readonly type: GgufExportType | GgufMix;
  /** A text file whose activations weigh the encoders' errors (an importance matrix), or undefined. */
  readonly calibrate: string | undefined;
}

function parse(argv: readonly string[], options: Record<string, { type: 'string' }>) {
  try {
    return parseArgs({ args: [...argv], options, strict: true, allowPositionals: true });
  } catch (e) {
    throw new InvalidInputError(e instanceof Error ? e.message : String(e));
  }
}

/** The model to read: a folder, or a `.gguf` file. */
function checkSource(source: string): void {
  const ok =
    existsSync(source) &&
    (statSync(source).isDirectory() || (statSync(source).isFile() && /\.gguf$/i.test(source)));
  if (!ok) throw new InvalidInputError(`<source>: "${source}" is neither a model folder nor a .gguf file`);
}

/** Parses the arguments after `weft convert`; every fault names the argument and its value. */
export function parseConvertArgs(argv: readonly string[]): ConvertArgs {
  const { values, positionals } = parse(argv, {
    quant: { type: 'string' },
    rotate: { type: 'string' },
    calibrate: { type: 'string' },
  });
  const [source, out, ...more] = positionals;
  if (source === undefined || out === undefined || more.length > 0)
    throw new InvalidInputError(`convert needs <source> and <out-dir>, got ${JSON.stringify(positionals)}`);
  const quants: readonly ConvertQuant[] = ['int8', 'int4', 'int2'];
  const quant = quants.find((q) => q === values.quant);
  if (quant === undefined)
    throw new InvalidInputError(`--quant: "${values.quant ?? ''}" is not one of ${quants.join(', ')}`);
  const rotations: readonly Rotation[] = ['none', 'hadamard'];
  const rotate = rotations.find((r) => r === (values.rotate ?? 'none'));
  if (rotate === undefined)
    throw new InvalidInputError(`--rotate: "${values.rotate}" is not one of ${rotations.join(', ')}`);
  return { source, out, quant, rotate, calibrate: calibrationFile(values.calibrate) };
}

/** The `--calibrate` file, which must exist (or undefined without the option). */
function calibrationFile(calibrate: string | undefined): string | undefined {
  if (calibrate !== undefined && !(existsSync(calibrate) && statSync(calibrate).isFile()))
    throw new InvalidInputError(`--calibrate: "${calibrate}" is not a text file`);
  return calibrate;
}

/** Parses the arguments after `weft export-gguf`. */
export function parseExportGgufArgs(argv: readonly string[]): ExportGgufArgs {
  const { values, positionals } = parse(argv, { type: { type: 'string' }, calibrate: { type: 'string' } });
  const [source, out, ...more] = positionals;
  if (source === undefined || out === undefined || more.length > 0)
    throw new InvalidInputError(
      `export-gguf needs <hf-dir> and <out.gguf>, got ${JSON.stringify(positionals)}`,
    );
  if (!/\.gguf$/i.test(out)) throw new InvalidInputError(`<out.gguf>: "${out}" must end in .gguf`);
  const type = EXPORT_TYPES.find((t) => t.toLowerCase() === values.type?.toLowerCase());
  if (type === undefined)
    throw new InvalidInputError(
      `--type: "${values.type ?? ''}" is not one of ${EXPORT_TYPES.map((t) => t.toLowerCase()).join(', ')}`,
    );
  return { source, out, type, calibrate: calibrationFile(values.calibrate) };
}

/**
 * The types llama-quantize refuses to write without an importance matrix (its
 * `tensor_requires_imatrix`): the 2-bit lattices and IQ3_XXS. weft writes them unweighted, with a
 * warning.
 */
const WANT_IMPORTANCE: ReadonlySet<string> = new Set(['IQ2_XXS', 'IQ2_XS', 'IQ2_S', 'IQ3_XXS']);

/** A sibling temporary name for `path`, unique to this process. */
function tempNear(path: string): string {
  const abs = resolve(path);
  return join(dirname(abs), `.${basename(abs)}.tmp-${process.pid}-${Date.now().toString(36)}`);
}

function refuseExisting(out: string, what: string): void {
  if (existsSync(out))
    throw new InvalidInputError(`${what}: "${out}" already exists (weft will not overwrite it)`);
}

/**
 * Runs `weft convert`: writes the converted folder to a temporary sibling, streaming the weights
 * through one file handle, then renames it to `out`. Progress lines go to `log` (stderr).
 */
export async function runConvert(args: ConvertArgs, log: (line: string) => void): Promise<void> {
  checkSource(args.source);
  refuseExisting(args.out, '<out-dir>');
  const files = await pathModel(args.source);
  const tmp = tempNear(args.out);
  await mkdir(tmp, { recursive: true });
  const weights = await open(join(tmp, WEFT_WEIGHTS), 'w');
  let written = 0;
  try {
    let last = '';
    const metadata = await convertModel(
      files,
      {
        quant: args.quant,
        rotate: args.rotate,
        ...(args.calibrate === undefined
          ? {}
          : {
              calibration: { text: await readFile(args.calibrate, 'utf8'), name: basename(args.calibrate) },
            }),
        onProgress: (e) => {
          // One line per tenth, not per tensor: models have hundreds.
          const line = `weft convert: ${e.phase} ${Math.floor((10 * e.done) / e.total) * 10}%`;
          if (line !== last || e.done === e.total)
            log(`${line} (${e.done}/${e.total}${e.tensor ? ` ${e.tensor}` : ''})`);
          last = line;
        },
      },
      {
        file: (name, bytes) => writeFile(join(tmp, name), bytes),
        weights: async (chunk) => {
          await weights.write(chunk);
          written += chunk.byteLength;
        },
      },
    );
    await weights.close();
    refuseExisting(args.out, '<out-dir>');
    await rename(tmp, args.out);
    log(
      `weft convert: wrote ${args.out} (${(written / 2 ** 20).toFixed(1)} MiB, ${args.quant}, rotation ${metadata.rotation}${metadata.calibration ? `, calibrated on ${args.calibrate}` : ''}, source ${metadata.source_sha256?.slice(0, 12)})`,
    );
  } catch (err) {
    await weights.close().catch(() => {});
    await rm(tmp, { recursive: true, force: true });
    throw err;
  } finally {
    await files.close?.();
  }
}

/** Runs `weft export-gguf`: the GGUF is built in memory, written to a temporary name and renamed. */
export async function runExportGguf(args: ExportGgufArgs, log: (line: string) => void): Promise<void> {
  if (!(existsSync(args.source) && statSync(args.source).isDirectory()))
    throw new InvalidInputError(`<hf-dir>: "${args.source}" is not a model folder`);
  refuseExisting(args.out, '<out.gguf>');
  if (args.calibrate === undefined && WANT_IMPORTANCE.has(args.type))
    log(
      `weft export-gguf: warning: ${args.type} without --calibrate is encoded unweighted; llama-quantize refuses it without an importance matrix, as its quality needs one`,
    );
  const files = await pathModel(args.source);
  const tmp = tempNear(args.out);
  try {
    let last = '';
    const bytes = await exportModelGguf(
      files,
      args.type,
      args.calibrate === undefined
        ? {}
        : {
            calibration: { text: await readFile(args.calibrate, 'utf8'), name: basename(args.calibrate) },
            onProgress: (e) => {
              const line = `weft export-gguf: calibrate ${Math.floor((10 * e.done) / e.total) * 10}%`;
              if (line !== last || e.done === e.total) log(`${line} (${e.done}/${e.total})`);
              last = line;
            },
          },
    );
    await writeFile(tmp, bytes);
    await rename(tmp, args.out);
    log(
      `weft export-gguf: wrote ${args.out} (${(bytes.byteLength / 2 ** 20).toFixed(1)} MiB, ${args.type}${args.calibrate === undefined ? '' : `, calibrated on ${args.calibrate}`})`,
    );
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  } finally {
    await files.close?.();
  }
}
