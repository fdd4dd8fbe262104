// The bundled demo pair through weft: held-out perplexity by the model card's protocol, over the
// whole held-out text, matches the card's headline figure within 5%, and both models generate
// KJV-style text. The card (models/README.md) is written by tools/train/train.py.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { createEngine } from '../../src/engine/create.js';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';

/** The card's evaluation window: the training context. */
const CONTEXT = 256;

/**
 * The card's held-out protocol through weft's CPU reference: encode kjv-heldout.txt (final `\n`
 * dropped) without special tokens, split the ids into consecutive chunks of {@link CONTEXT} (the
 * last one shorter), feed each as [BOS] + chunk[:-1] from an empty cache and score every id of the
 * chunk. Returns the mean cross-entropy in nats per id and the number of chunks.
 */
async function heldoutLoss(dir: string): Promise<{ loss: number; windows: number; ids: number }> {
  const files = await pathModel(dir);
  const opened = await openModel(files);
  const model = new ReferenceRunner(opened.spec, mapWeights(await readAllF32(opened.weights)), {
    capacity: CONTEXT,
  });
  await files.close?.();
  const text = (await readFile('models/kjv-heldout.txt', 'utf8')).replace(/\n$/, '');
  const ids = opened.tokenizer.encode(text, { addSpecialTokens: false });
  const V = opened.spec.vocabSize;
  let total = 0;
  let windows = 0;
  for (let start = 0; start < ids.length; start += CONTEXT, windows++) {
    const chunk = ids.slice(start, start + CONTEXT);
    const logits = model.logitsFor([opened.spec.bosId!, ...chunk.slice(0, -1)]); // [chunk, V]
    chunk.forEach((target, r) => {
      const row = logits.subarray(r * V, (r + 1) * V);
      let max = -Infinity;
      for (const v of row) max = Math.max(max, v);
      let z = 0;
      for (const v of row) z += Math.exp(v - max);
      total += Math.log(z) + max - row[target]!;
    });
  }
  return { loss: total / ids.length, windows, ids: ids.length };
}

/** The "held-out ppl" cell of `name`'s row in the card's results table. */
async function cardPerplexity(name: string): Promise<number> {
  const lines = (await readFile('models/README.md', 'utf8')).split('\n');
  const cells = (line: string) =>
    line
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
  const header = lines.find((l) => l.startsWith('| model |'));
  const row = lines.find((l) => l.startsWith(`| ${name} |`));
  const column = header ? cells(header).indexOf('held-out ppl') : -1;
  if (!row || column < 0)
    throw new Error(`models/README.md has no results row with a held-out ppl for ${name}`);
  return Number(cells(row)[column]);
}

describe.each(['kjv-target', 'kjv-draft'])('bundled demo model %s', (name) => {
  it('held-out perplexity matches the model card within 5%', { timeout: 600_000 }, async () => {
    const t0 = performance.now();
    const { loss, windows, ids } = await heldoutLoss(`models/${name}`);
    const card = await cardPerplexity(name);
    console.log(
      `[demo-model] ${name}: weft held-out loss ${loss.toFixed(4)} ppl ${Math.exp(loss).toFixed(2)} ` +
        `(${windows} windows, ${ids} ids, ${((performance.now() - t0) / 1000).toFixed(1)} s); card ppl ${card}`,
    );
    expect(Math.abs(Math.exp(loss) / card - 1)).toBeLessThan(0.05);
  });

  it('generates readable KJV-style text', { timeout: 600_000 }, async () => {
    const engine = await createEngine({
      model: await pathModel(`models/${name}`),
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
