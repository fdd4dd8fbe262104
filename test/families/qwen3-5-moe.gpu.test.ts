import { describe } from 'vitest';
import { moeGpuTests } from '../helpers/moe-gpu.js';

// qwen3_5_moe on the GPU against the reference: see test/helpers/moe-gpu.ts.
describe('qwen3_5_moe on the GPU', () => {
  moeGpuTests('qwen3_5_moe', (kind, gpuForms) => (kind === 'deltanet' ? 4 : gpuForms ? 6 : 5));
});
