// Weight formats of weft's matmul kernels, as one import: the byte layouts and sizes (layout.ts),
// the grid of an integer format (grid.ts), its round-to-nearest scale choice (rtn.ts), the K-quant
// scale integers (kquant.ts), packing and the reference unpacking (codec.ts) and row ranges
// (rows.ts). Pure TypeScript, no GPU: loaders and tests import it.

// IEEE binary16 conversions live with the other float formats.
export { f16BitsToF32, f32ToF16Bits } from '../gpu/half.js';
export { decode, dequantize, encode, quantize } from './codec.js';
export { type MatrixGrid, nearestCode } from './grid.js';
export { type KQuantParams, kQuantGrid, kQuantParams } from './kquant.js';
export { ksign, latticeBlockWords, latticeDequantize, latticeGrid } from './lattice.js';
export {
  bitsPerWeight,
  CODE_BITS,
  checkShape,
  codeBias,
  codeWordType,
  dataWords,
  GEOMETRY,
  type GgufOnlyFormat,
  type IntFormat,
  IQ4_VALUES,
  iq4Format,
  isIntFormat,
  type LatticeFormat,
  latticeFormat,
  lowPlaneBits,
  packedBytes,
  type QuantizedMatrix,
  scaleWords,
  splitAlign,
  type WeightFormat,
} from './layout.js';
export { alignedRowStep, concatRows, rowRangeWords, sliceRows } from './rows.js';
export { gridOf } from './rtn.js';
