// Gemma 4 E2B and E4B in a tab's GPU: their published text configs (test/fixtures/scale.ts) through the spec reader and the
// footprint, printed at int4 (weights with the per-layer table, the KV cache at 4K and 32K tokens),
// with the KV cache checked from first principles: only the layers before the KV-shared ones hold
// a cache, each sliding one a ring of its 512-token window and 128 rows, each full one the context
// at its 512-wide heads.
import { describe, expect, it } from 'vitest';
import { modelFootprint } from '../../src/engine/limits.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { firstSharedLayer } from '../../src/model/spec/spec.js';
import { packedBytes } from '../../src/quant/formats.js';
import { SCALE_MODELS } from '../fixtures/scale.js';

const E2B = SCALE_MODELS['gemma-4-e2b'].config;
const E4B = SCALE_MODELS['gemma-4-e4b'].config;

const GB = 1e9;

describe('Gemma 4 E2B and E4B footprints', () => {
  for (const [name, config, sharedFrom] of [
    ['E2B', E2B, 15],
    ['E4B', E4B, 24],
  ] as const) {
    it(`${name}: the published config reads; at int4 its weights, per-layer table and KV cache printed`, () => {
      const spec = specFromConfig(config);
      expect(firstSharedLayer(spec)).toBe(sharedFrom);
      const table = packedBytes('int4', spec.perLayerInput!.vocab, spec.layers * spec.perLayerInput!.width);
      const line: string[] = [];
      for (const context of [4096, 32768]) {
        const f = modelFootprint(spec, 'int4', { context, kvFormat: 'f16' });
        // K and V in f16 of the layers that hold a cache.
        let kv = 0;
        for (let l = 0; l < sharedFrom; l++) {
          const sliding = spec.slidingLayers![l]!;
          const rows = sliding ? Math.min(512 + 64 + 64, context) : context;
          const width = sliding ? spec.kvHeads * 256 : spec.fullAttention!.kvHeads * 512;
          kv += 2 * rows * width * 2;
        }
        expect(f.kvCache).toBe(kv);
        if (context === 4096)
          line.push(
            `weights ${(f.weights / GB).toFixed(2)} GB (per-layer table ${(table / GB).toFixed(2)} GB)`,
          );
        line.push(
          `KV at ${context / 1024}K ${(f.kvCache / 2 ** 20).toFixed(1)} MiB, total ${(f.total / GB).toFixed(2)} GB`,
        );
      }
      console.log(`[gemma4 ${name}] int4: ${line.join('; ')}`);
    });
  }
});
