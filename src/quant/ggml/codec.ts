/**
 * The interface of a GGML block type's plain-TS codec kept in a module of its own (Q2_K and Q3_K in
 * klow.ts, the i-quants in iquant-decode.ts and iquant-encode.ts); blocks.ts routes
 * `dequantizeGgml` and `quantizeGgml` to them. A leaf module: it imports nothing, so those modules
 * and blocks.ts do not import each other.
 */
export interface GgmlCodec {
  /**
   * `count` values (a whole number of blocks) from `bytes`, with the f32 semantics of ggml's
   * `dequantize_row_*` (each product rounded to f32 where ggml's C code rounds it).
   */
  dequantize(bytes: Uint8Array, count: number): Float32Array;
  /**
   * Encodes `x` (a whole number of blocks). `importance`, where given, weighs the squared error of
   * each column: `x` is rows of `importance.length` values and element i has weight
   * importance[i % importance.length] (llama.cpp's importance matrix, `quant_weights`).
   */
  quantize(x: Float32Array, importance?: Float32Array): Uint8Array;
}
