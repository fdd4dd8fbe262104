// Checks an exported ONNX decoder (tools/onnx/export.py) against weft's plain-TS reference forward:
// one prompt, fed in two steps (a prefill with an empty cache, then the rest with the first step's
// present.* as past_key_values) so the cache path is exercised; every position's logits must agree.
// Usage: node tools/onnx/check.mjs <model dir> <model.onnx>
import { resolve } from 'node:path';
import { withSources } from '../../bench/ssr.mjs';

const [modelDir, onnxPath] = process.argv.slice(2);
if (!modelDir || !onnxPath) {
  console.error('usage: node tools/onnx/check.mjs <model dir> <model.onnx>');
  process.exit(2);
}
process.chdir(resolve(import.meta.dirname, '..', '..'));
const PROMPT = 'And God said unto Moses, I AM THAT I AM';

const { ids, want, spec } = await withSources(async (load) => {
  const { openModel } = await load('/src/model/load.ts');
  const { pathModel } = await load('/src/formats/io/node-file.ts');
  const { ReferenceRunner } = await load('/src/model/reference/reference.ts');
  const { mapWeights, readAllF32 } = await load('/src/model/weights.ts');
  const { GREEDY } = await load('/src/model/runner.ts');
  const files = await pathModel(modelDir);
  const m = await openModel(files);
  const ids = m.tokenizer.encode(PROMPT, { addSpecialTokens: true });
  const ref = new ReferenceRunner(m.spec, mapWeights(await readAllF32(m.weights)), { capacity: 64 });
  await ref.forward({ tokens: ids }, GREEDY, 'all');
  const want = await ref.lastLogits();
  await files.close?.();
  return { ids, want, spec: m.spec };
});

const ort = await import('onnxruntime-node');
const session = await ort.InferenceSession.create(onnxPath);
const V = spec.vocabSize;
const layers = spec.layers;
const i64 = (xs) => new ort.Tensor('int64', BigInt64Array.from(xs, BigInt), [1, xs.length]);
let past = {};
for (let i = 0; i < layers; i++)
  for (const kv of ['key', 'value'])
    past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [
      1,
      spec.kvHeads,
      0,
      spec.headDim,
    ]);
const split = Math.ceil(ids.length / 2);
const got = new Float32Array(ids.length * V);
for (const [from, to] of [
  [0, split],
  [split, ids.length],
]) {
  const out = await session.run({
    input_ids: i64(ids.slice(from, to)),
    attention_mask: i64(ids.slice(0, to).map(() => 1)),
    position_ids: i64(ids.slice(from, to).map((_, j) => from + j)),
    ...past,
  });
  got.set(out.logits.data, from * V);
  past = {};
  for (let i = 0; i < layers; i++)
    for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = out[`present.${i}.${kv}`];
}
let maxDiff = 0;
let maxAbs = 0;
let sameTop = 0;
for (let t = 0; t < ids.length; t++) {
  let a = 0;
  let b = 0;
  for (let v = 0; v < V; v++) {
    const x = got[t * V + v];
    const y = want[t * V + v];
    maxDiff = Math.max(maxDiff, Math.abs(x - y));
    maxAbs = Math.max(maxAbs, Math.abs(y));
    if (x > got[t * V + a]) a = v;
    if (y > want[t * V + b]) b = v;
  }
  if (a === b) sameTop++;
}
// f32 on both sides, different summation orders: differences stay ~1e-5 of the logits' scale.
const tol = 1e-3 * Math.max(1, maxAbs);
console.log(
  `onnx vs weft reference: ${ids.length} positions, max |diff| ${maxDiff.toExponential(2)} (tolerance ${tol.toExponential(2)}), same argmax at ${sameTop}/${ids.length}`,
);
if (!(maxDiff <= tol) || sameTop !== ids.length) {
  console.error('ONNX export does not match weft reference');
  process.exit(1);
}
