// The bundled demo pair through weft: held-out perplexity by the model card's protocol (first 8
// windows, the card's check figure; all 82 take minutes on the CPU reference) matches the card
// within 5%, and both models generate KJV-style text.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { openModel } from '../../src/model/load.js';
import { dirModelFiles } from '../../src/model/node-files.js';
import { ReferenceModel } from '../../src/model/reference.js';
import { readAllF32 } from '../../src/model/reference-runner.js';
import { mapWeights } from '../../src/model/weights.js';

const WINDOWS = 8;

/** Mean cross-entropy over the first `windows` chunks of 256 held-out ids, each fed as [BOS] + chunk[:-1]. */
async function heldoutLoss(dir: string, windows: number): Promise<number> {
  const files = dirModelFiles(dir);
  const opened = await openModel(files);
  const model = new ReferenceModel(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: 256,
  });
  await files.close?.();
  const text = (await readFile('models/kjv-heldout.txt', 'utf8')).replace(/\n$/, '');
  const ids = opened.tokenizer.encode(text, { addSpecialTokens: false });
  const V = opened.spec.vocabSize;
  let total = 0;
  let count = 0;
  for (let w = 0; w < windows; w++) {
    const chunk = ids.slice(w * 256, (w + 1) * 256);
    const logits = model.logitsFor([opened.spec.bosId!, ...chunk.slice(0, -1)]);
    chunk.forEach((target, r) => {
      const row = logits.subarray(r * V, (r + 1) * V);
      let max = -Infinity;
      for (const v of row) max = Math.max(max, v);
      let z = 0;
      for (const v of row) z += Math.exp(v - max);
      total += Math.log(z) + max - row[target]!;
      count++;
    });
  }
  return total / count;
}

/** The card's check figure for `name`: "name first 8 windows: loss X". */
async function cardLoss(name: string): Promise<number> {
  const card = await readFile('models/README.md', 'utf8');
  const m = new RegExp(`${name} first ${WINDOWS} windows: loss ([0-9.]+)`).exec(card);
  if (!m) throw new Error(`models/README.md has no check figure for ${name}`);
  return Number(m[1]);
}

describe.each(['kjv-target', 'kjv-draft'])('bundled demo model %s', (name) => {
  it('held-out perplexity matches the model card within 5%', { timeout: 600_000 }, async () => {
    const loss = await heldoutLoss(`models/${name}`, WINDOWS);
    const card = await cardLoss(name);
    console.log(
      `[demo-model] ${name}: weft ppl ${Math.exp(loss).toFixed(2)}, card ${Math.exp(card).toFixed(2)}`,
    );
    expect(Math.abs(Math.exp(loss) / Math.exp(card) - 1)).toBeLessThan(0.05);
  });

  it('generates readable KJV-style text', { timeout: 600_000 }, async () => {
    const engine = await createEngine({
      model: dirModelFiles(`models/${name}`),
      device: 'cpu',
      contextLength: 128,
    });
    let text = '';
    for await (const c of engine.generate('And the LORD said unto Moses', {
      maxTokens: 24,
      temperature: 0.8,
      seed: 1,
    }))
      text += c.text;
    console.log(`[demo-model] ${name}: ${JSON.stringify(text)}`);
    // Mostly English words of the corpus: letters, spaces and KJV punctuation, at least a few words.
    expect(text.split(/\s+/).filter((w) => /^[A-Za-z]+[,.;:?!']*$/.test(w)).length).toBeGreaterThanOrEqual(8);
    await engine.unload();
  });
});
