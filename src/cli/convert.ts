// Node only: `weft convert` and `weft export-gguf`, thin wrappers over model/convert.ts that parse
// arguments and write files so that nothing is ever half written: everything goes to a temporary
// name next to the target, renamed into place only once complete, and removed on any failure.
import { existsSync, statSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type ConvertQuant, convertModel, EXPORT_TYPES, exportModelGguf } from '../convert/convert.js';
import { InvalidInputError } from '../errors.js';
import type { GgufMix } from '../formats/gguf-mix.js';
import type { GgufExportType } from '../formats/gguf-write.js';
import { pathModel } from '../formats/node-file.js';
import { WEFT_WEIGHTS } from '../model/load.js';
import type { Rotation } from '../quant/pack.js';

/** Usage of both commands. */
export const CONVERT_USAGE = `usage: weft convert <hf-dir|file.gguf> <out-dir> --quant int8|int4|int2 [--rotate hadamard|none] [--calibrate text.txt]
       weft export-gguf <hf-dir> <out.gguf> --type f32|f16|q8_0|q4_0|q4_1|q5_0|q5_1|q4_k|q5_k|q6_k|q4_k_m|q5_k_m`;

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
  const calibrate = values.calibrate;
  if (calibrate !== undefined && !(existsSync(calibrate) && statSync(calibrate).isFile()))
    throw new InvalidInputError(`--calibrate: "${calibrate}" is not a text file`);
  return { source, out, quant, rotate, calibrate };
}

/** Parses the arguments after `weft export-gguf`. */
export function parseExportGgufArgs(argv: readonly string[]): ExportGgufArgs {
  const { values, positionals } = parse(argv, { type: { type: 'string' } });
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
  return { source, out, type };
}

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
  const files = await pathModel(args.source);
  const tmp = tempNear(args.out);
  try {
    const bytes = await exportModelGguf(files, args.type);
    await writeFile(tmp, bytes);
    await rename(tmp, args.out);
    log(`weft export-gguf: wrote ${args.out} (${(bytes.byteLength / 2 ** 20).toFixed(1)} MiB, ${args.type})`);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  } finally {
    await files.close?.();
  }
}
