// A worker serving an engine over the toy model (test/helpers/toy-model.ts), to test the worker
// transport without model files.
import { Engine } from '../../../src/engine/engine.js';
import { serveEngine } from '../../../src/engine/worker-server.js';
import { ToyRunner, toyCodec } from '../../helpers/toy-model.js';

serveEngine(async () => {
  const runner = new ToyRunner();
  runner.delayMs = 10;
  return new Engine({ id: 'toy', runner, codec: toyCodec });
});
