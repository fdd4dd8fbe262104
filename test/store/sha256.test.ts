import { webcrypto } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Sha256, sha256Hex, toHex } from '../../src/store/sha256.js';
import { randomBytes } from '../helpers/random.js';

async function subtleHex(bytes: Uint8Array): Promise<string> {
  return toHex(new Uint8Array(await webcrypto.subtle.digest('SHA-256', bytes)));
}

describe('Sha256 (incremental)', () => {
  it('matches the FIPS 180-4 test vectors', () => {
    const enc = new TextEncoder();
    expect(new Sha256().update(enc.encode('')).hex()).toBe(
      'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
    );
    expect(new Sha256().update(enc.encode('abc')).hex()).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
    expect(
      new Sha256().update(enc.encode('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq')).hex(),
    ).toBe('248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1');
  });

  it('equals crypto.subtle on random inputs split at random points', async () => {
    // Lengths around the 55/56/64-byte padding edges, plus larger ones.
    const lengths = [0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000, 4097, 65_537, 200_003];
    for (const [i, n] of lengths.entries()) {
      const bytes = randomBytes(n, 1234 + i);
      const expected = await subtleHex(bytes);
      // One update, then a few random splits (including empty pieces).
      expect(new Sha256().update(bytes).hex(), `n=${n} whole`).toBe(expected);
      let seed = 99 + i;
      for (let trial = 0; trial < 3; trial++) {
        const h = new Sha256();
        let at = 0;
        while (at < n) {
          seed = (seed * 1103515245 + 12345) >>> 0;
          const step = Math.min(n - at, seed % 150);
          h.update(bytes.subarray(at, at + step));
          at += step;
        }
        expect(h.hex(), `n=${n} split trial ${trial}`).toBe(expected);
      }
    }
  });

  it('sha256Hex hashes a view of a larger buffer by its own bytes only', async () => {
    const big = randomBytes(1000, 7);
    const view = big.subarray(100, 300);
    expect(await sha256Hex(view)).toBe(await subtleHex(big.slice(100, 300)));
  });

  it('refuses use after digest', () => {
    const h = new Sha256();
    h.digest();
    expect(() => h.update(new Uint8Array(1))).toThrow(/after digest/);
    expect(() => h.digest()).toThrow(/twice/);
  });
});
