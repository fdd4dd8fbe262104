import type { Quant } from '../engine/create.js';
import { dequantize, quantize, type WeightFormat } from '../kernels/matmul/quant.js';
import type { Tensor } from './weights.js';

/** Weight format of each quant choice (w8a8 keeps int8 weights; its activation path is not wired yet). */
export function formatOf(quant: Quant): WeightFormat {
  return quant === 'w8a8' ? 'int8' : quant;
}

/** Quantization group along K: 32 where it divides K, else 16; float formats use the whole row. */
export function groupFor(format: WeightFormat, cols: number): number {
  if (format === 'f32' || format === 'f16') return cols;
  return cols % 32 === 0 ? 32 : 16;
}

/**
 * The tensors with every matrix rounded through `format` exactly as the GPU runner packs it
 * (vectors stay f32): the CPU reference of a quantized model.
 */
export function roundedThrough(
  tensors: Record<string, Tensor>,
  format: WeightFormat,
): Record<string, Tensor> {
  const out: Record<string, Tensor> = {};
  for (const [name, t] of Object.entries(tensors)) {
    const [rows, cols] = t.shape;
    out[name] =
      t.shape.length === 2 && rows && cols
        ? { shape: t.shape, data: dequantize(quantize(t.data, rows, cols, format, groupFor(format, cols))) }
        : t;
  }
  return out;
}
