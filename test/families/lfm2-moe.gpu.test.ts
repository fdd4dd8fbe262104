import { describe } from 'vitest';
import { moeGpuTests } from '../helpers/moe-gpu.js';

// lfm2_moe on the GPU against the reference: see test/helpers/moe-gpu.ts.
describe('lfm2_moe on the GPU', () => {
  moeGpuTests('lfm2_moe', (kind, gpuForms) => (kind === 'shortconv' ? 3 : gpuForms ? 5 : 4));
});
