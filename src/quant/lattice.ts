// The reference decoding of the lattice formats (LatticeFormat in layout.ts): a GGUF i-quant's
// super-blocks as weft stores them (the block without its f16 d, which sits in `scales`), decoded
// as llama.cpp's `dequantize_row_iq2_xxs` .. `iq3_s` decode the file's block. Every product is
// exact in f32 (an f16 times a sub-scale below 32, times a grid magnitude below 64), so the
// weights are a·q with a = the sub-block's scale and q = ±magnitude, as the GPU kernels compute
// them (matmul_common.wgsl's LATTICE).
import { InvalidInputError } from '../errors.js';
import { f16BitsToF32 } from '../gpu/half.js';
import { IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID } from './iq-grids.js';
import { CODE_BITS, checkWords, type LatticeFormat, type QuantizedMatrix } from './layout.js';

/** u32 words of one super-block's codes (the GGUF block less its 2-byte d). */
export function latticeBlockWords(format: LatticeFormat): number {
  return (256 * CODE_BITS[format]) / 32;
}

/** The codebook of a lattice format, as iq-grids.ts stores it (two words per IQ2 entry, one per IQ3). */
export function latticeGrid(format: LatticeFormat): Uint32Array {
  switch (format) {
    case 'iq2_xxs':
      return IQ2XXS_GRID;
    case 'iq2_xs':
      return IQ2XS_GRID;
    case 'iq2_s':
      return IQ2S_GRID;
    case 'iq3_xxs':
      return IQ3XXS_GRID;
    case 'iq3_s':
      return IQ3S_GRID;
  }
}

/** The 8 sign bits of a 7-bit IQ2/IQ3 sign field: bit 7 makes the count of set bits even. */
export function ksign(s7: number): number {
  let p = 0;
  for (let v = s7; v; v &= v - 1) p ^= 1;
  return s7 | (p << 7);
}

/** Byte j (0..7) of IQ2 grid entry k, or byte j (0..3) of IQ3 entry k. */
function gridByte(grid: Uint32Array, wordsPerEntry: number, k: number, j: number): number {
  return (grid[wordsPerEntry * k + (j >> 2)]! >>> (8 * (j & 3))) & 255;
}

/**
 * W [rows, cols] of a lattice-format matrix as f32, element i of super-block s = i >> 8 decoded
 * from its words (see {@link QuantizedMatrix}): the reference the GPU kernels match bit for bit.
 */
export function latticeDequantize(q: QuantizedMatrix & { format: LatticeFormat }): Float32Array {
  checkWords('dequantize', q);
  const { format, data, scales } = q;
  if (!scales) throw new InvalidInputError(`dequantize: a ${format} matrix needs scales`);
  const n = q.rows * q.cols;
  const out = new Float32Array(Math.ceil(n / 256) * 256);
  const W = latticeBlockWords(format);
  const grid = latticeGrid(format);
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const fr = Math.fround;
  for (let s = 0; s < out.length / 256; s++) {
    const d = f16BitsToF32((scales[s >> 1]! >>> (16 * (s & 1))) & 0xffff);
    const at = 4 * W * s; // first byte of the super-block's codes
    const word = (k: number) => data[W * s + k]!;
    const y = out.subarray(256 * s, 256 * s + 256);
    // Element 8g + j of a sub-block: magnitude m with sign bit (signs >> j) & 1, times a.
    const put = (e: number, a: number, m: number, neg: number) => {
      y[e] = fr(a * (neg ? -m : m));
    };
    for (let ib = 0; ib < 8; ib++) {
      switch (format) {
        case 'iq2_xxs': {
          const idx = word(2 * ib);
          const aux = word(2 * ib + 1);
          const a = fr(fr(d * (0.5 + (aux >>> 28))) * 0.25);
          for (let l = 0; l < 4; l++) {
            const signs = ksign((aux >>> (7 * l)) & 127);
            const k = (idx >>> (8 * l)) & 255;
            for (let j = 0; j < 8; j++)
              put(32 * ib + 8 * l + j, a, gridByte(grid, 2, k, j), (signs >> j) & 1);
          }
          break;
        }
        case 'iq2_xs': {
          const sc = bytes[at + 64 + ib]!;
          for (let l = 0; l < 4; l++) {
            const a = fr(fr(d * (0.5 + ((sc >> (4 * (l >> 1))) & 15))) * 0.25);
            const v = bytes[at + 8 * ib + 2 * l]! | (bytes[at + 8 * ib + 2 * l + 1]! << 8);
            const signs = ksign(v >> 9);
            for (let j = 0; j < 8; j++)
              put(32 * ib + 8 * l + j, a, gridByte(grid, 2, v & 511, j), (signs >> j) & 1);
          }
          break;
        }
        case 'iq2_s': {
          const sc = bytes[at + 72 + ib]!;
          const qh = bytes[at + 64 + ib]!;
          for (let l = 0; l < 4; l++) {
            const a = fr(fr(d * (0.5 + ((sc >> (4 * (l >> 1))) & 15))) * 0.25);
            const k = bytes[at + 4 * ib + l]! | (((qh >> (2 * l)) & 3) << 8);
            const signs = bytes[at + 32 + 4 * ib + l]!;
            for (let j = 0; j < 8; j++)
              put(32 * ib + 8 * l + j, a, gridByte(grid, 2, k, j), (signs >> j) & 1);
          }
          break;
        }
        case 'iq3_xxs': {
          const aux = word(16 + ib);
          const a = fr(fr(d * (0.5 + (aux >>> 28))) * 0.5);
          for (let l = 0; l < 4; l++) {
            const signs = ksign((aux >>> (7 * l)) & 127);
            for (let h = 0; h < 2; h++) {
              const k = bytes[at + 8 * ib + 2 * l + h]!;
              for (let j = 0; j < 4; j++)
                put(32 * ib + 8 * l + 4 * h + j, a, gridByte(grid, 1, k, j), (signs >> (4 * h + j)) & 1);
            }
          }
          break;
        }
        case 'iq3_s': {
          const a = fr(d * (1 + 2 * ((bytes[at + 104 + (ib >> 1)]! >> (4 * (ib & 1))) & 15)));
          const qh = bytes[at + 64 + ib]!;
          for (let l = 0; l < 4; l++) {
            const signs = bytes[at + 72 + 4 * ib + l]!;
            for (let h = 0; h < 2; h++) {
              const k = bytes[at + 8 * ib + 2 * l + h]! | (((qh >> (2 * l + h)) & 1) << 8);
              for (let j = 0; j < 4; j++)
                put(32 * ib + 8 * l + 4 * h + j, a, gridByte(grid, 1, k, j), (signs >> (4 * h + j)) & 1);
            }
          }
          break;
        }
      }
    }
  }
  return out.subarray(0, n).slice();
}
