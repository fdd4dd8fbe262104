// What integer KV caches save, from the footprint the engine checks against the adapter: the cache
// at 4K, 32K and 128K tokens for four published shapes in every format (the README's table, printed
// here), the bytes attention reads per decode token, and a context that fits the device at int4
// where f16 does not.
import { describe, expect, it } from 'vitest';
import { checkDeviceFit, modelFootprint } from '../../src/engine/limits.js';
import { DeviceLimitError } from '../../src/errors.js';
import { KV_FORMATS } from '../../src/kernels/kv/kv.js';
import { attentionReadBytes } from '../../src/model/blocks/attention/footprint.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { withGenerationConfig } from '../../src/model/spec/generation.js';
import type { ModelSpec } from '../../src/model/spec/spec.js';
import { SCALE_MODELS, type ScaleShape } from '../fixtures/scale.js';

const specOf = (shape: ScaleShape): ModelSpec => {
  const m = SCALE_MODELS[shape];
  return withGenerationConfig(specFromConfig(m.config), m.generation);
};
const MODELS: ScaleShape[] = ['qwen3-0.6b', 'qwen3.5-0.8b', 'llama-3.2-1b', 'gemma-3-1b'];
const CONTEXTS = [4096, 32768, 131072];
const gb = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;

describe('integer KV caches: memory and bytes', () => {
  it('the cache at 4K, 32K and 128K tokens, per format (the README table)', () => {
    const lines = [
      `| model | ${CONTEXTS.flatMap((c) => KV_FORMATS.map((f) => `${c / 1024}K ${f}`)).join(' | ')} |`,
      `|---|${CONTEXTS.flatMap(() => KV_FORMATS.map(() => '---')).join('|')}|`,
    ];
    for (const shape of MODELS) {
      const spec = specOf(shape);
      const cells = CONTEXTS.flatMap((context) =>
        KV_FORMATS.map((kvFormat) => modelFootprint(spec, 'int4', { context, kvFormat }).kvCache),
      );
      lines.push(`| ${shape} | ${cells.map(gb).join(' | ')} |`);
      // Every format's cache is its bytes per head and token: headDim · 4, · 2, + 4 (a scale) for
      // int8 and headDim / 2 + 4 for int4, for a full-attention model (no sliding or linear layers).
      if (shape === 'qwen3-0.6b' || shape === 'llama-3.2-1b') {
        const perHead = {
          f32: spec.headDim * 4,
          f16: spec.headDim * 2,
          int8: spec.headDim + 4,
          int4: spec.headDim / 2 + 4,
        };
        for (const [f, b] of Object.entries(perHead))
          expect(
            modelFootprint(spec, 'int4', { context: 32768, kvFormat: f as keyof typeof perHead }).kvCache,
          ).toBe(2 * spec.layers * 32768 * spec.kvHeads * b);
      }
    }
    console.log(lines.join('\n'));
    // Qwen3-0.6B's f16 cache: 112 KiB per token, 3.5 GiB at 32K; int4 (64 + 4 bytes a head of 128) cuts it 3.8x.
    const qwen = specOf('qwen3-0.6b');
    const at = (f: (typeof KV_FORMATS)[number]) =>
      modelFootprint(qwen, 'int4', { context: 32768, kvFormat: f }).kvCache;
    expect(at('f16') / 32768).toBe(112 * 1024);
    expect(at('f16') / at('int4')).toBeCloseTo(256 / 68, 6);
  });

  it('attention reads per decode token: the visible slots of every layer, a sliding layer its window', () => {
    const llama = specOf('llama-3.2-1b');
    // 16 layers × K and V × 32K keys × 8 KV heads × 64 × 2 B = 1.07 GB at f16.
    expect(attentionReadBytes(llama, { format: 'f16' }, 32768)).toBe(16 * 2 * 32768 * 8 * 64 * 2);
    expect(attentionReadBytes(llama, { format: 'int4', rotate: true }, 32768)).toBe(16 * 2 * 32768 * 8 * 36);
    // Gemma 3 1B: 5 of every 6 layers see a 512-token window, so 32K keys cost far less than 26 full layers.
    const gemma = specOf('gemma-3-1b');
    const full = 2 * 32768 * gemma.kvHeads * gemma.headDim * 2;
    const got = attentionReadBytes(gemma, { format: 'f16' }, 32768);
    expect(got).toBeLessThan((gemma.layers * full) / 4);
    expect(got).toBeGreaterThan(full);
  });

  it('grants a context at int4 that f16 cannot fit in the device memory, and names the bytes when it refuses', () => {
    const spec = specOf('llama-3.2-1b');
    const o = (kvFormat: 'f16' | 'int4') => ({ context: 131072, kvFormat });
    const [f16, int4] = [
      modelFootprint(spec, 'int4', o('f16')).total,
      modelFootprint(spec, 'int4', o('int4')).total,
    ];
    const device = {
      maxBufferSize: 2 ** 31,
      maxStorageBufferBindingSize: 2 ** 30,
      deviceMemory: Math.floor((f16 + int4) / 2),
    };
    expect(() => checkDeviceFit(spec, 'int4', o('int4'), device)).not.toThrow();
    const err = (() => {
      try {
        checkDeviceFit(spec, 'int4', o('f16'), device);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(DeviceLimitError);
    expect(String(err)).toMatch(/KV cache/);
  });
});
