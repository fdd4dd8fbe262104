// A spec and random weights through `exportGguf` and back (`openGgufCheckpoint`): the spec read
// back, the tensors as read, and both sides' reference logits, for the families' GGUF tests.
import { exportGguf, type GgufExportType } from '../../src/convert/gguf-export.js';
import { openGguf } from '../../src/formats/gguf/header.js';
import { memoryBytes } from '../../src/formats/io/bytes.js';
import { specFromConfig } from '../../src/model/families/index.js';
import { splitFusedView } from '../../src/model/fused-view.js';
import { openGgufCheckpoint } from '../../src/model/gguf.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { randomTensors } from '../fixtures/write.js';

/** `config`'s spec and seeded tensors exported as `type`, opened again. */
export async function ggufRoundTrip(config: Record<string, unknown>, type: GgufExportType, seed = 3) {
  const spec = { ...specFromConfig(config), bosId: undefined, eosIds: [] };
  const tensors = randomTensors(spec, seed);
  const bytes = exportGguf(spec, tensors, type);
  const file = await openGguf(memoryBytes(bytes, 'moe.gguf'));
  const ck = await openGgufCheckpoint(memoryBytes(bytes, 'moe.gguf'));
  const weights = mapWeights(await readAllF32(splitFusedView(ck, ck.spec, () => 'moe.gguf')));
  const source = mapWeights(
    Object.fromEntries(tensors.map((t) => [t.name, { shape: t.shape, data: t.data }])),
  );
  const prompt = Array.from({ length: 12 }, (_, i) => (i * 37 + 11) % spec.vocabSize);
  return {
    spec,
    back: ck.spec,
    file,
    tensors,
    weights,
    logits: new ReferenceRunner(spec, source).logitsFor(prompt),
    backLogits: new ReferenceRunner(ck.spec, weights).logitsFor(prompt),
  };
}
