// scripts/check-shape.mjs keeps the tree's shape (see its header): it passes on this tree, and
// fails, naming the file, on a source file over 600 lines, a snake_case file name under src/, a
// family named outside its own file and the family table, and a branch on a family.
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const SCRIPT = path.resolve('scripts/check-shape.mjs');

function check(root: string): { status: number | null; out: string } {
  const r = spawnSync(process.execPath, [SCRIPT, root], { encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr };
}

let dirs: string[] = [];
afterEach(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  dirs = [];
});

const TABLE = 'export const FAMILIES = {\n  llama,\n  qwen3_5,\n} as const;\n';

/** A tree with a two-family table and the given files (path → text). */
async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(path.join(tmpdir(), 'weft-shape-'));
  dirs.push(root);
  const all = {
    'src/model/families/index.ts': TABLE,
    'src/model/families/llama.ts': "export const llama = { arch: 'llama' };\n",
    'src/model/families/qwen3-5.ts': "export const qwen3_5 = { arch: 'qwen35' };\n",
    ...files,
  };
  for (const [file, text] of Object.entries(all)) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await writeFile(path.join(root, file), text);
  }
  return root;
}

describe('tree shape', () => {
  it('holds on this repository', () => {
    const r = check('.');
    expect(r.out).toContain('none over 600 lines, kebab-case names');
    expect(r.status).toBe(0);
  });

  it('holds on a tree that keeps to it (llama.cpp and llama3 are other words)', async () => {
    const root = await tree({
      'src/model/gguf.ts': '// As llama.cpp writes it; llama3 scaling; LLAMA_NAMES.\nexport const x = 1;\n',
      'shaders/matmul/matmul-serial.wgsl': '// a\n'.repeat(600),
    });
    expect(check(root).status).toBe(0);
  });

  it('fails on a file over 600 lines, naming it and its length', async () => {
    const root = await tree({ 'shaders/matmul/matmul.wgsl': '// a\n'.repeat(601) });
    const r = check(root);
    expect(r.status).toBe(1);
    expect(r.out).toContain('shaders/matmul/matmul.wgsl has 601 lines (at most 600)');
  });

  it('fails on a snake_case file name under src/', async () => {
    const r = check(await tree({ 'src/kernels/rope/qkv_rope.ts': 'export {};\n' }));
    expect(r.status).toBe(1);
    expect(r.out).toContain('src/kernels/rope/qkv_rope.ts: file names under src/ are kebab-case');
  });

  it('fails on a family named outside its file and the table, and on a branch on a family', async () => {
    const r = check(
      await tree({
        'src/formats/gguf/names.ts': "export const arch = (f: string) => (f === 'qwen3_5' ? 'qwen35' : f);\n",
        'src/model/gpu/runner.ts': "export const tree = (s: { family: string }) => s.family === 'x';\n",
      }),
    );
    expect(r.status).toBe(1);
    expect(r.out).toContain('src/formats/gguf/names.ts names the family qwen3_5');
    expect(r.out).toContain('src/model/gpu/runner.ts branches on a family');
    // A family file names itself freely.
    expect(r.out).not.toContain('qwen3-5.ts names');
  });

  it('lets a family’s GGUF side (<family>-gguf.ts) and its reader (<family>-gguf-read.ts) name it, and no other family', async () => {
    const r = check(
      await tree({
        'src/model/families/qwen3-5-gguf.ts': "export const arch = 'qwen3_5';\n",
        'src/model/families/qwen3-5-gguf-read.ts': "export const read = 'qwen3_5';\n",
        'src/model/families/llama-gguf.ts': "export const other = 'qwen3_5';\n",
      }),
    );
    expect(r.status).toBe(1);
    expect(r.out).not.toContain('qwen3-5-gguf.ts names');
    expect(r.out).not.toContain('qwen3-5-gguf-read.ts names');
    expect(r.out).toContain('src/model/families/llama-gguf.ts names the family qwen3_5');
  });
});
