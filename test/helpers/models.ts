// The bundled models (models/ at the repository root) as ModelFiles in either test host: over the
// Vite server in Chromium, read in place from the folder in Node.
import type { ModelFiles } from '../../src/formats/io/files.js';
import { urlModelFiles } from '../../src/formats/io/files.js';

/** The bundled model `name` (e.g. `kjv-draft`), from whichever host runs the test. */
export async function bundledModel(name: string): Promise<ModelFiles> {
  if (typeof window !== 'undefined') return urlModelFiles(`/models/${name}/`);
  const { pathModel } = await import('../../src/formats/io/node-file.js');
  return pathModel(`models/${name}`);
}

/**
 * The trained tiny Qwen3.5 of test/fixtures/qwen35-trained (tools/train/train_qwen35_tiny.py), from
 * whichever host runs the test.
 */
export async function trainedQwen35(): Promise<ModelFiles> {
  const dir = 'test/fixtures/qwen35-trained';
  if (typeof window !== 'undefined') return urlModelFiles(`/${dir}/`);
  const { pathModel } = await import('../../src/formats/io/node-file.js');
  return pathModel(dir);
}
