// The prefill GEMM's WGSL (shaders/prefill/matmul_gemm.wgsl, in a generated module of its own so that
// the engine's first chunk does not carry it): matmul.ts's loadPrefillGemm imports this module
// when a context in the GPU forms first needs it.
import { shaders } from '../../gen/shaders-prefill.js';
import type { WgslVariant } from '../../gpu/wgsl.js';
import { wgslVariant } from '../../gpu/wgsl.js';
import type { WeightFormat } from '../../quant/formats.js';
import { GEMM_COLUMNS, GEMM_ROWS, GEMM_THREAD_QUADS, GEMM_THREAD_ROWS, GEMM_THREADS } from './plan.js';
import { MatmulParams, type MatmulVariant, matmulVars } from './variant.js';

/**
 * Pipeline key and WGSL of the prefill GEMM of a variant (matmul_gemm.wgsl over matmul_common and
 * matmul_block): the same format and fusions, read per 16-element block as the serial form reads
 * them, in tiles of {@link GEMM_ROWS} x {@link GEMM_COLUMNS} outputs.
 */
export function matmulGemmWgsl(format: WeightFormat, v: MatmulVariant): WgslVariant {
  const vars = matmulVars(format, GEMM_ROWS, { ...v, serial: true, wide: false, pairs: false });
  return wgslVariant(shaders.matmul_gemm, MatmulParams, {
    ...vars,
    R: GEMM_COLUMNS,
    TPR: GEMM_THREADS,
    RT: GEMM_THREAD_ROWS,
    CT: GEMM_THREAD_QUADS,
    SERIAL: false,
    GROUPED: false,
    GEMM: true,
  });
}
