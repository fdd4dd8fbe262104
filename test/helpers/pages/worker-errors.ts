// Throws every weft error class in a real Web Worker, through weft's worker server and client, from
// `load`, `render` and `generate`, and compares what arrives with the same error built on the page:
// same class (`instanceof`), name, message, fields and cause, causes that are weft errors included.
// The test reads the list of differences (empty when all is well) from the page.
import { createWorkerEngine } from '../../../src/engine/worker-client.js';
import { errorDifferences, sampleErrors } from '../../fixtures/weft-errors.js';
import type { ThrowRequest } from './worker-errors.worker.js';

const el = (id: string) => document.querySelector<HTMLElement>(`[data-testid="${id}"]`)!;

/** What `run` threw, or a marker string when it did not throw. */
async function thrownBy(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (err) {
    return err;
  }
  return 'nothing was thrown';
}

async function main(): Promise<void> {
  const worker = new Worker(new URL('./worker-errors.worker.ts', import.meta.url), { type: 'module' });
  const problems: string[] = [];
  const checked: string[] = [];
  const check = (what: string, want: Error, got: unknown) => {
    checked.push(what);
    problems.push(...errorDifferences(want, got, what));
  };
  for (const want of Object.values(sampleErrors())) {
    const { name } = want;
    const load = (at: ThrowRequest['at']) => createWorkerEngine<ThrowRequest, never>(worker, { name, at });
    check(`${name} from load`, want, await thrownBy(() => load('load')));
    const engine = await load('engine');
    check(
      `${name} from render`,
      want,
      await thrownBy(() => engine.render([{ role: 'user', content: 'hi' }])),
    );
    const chunks: string[] = [];
    const generated = await thrownBy(async () => {
      for await (const chunk of engine.generate('hi')) chunks.push(chunk.text);
    });
    check(`${name} from generate`, want, generated);
    if (chunks.join() !== 'a')
      problems.push(`${name} from generate: chunks ${chunks.join()} before the error`);
  }
  el('problems').textContent = JSON.stringify(problems);
  el('status').dataset.checked = checked.join(',');
  el('status').textContent = 'done';
}

main().catch((e: unknown) => {
  el('status').textContent = `error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
});
