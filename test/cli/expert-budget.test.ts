// The CLI's --expert-budget (createEngine's expertBudget: test/helpers/moe-gpu.ts runs it).
import { describe, expect, it } from 'vitest';
import { parseGenerateArgs } from '../../src/cli/main.js';

describe('--expert-budget', () => {
  it('reads bytes, or K, M and G in powers of 1024, and refuses anything else naming the value', () => {
    const budget = (v: string) =>
      parseGenerateArgs(['--model', 'm', '--prompt', 'x', '--expert-budget', v]).expertBudget;
    expect(budget('123456')).toBe(123456);
    expect(budget('512M')).toBe(512 * 2 ** 20);
    expect(budget('4GiB')).toBe(4 * 2 ** 30);
    expect(budget('1.5g')).toBe(1.5 * 2 ** 30);
    expect(parseGenerateArgs(['--model', 'm', '--prompt', 'x']).expertBudget).toBeUndefined();
    for (const bad of ['', 'lots', '4T', '0', '0.5'])
      expect(() => budget(bad)).toThrow(/--expert-budget: invalid value/);
  });
});
