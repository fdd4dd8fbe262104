// The draft model's work per proposal and per request: a model drafter reports the forward passes
// each proposal ran (its catch-up on the context included), and the engine's stats carry their
// sum and the drafter's weight bytes per pass (what bench:spec's bandwidth model divides).
import { describe, expect, it } from 'vitest';
import type { Drafter } from '../../src/decode/drafter.js';
import { ModelDrafter } from '../../src/decode/model-drafter.js';
import { codecOf } from '../../src/engine/create.js';
import { Engine } from '../../src/engine/engine.js';
import { memoryModelFiles } from '../../src/formats/io/files.js';
import { openModel } from '../../src/model/load.js';
import { referenceTensors } from '../../src/model/quantized.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import type { ModelRunner, SamplerSpec } from '../../src/model/runner.js';
import { mapWeights } from '../../src/model/weights.js';
import { fixtureFiles } from '../fixtures/write.js';

const { files } = fixtureFiles('llama', 'f32', 11);

async function referenceRunner(quant: 'f32' | 'int4'): Promise<ReferenceRunner> {
  const opened = await openModel(memoryModelFiles('llama', files));
  return new ReferenceRunner(opened.spec, mapWeights(await referenceTensors(opened, quant, 'none')), {
    capacity: 128,
  });
}

/** `runner` with its forward calls counted in `count.forwards`. */
function counted(runner: ModelRunner, count: { forwards: number }): ModelRunner {
  return new Proxy(runner, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      if (key === 'forward')
        return (...args: Parameters<ModelRunner['forward']>) => {
          count.forwards++;
          return target.forward(...args);
        };
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

describe('draft passes', () => {
  it('a model drafter reports the forward passes of each proposal, trees and chains', async () => {
    const count = { forwards: 0 };
    const drafter = new ModelDrafter('self-int4', counted(await referenceRunner('int4'), count));
    const context = [5, 17, 99, 3, 250, 11, 42];
    const samplers: SamplerSpec[] = [
      { temperature: 0, topP: 1, topK: 0, seed: 0 },
      { temperature: 1, topP: 1, topK: 0, seed: 3 },
    ];
    for (const sampler of samplers)
      for (const shape of ['tree', 'chain'] as const)
        for (const more of [[], [7], [7, 8, 9]]) {
          count.forwards = 0;
          const p = await drafter.propose([...context, ...more], 8, sampler, shape);
          expect(p.passes, `${shape} after ${more.length} new tokens`).toBe(count.forwards);
          expect(count.forwards).toBeGreaterThan(0);
        }
  });

  it("the engine's stats sum them, with the drafter's weight bytes per pass", async () => {
    const opened = await openModel(memoryModelFiles('llama', files));
    const model = new ModelDrafter('self-int4', await referenceRunner('int4'));
    let proposed = 0;
    const drafter: Drafter = {
      name: 'self-int4',
      weightBytesPerPass: 1234,
      async propose(...args) {
        const p = await model.propose(...args);
        proposed += p.passes ?? 0;
        return p;
      },
      dispose: () => model.dispose(),
    };
    const engine = new Engine({
      id: 'llama',
      runner: await referenceRunner('f32'),
      codec: codecOf(opened.tokenizer, opened.spec.vocabSize),
      drafter,
    });
    for await (const _ of engine.generate([5, 17, 99, 3, 250, 11, 42], { maxTokens: 12, drafter: 'draft' }));
    expect(proposed).toBeGreaterThan(0);
    expect(engine.lastStats).toMatchObject({ draft_passes: proposed, draft_weight_bytes_per_pass: 1234 });
    for await (const _ of engine.generate([5, 17, 99], { maxTokens: 4, drafter: 'none' }));
    expect(engine.lastStats!.draft_passes).toBeUndefined();
  });
});
