import { describe, expect, it } from 'vitest';
import { gpu } from '../../../test/helpers/gpu.js';
import { saxpy, saxpyRef, selftestInputs } from './selftest.js';

describe('selftest kernel in Chromium', () => {
  it.each([1, 63, 64, 1000, 70_001])('y = alpha*a + b on %i elements equals the reference', async (n) => {
    const ctx = await gpu();
    const { alpha, a, b } = selftestInputs(n);
    const y = await saxpy(ctx, alpha, a, b);
    expect(Array.from(y)).toEqual(Array.from(saxpyRef(alpha, a, b)));
  });
});
