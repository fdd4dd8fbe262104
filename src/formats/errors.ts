import { WeftError } from '../errors.js';

/** Renders an offending value for an error message: JSON, cut to 80 characters. */
function show(value: unknown): string {
  let text: string;
  try {
    text = typeof value === 'bigint' ? `${value}n` : (JSON.stringify(value) ?? String(value));
  } catch {
    text = String(value);
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/**
 * A checkpoint, config or tokenizer file is malformed or describes something weft does not support.
 * Every loader in `formats/` and a family's config and GGUF readers (`model/families/`) throw only this for bad input, naming the file,
 * the field (a config key, a tensor name, a header part) and the offending value, so a user can
 * find the problem without a debugger. Fuzz tests hold the parsers to that: any byte string either
 * parses or raises this error.
 */
export class ModelFormatError extends WeftError {
  override readonly name = 'ModelFormatError';

  constructor(
    /** The file that was being read, e.g. `model-00001-of-00002.safetensors`. */
    readonly file: string,
    /** The field or tensor at fault, e.g. `rope_scaling.rope_type` or `model.norm.weight`. */
    readonly field: string,
    /** The offending value (the raw value, not its rendering). */
    readonly value: unknown,
    /** What is wrong with it. */
    readonly problem: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}: ${field} = ${show(value)}: ${problem}`, options);
  }
}
