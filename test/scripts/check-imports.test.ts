// scripts/check-imports.mjs keeps the floors of src/ (see its header): it passes on this tree and
// fails, naming the import, on a tree with an upward import, a loop or a deep import from demo/.
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const SCRIPT = path.resolve('scripts/check-imports.mjs');

function check(root: string): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

let dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  dirs = [];
});

/** A tree with the given files (path → text), plus empty src/, workers/ and demo/ folders. */
async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(path.join(tmpdir(), 'weft-imports-'));
  dirs.push(root);
  for (const d of ['src', 'workers', 'demo']) await mkdir(path.join(root, d), { recursive: true });
  for (const [file, text] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await writeFile(path.join(root, file), text);
  }
  return root;
}

describe('import floors', () => {
  it('pass on this repository', () => {
    const r = check('.');
    expect(r.out).toContain('imports point down the floors, no loops');
    expect(r.status).toBe(0);
  });

  it('pass on downward imports', async () => {
    const root = await tree({
      'src/gpu/device.ts': 'export const d = 1;\n',
      'src/model/runner.ts': "import { d } from '../gpu/device.js';\nexport const r = d;\n",
      'demo/main.ts': "import { r } from '../src/index.js';\nconsole.log(r);\n",
      'src/index.ts': "export { r } from './model/runner.js';\n",
    });
    expect(check(root).status).toBe(0);
  });

  it('fail on an upward import, naming both files and floors', async () => {
    const root = await tree({
      'src/kernels/matmul/matmul.ts':
        "import type { Quant } from '../../engine/create.js';\nexport type Q = Quant;\n",
      'src/engine/create.ts': "export type Quant = 'f16';\n",
    });
    const r = check(root);
    expect(r.status).toBe(1);
    expect(r.out).toContain(
      'src/kernels/matmul/matmul.ts imports src/engine/create.ts: src/engine (floor 8) is not below src/kernels (floor 3)',
    );
  });

  it('fail on an import between folders of one floor', async () => {
    const root = await tree({
      'src/store/store.ts': "import { t } from '../tokenizer/tokenizer.js';\nexport const s = t;\n",
      'src/tokenizer/tokenizer.ts': 'export const t = 1;\n',
    });
    expect(check(root).out).toContain('src/store/store.ts imports src/tokenizer/tokenizer.ts');
  });

  it('fail on a loop inside one folder', async () => {
    const root = await tree({
      'src/model/a.ts': "import { b } from './b.js';\nexport const a = () => b;\n",
      'src/model/b.ts': "import { a } from './a.js';\nexport const b = () => a;\n",
    });
    const r = check(root);
    expect(r.status).toBe(1);
    expect(r.out).toContain('import loop through 2 files: src/model/a.ts, src/model/b.ts');
  });

  it('fail on a deep import from demo/', async () => {
    const root = await tree({
      'demo/main.ts': "import { AbortError } from '../src/errors.js';\nconsole.log(AbortError);\n",
      'src/errors.ts': 'export class AbortError extends Error {}\n',
    });
    expect(check(root).out).toContain(
      'demo/main.ts imports src/errors.ts: demo/ uses only the public entry points',
    );
  });
});
