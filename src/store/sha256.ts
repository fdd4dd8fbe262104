/**
 * SHA-256 (FIPS 180-4) that can be fed in pieces. `crypto.subtle.digest` only hashes one buffer, so
 * checking a multi-gigabyte file against the hub's LFS hash would need the whole file in memory; this
 * class takes the file chunk by chunk, in order, and keeps 64 bytes of state plus a partial block.
 */

// First 32 bits of the fractional parts of the cube roots of the first 64 primes.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

// First 32 bits of the fractional parts of the square roots of the first 8 primes.
const H0 = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/**
 * Incremental SHA-256: `update()` with the bytes in order (any split), then `digest()` once for the
 * 32-byte hash or `hex()` for its lowercase hex. Matches `crypto.subtle.digest('SHA-256', …)` on the
 * concatenated input; the unit tests hold it to that on random inputs and random splits.
 */
export class Sha256 {
  private readonly h = new Uint32Array(H0);
  private readonly w = new Uint32Array(64);
  // The not yet compressed tail of the input (< 64 bytes) and how much of it is filled.
  private readonly block = new Uint8Array(64);
  private filled = 0;
  private length = 0;
  private done = false;

  /** Appends `bytes` to the message. Throws once `digest()` has been called. */
  update(bytes: Uint8Array): this {
    if (this.done) throw new Error('Sha256.update after digest');
    this.length += bytes.byteLength;
    let i = 0;
    // Top up a partial block first, then compress whole 64-byte blocks straight from the input.
    if (this.filled > 0) {
      const take = Math.min(64 - this.filled, bytes.byteLength);
      this.block.set(bytes.subarray(0, take), this.filled);
      this.filled += take;
      i = take;
      if (this.filled < 64) return this;
      this.compress(this.block, 0);
      this.filled = 0;
    }
    for (; i + 64 <= bytes.byteLength; i += 64) this.compress(bytes, i);
    this.block.set(bytes.subarray(i), 0);
    this.filled = bytes.byteLength - i;
    return this;
  }

  /** Pads, finishes and returns the 32-byte hash. The object cannot be updated afterwards. */
  digest(): Uint8Array {
    if (this.done) throw new Error('Sha256.digest called twice');
    this.done = true;
    // Padding: 0x80, zeros up to 56 mod 64, then the message length in bits as a big-endian u64.
    const bits = this.length * 8;
    this.block[this.filled++] = 0x80;
    if (this.filled > 56) {
      this.block.fill(0, this.filled);
      this.compress(this.block, 0);
      this.filled = 0;
    }
    this.block.fill(0, this.filled);
    const view = new DataView(this.block.buffer);
    view.setUint32(56, Math.floor(bits / 0x100000000));
    view.setUint32(60, bits >>> 0);
    this.compress(this.block, 0);
    const out = new Uint8Array(32);
    const outView = new DataView(out.buffer);
    for (let j = 0; j < 8; j++) outView.setUint32(j * 4, this.h[j]!);
    return out;
  }

  /** `digest()` as 64 lowercase hex digits. */
  hex(): string {
    return toHex(this.digest());
  }

  private compress(data: Uint8Array, at: number): void {
    const w = this.w;
    for (let t = 0; t < 16; t++) {
      const p = at + t * 4;
      w[t] = (data[p]! << 24) | (data[p + 1]! << 16) | (data[p + 2]! << 8) | data[p + 3]!;
    }
    for (let t = 16; t < 64; t++) {
      const a = w[t - 15]!;
      const b = w[t - 2]!;
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      w[t] = (w[t - 16]! + s0 + w[t - 7]! + s1) | 0;
    }
    const h = this.h;
    let a = h[0]!;
    let b = h[1]!;
    let c = h[2]!;
    let d = h[3]!;
    let e = h[4]!;
    let f = h[5]!;
    let g = h[6]!;
    let hh = h[7]!;
    for (let t = 0; t < 64; t++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + S1 + ch + K[t]! + w[t]!) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (S0 + maj) | 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] = h[0]! + a;
    h[1] = h[1]! + b;
    h[2] = h[2]! + c;
    h[3] = h[3]! + d;
    h[4] = h[4]! + e;
    h[5] = h[5]! + f;
    h[6] = h[6]! + g;
    h[7] = h[7]! + hh;
  }
}

/** Lowercase hex of `bytes`. */
export function toHex(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += b.toString(16).padStart(2, '0');
  return s;
}

/**
 * SHA-256 of one buffer as lowercase hex, through `crypto.subtle` (native, available in pages,
 * workers and Node ≥ 20). Used for each chunk on write and on read.
 */
export async function sha256Hex(bytes: Uint8Array): Promise<string> {
  // subtle.digest wants a BufferSource backed by an ArrayBuffer; copy only when the view is not.
  const input =
    bytes.buffer instanceof ArrayBuffer
      ? new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
      : bytes.slice();
  return toHex(new Uint8Array(await crypto.subtle.digest('SHA-256', input)));
}
