import { describe } from 'vitest';
import { moeGpuTests } from '../helpers/moe-gpu.js';

// qwen3_moe on the GPU against the reference: see test/helpers/moe-gpu.ts.
describe('qwen3_moe on the GPU', () => {
  moeGpuTests('qwen3_moe', (kind, gpuForms) => (kind === 'attention' ? (gpuForms ? 5 : 4) : 0));
});
