import { describe, expect, it } from 'vitest';
import {
  gumbelBits,
  gumbelKey,
  mulhilo,
  philox4x32,
  uniformFromBits,
} from '../../../src/kernels/sample/gumbel.js';

const M64 = (1n << 64n) - 1n;

/** splitmix64 finalizer of seed + (pos + 1) * golden, in BigInt: the spec gumbelKey implements. */
function keyBig(seed: number, pos: number): [number, number] {
  let z = (BigInt(seed) + (BigInt(pos) + 1n) * 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  z ^= z >> 31n;
  return [Number(z & 0xffffffffn), Number(z >> 32n)];
}

describe('Philox 4x32-10 and the Gumbel key (TS reference)', () => {
  it('matches the Random123 known-answer vectors', () => {
    expect(philox4x32([0, 0, 0, 0], [0, 0])).toEqual([0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
    expect(philox4x32([0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff])).toEqual([
      0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd,
    ]);
    expect(philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0])).toEqual([
      0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1,
    ]);
  });

  it('mulhilo from 16-bit halves equals the BigInt product', () => {
    let s = 12345;
    for (let i = 0; i < 2000; i++) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      const a = s;
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      const b = i % 7 === 0 ? 0xffffffff : s;
      const p = BigInt(a) * BigInt(b);
      expect(mulhilo(a, b)).toEqual([Number(p >> 32n), Number(p & 0xffffffffn)]);
    }
  });

  it('the u32-pair splitmix key equals the 64-bit BigInt version', () => {
    for (const seed of [0, 1, 42, 0xdeadbeef, 0xffffffff]) {
      for (const pos of [0, 1, 7, 4095, 123456, 0xfffffffe, 0xffffffff]) {
        expect(gumbelKey(seed, pos)).toEqual(keyBig(seed, pos));
      }
    }
  });

  it('U stays strictly inside (0, 1), is exact in f32, and differs across tokens and positions', () => {
    for (const bits of [0, 1, 511, 512, 0x7fffffff, 0xffffffff]) {
      const u = uniformFromBits(bits);
      expect(u).toBeGreaterThan(0);
      expect(u).toBeLessThan(1);
      expect(Math.fround(u)).toBe(u);
    }
    const key = gumbelKey(7, 100);
    const seen = new Set<number>();
    for (let v = 0; v < 1000; v++) seen.add(gumbelBits(key, v));
    expect(seen.size).toBe(1000);
    expect(gumbelBits(gumbelKey(7, 101), 0)).not.toBe(gumbelBits(key, 0));
  });
});
