import { describe, expect, it } from 'vitest';
import { saxpy, saxpyRef, selftestInputs } from '../../src/kernels/selftest/selftest.js';
import { gpu } from '../helpers/gpu.js';

describe('selftest kernel in Chromium', () => {
  it.each([1, 63, 64, 1000, 70_001])('y = alpha*a + b on %i elements equals the reference', async (n) => {
    const ctx = await gpu();
    const { alpha, a, b } = selftestInputs(n);
    const y = await saxpy(ctx, alpha, a, b);
    expect(Array.from(y)).toEqual(Array.from(saxpyRef(alpha, a, b)));
  });
});
