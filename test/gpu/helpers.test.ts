import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/errors.js';
import { adapterKind, alignUp, defineUniforms, renderWgsl, wgslVariant } from '../../src/gpu/index.js';
import { grid } from '../../src/kernels/dispatch.js';
import { saxpyRef } from '../../src/kernels/selftest/selftest.js';

describe('renderWgsl', () => {
  it('substitutes variables and keeps the right branches, nested', () => {
    const t = [
      'a {{X}}',
      '//#if F',
      'f',
      '//#if !G',
      'not g',
      '//#endif',
      '//#else',
      'not f',
      '//#endif',
      'z',
    ].join('\n');
    expect(renderWgsl(t, { X: 3, F: true, G: false })).toBe('a 3\nf\nnot g\nz');
    expect(renderWgsl(t, { X: 'y', F: false, G: false })).toBe('a y\nnot f\nz');
  });
  it('includes snippets, rendered with the same variables, only in kept branches', () => {
    const snippets = { part: 'n = {{N}}\n//#if F\nf\n//#endif', missing: '{{Q}}' };
    const t = ['a', '//#include part', '//#if !F', '//#include missing', '//#endif', 'z'].join('\n');
    expect(renderWgsl(t, { N: 4, F: true }, snippets)).toBe('a\nn = 4\nf\nz');
    expect(() => renderWgsl('//#include nope', {}, snippets)).toThrow(/no snippet "nope"/);
    // The shared reductions: every kernel that includes them gets wg_sum and wg_max.
    expect(renderWgsl('//#include reduce')).toMatch(/fn wg_sum[\s\S]*fn wg_max/);
  });
  it('unrolls //#for loops, nested, with any directive inside', () => {
    const t = [
      '//#for r < R',
      'let e{{r}} = {{r}}u;',
      '//#for m < 2',
      '//#if F',
      'a{{r}}_{{m}}',
      '//#endif',
      '//#endfor',
      '//#endfor',
      'z',
    ].join('\n');
    expect(renderWgsl(t, { R: 2, F: true })).toBe('let e0 = 0u;\na0_0\na0_1\nlet e1 = 1u;\na1_0\na1_1\nz');
    expect(renderWgsl(t, { R: 1, F: false })).toBe('let e0 = 0u;\nz');
    expect(renderWgsl('//#if F\n//#for i < N\nx\n//#endfor\n//#endif', { F: false })).toBe('');
    expect(() => renderWgsl('//#for i < 2\nx')).toThrow(/unterminated \/\/#for/);
    expect(() => renderWgsl('//#endfor')).toThrow(/without/);
    expect(() => renderWgsl('//#for i < N\n//#endfor')).toThrow(/"N" is not set/);
  });
  it('throws on a missing variable or unbalanced blocks', () => {
    expect(() => renderWgsl('{{Q}}')).toThrow(InvalidInputError);
    expect(() => renderWgsl('//#if A\nx', { A: 1 })).toThrow(/unterminated/);
    expect(() => renderWgsl('//#endif')).toThrow(/without/);
  });
});

describe('wgslVariant', () => {
  it('keys a variant by every substituted value and pastes the uniform struct', () => {
    const P = defineUniforms('Params', { n: 'u32' });
    const t = '{{PARAMS}}\nconst WG: u32 = {{WG}}u;\n//#if F\nf\n//#endif';
    const [key, source] = wgslVariant(t, P, { WG: 64, F: true, G: false });
    expect(key).toBe('WG=64,F');
    expect(source().code).toBe(`${P.wgsl}\nconst WG: u32 = 64u;\nf`);
    expect(wgslVariant(t, P, { WG: 128, F: true })[0]).not.toBe(key);
    expect(wgslVariant('x', P)[0]).toBe('base');
  });
});

describe('defineUniforms', () => {
  it('gives the WGSL struct and packs values in order, padded to 16 bytes', () => {
    const P = defineUniforms('P', { n: 'u32', k: 'i32', eps: 'f32' });
    expect(P.wgsl).toBe('struct P {\n  n: u32,\n  k: i32,\n  eps: f32,\n}');
    expect(P.byteLength).toBe(16);
    const dv = new DataView(P.pack({ n: 7, k: -2, eps: 0.5 }));
    expect([dv.getUint32(0, true), dv.getInt32(4, true), dv.getFloat32(8, true)]).toEqual([7, -2, 0.5]);
  });
});

describe('dispatch helpers', () => {
  it('splits large grids over y within the per-dimension limit', () => {
    expect(grid(10)).toEqual([10, 1]);
    expect(grid(0)).toEqual([1, 1]);
    const [x, y] = grid(200_000);
    expect(x).toBeLessThanOrEqual(65535);
    expect(x * y).toBeGreaterThanOrEqual(200_000);
    expect(alignUp(5, 4)).toBe(8);
  });
  it('the selftest reference is f32 saxpy', () => {
    expect(Array.from(saxpyRef(2, new Float32Array([1, 2]), new Float32Array([0.5, -1])))).toEqual([2.5, 3]);
  });
});

describe('adapterKind', () => {
  it('tells a GPU from SwiftShader and the other CPU implementations, from the adapter info', () => {
    const info = (vendor: string, architecture: string, description = '') => ({
      vendor,
      architecture,
      device: '',
      description,
    });
    expect(adapterKind(info('google', 'swiftshader', 'SwiftShader Device (Subzero)'))).toBe('swiftshader');
    expect(adapterKind(info('mesa', 'software', 'llvmpipe: Mesa 25.0.7'))).toBe('software');
    expect(adapterKind(info('microsoft', 'warp'))).toBe('software');
    expect(adapterKind(info('nvidia', 'hopper', 'NVIDIA H100 80GB HBM3'))).toBe('gpu');
    expect(adapterKind(info('apple', 'metal-3'))).toBe('gpu');
  });
});
