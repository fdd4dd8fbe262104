import { describe, expect, it } from 'vitest';
import { shaders as main } from '../../src/gen/shaders.js';
import { shaders as moe } from '../../src/gen/shaders-moe.js';

// Every shader, wherever it loads from (the mixture's load lazily, from a module of their own).
const shaders: Record<string, string> = { ...main, ...moe };

describe('WGSL sources', () => {
  it('no kernel sums in an order that depends on the subgroup size: none uses a subgroup operation', () => {
    // A device may give two pipelines different subgroup sizes (Dawn on some GPUs), so a reduction
    // shared by a GEMV and a GEMM through subgroupAdd could sum a row in two orders, which breaks
    // batch invariance and with it lossless speculation. Every reduction is a fixed loop or tree.
    expect(Object.keys(shaders).length).toBeGreaterThan(10);
    for (const [name, source] of Object.entries(shaders)) {
      const code = source.replace(/\/\/.*$/gm, ''); // comments may name what the code avoids
      expect(code, name).not.toMatch(/subgroup/i);
    }
  });
});
