// The K-quant formats' scale words (int4: Q4_K, int2: Q2_K) as integers: the super-block (D, M)
// and the sub-block (sc, mn) of each, unpacked (kQuantParams) and packed back (kQuantGrid,
// writeSub), for the round-to-nearest scale search and calibrated rounding.
import { InvalidInputError } from '../errors.js';
import { getBits, gridFromScales, type MatrixGrid } from './grid.js';
import { scaleWords } from './layout.js';

/**
 * The integers behind a K-quant grid (int4, int2), one entry per super-block s (`D`, `M`: f16 bit
 * patterns) and per sub-block u = 256·s / sub + j (`sc`, `mn` ∈ [0, 2^scaleBits − 1]): unit u
 * dequantizes q to fround(f32(D)·sc·q − f32(M)·mn). {@link kQuantGrid} packs them back; calibrated
 * rounding (quant/refine) searches over them.
 */
export interface KQuantParams {
  readonly format: 'int4' | 'int2';
  readonly rows: number;
  readonly cols: number;
  /** Elements per sub-block: 32 (int4) or 16 (int2). */
  readonly sub: number;
  /** Largest sc or mn: 63 (int4) or 15 (int2). */
  readonly maxScale: number;
  readonly D: Uint16Array;
  readonly M: Uint16Array;
  readonly sc: Uint8Array;
  readonly mn: Uint8Array;
}

/** The {@link KQuantParams} of an int4 or int2 grid (copies, free to change). */
export function kQuantParams(grid: MatrixGrid): KQuantParams {
  const { format, rows, cols, scales } = grid;
  if (format !== 'int4' && format !== 'int2')
    throw new InvalidInputError(`kQuantParams: ${format} is not a K-quant format`);
  const sub = format === 'int4' ? 32 : 16;
  const nsub = 256 / sub;
  const words = nsub === 8 ? 4 : 5;
  const blocks = scales.length / words;
  const p = {
    format,
    rows,
    cols,
    sub,
    maxScale: format === 'int4' ? 63 : 15,
    D: new Uint16Array(blocks),
    M: new Uint16Array(blocks),
    sc: new Uint8Array(blocks * nsub),
    mn: new Uint8Array(blocks * nsub),
  };
  for (let s = 0; s < blocks; s++) {
    const w = scales.subarray(words * s, words * s + words);
    p.D[s] = w[words - 1]! & 0xffff;
    p.M[s] = w[words - 1]! >>> 16;
    for (let j = 0; j < nsub; j++) {
      const u = s * nsub + j;
      if (nsub === 8) {
        p.sc[u] = getBits(w, 6 * j, 6);
        p.mn[u] = getBits(w, 6 * (8 + j), 6);
      } else {
        const byte = (w[j >> 2]! >>> (8 * (j & 3))) & 0xff;
        p.sc[u] = byte & 15;
        p.mn[u] = byte >> 4;
      }
    }
  }
  return p;
}

/** The grid of K-quant parameters, packed in the layout of {@link QuantizedMatrix}: the inverse of {@link kQuantParams}. */
export function kQuantGrid(p: KQuantParams): MatrixGrid {
  const nsub = 256 / p.sub;
  const words = nsub === 8 ? 4 : 5;
  const scales = new Uint32Array(scaleWords(p.format, p.rows * p.cols));
  if (p.D.length * words !== scales.length || p.sc.length !== p.D.length * nsub)
    throw new InvalidInputError(
      `kQuantGrid: ${p.D.length} super-blocks and ${p.sc.length} sub-blocks for ${p.format} [${p.rows}, ${p.cols}]`,
    );
  for (let s = 0; s < p.D.length; s++) {
    const out = scales.subarray(words * s, words * s + words);
    out[words - 1] = (p.D[s]! | (p.M[s]! << 16)) >>> 0;
    for (let j = 0; j < nsub; j++) {
      const u = s * nsub + j;
      if (p.sc[u]! > p.maxScale || p.mn[u]! > p.maxScale)
        throw new InvalidInputError(
          `kQuantGrid: sub-block ${u} has sc ${p.sc[u]}, mn ${p.mn[u]} > ${p.maxScale}`,
        );
      writeSub(out, nsub, j, p.sc[u]!, p.mn[u]!);
    }
  }
  return gridFromScales(p.format, p.rows, p.cols, scales);
}

/** Writes sub-block j's (sc, mn) into one super-block's zeroed scale words (int4: 8 subs, int2: 16). */
export function writeSub(out: Uint32Array, nsub: number, j: number, sc: number, mn: number): void {
  if (nsub === 8) {
    setBits(out, 6 * j, 6, sc);
    setBits(out, 6 * (8 + j), 6, mn);
  } else {
    out[j >> 2]! |= (sc | (mn << 4)) << (8 * (j & 3));
  }
}

/** Sets `width` bits at bit `pos` of a zeroed little-endian field array in u32 words (width < 32). */
function setBits(words: Uint32Array, pos: number, width: number, value: number): void {
  const w = pos >> 5;
  const off = pos & 31;
  words[w]! |= value << off;
  if (off + width > 32) words[w + 1]! |= value >>> (32 - off);
}
