// The shape of the tree, held by `npm test` (as `npm run check:shape`) beside the import floors:
//   - no source file over 600 lines: src/**/*.ts (generated src/gen/ aside) and shaders/**/*.wgsl;
//   - file names under src/ in kebab-case (no snake_case);
//   - a family's name (a key of the family table, src/model/families/index.ts) appears in at most
//     its own file (and its GGUF side, `<family>-gguf.ts`, where the family file would pass 600
//     lines with it, and that side's reader, `<family>-gguf-read.ts`, where it is loaded lazily), the table and the places listed in SAME_WORD below, where the same word
//     names something else; nothing outside src/model/families/ branches on a family.
// Exits 1 naming each offending file. Test files (*.test.ts) are not source here.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const root = process.argv[2] ?? '.';
const MAX_LINES = 600;
const TABLE = 'src/model/families/index.ts';

/**
 * Files where a family's name is the same word for another thing, with what it names there. A
 * family file that builds on another (Mistral's GGUF side is Llama's architecture) names it too.
 */
const SAME_WORD = {
  llama: {
    'src/formats/gguf/tokenizer.ts': 'GGUF’s name of the SentencePiece tokenizer (tokenizer.ggml.model)',
    'src/model/families/mistral.ts': 'llama.cpp writes Mistral as its llama architecture, read back as Llama',
  },
  qwen2: { 'src/formats/gguf/tokenizer.ts': 'a GGUF pre-tokenizer name (tokenizer.ggml.pre)' },
};

function files(dir, pattern, out = []) {
  let entries;
  try {
    entries = readdirSync(path.join(root, dir), { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) files(rel, pattern, out);
    else if (pattern.test(e.name)) out.push(rel);
  }
  return out;
}

const problems = [];
const sources = files('src', /\.ts$/).filter((f) => !f.startsWith('src/gen/') && !f.endsWith('.d.ts'));
const nonTest = sources.filter((f) => !f.endsWith('.test.ts'));
for (const f of [...nonTest, ...files('shaders', /\.wgsl$/)]) {
  const lines = readFileSync(path.join(root, f), 'utf8').split('\n').length - 1;
  if (lines > MAX_LINES) problems.push(`${f} has ${lines} lines (at most ${MAX_LINES})`);
}
for (const f of files('src', /./)) {
  if (f.startsWith('src/gen/')) continue;
  if (path.basename(f).includes('_')) problems.push(`${f}: file names under src/ are kebab-case`);
}

// The family names: the keys of the table's `FAMILIES` object.
let table = '';
try {
  table = readFileSync(path.join(root, TABLE), 'utf8');
} catch {}
const body = /export const FAMILIES[^=]*=\s*\{([^}]*)\}/.exec(table)?.[1] ?? '';
const families = [...body.matchAll(/^\s*([a-z][a-z0-9_]*)\s*[:,]/gm)].map((m) => m[1]);
const text = new Map(nonTest.map((f) => [f, readFileSync(path.join(root, f), 'utf8')]));
for (const family of families) {
  const own = `src/model/families/${family.replaceAll('_', '-')}.ts`;
  const ownGguf = own.replace(/\.ts$/, '-gguf.ts');
  const ownGgufRead = own.replace(/\.ts$/, '-gguf-read.ts');
  // The name as a word of its own: not a part of a longer name (`llama3`, `LLAMA_`), a file or a
  // tool of llama.cpp (`llama.cpp`, `llama-quantize`).
  const word = new RegExp(`(?<![\\w.-])${family}(?![\\w]|[.-]\\w)`);
  const allowed = new Set([own, ownGguf, ownGgufRead, TABLE, ...Object.keys(SAME_WORD[family] ?? {})]);
  const found = [...text].filter(([, t]) => word.test(t)).map(([f]) => f);
  for (const f of found)
    if (!allowed.has(f)) problems.push(`${f} names the family ${family} (only ${own} and ${TABLE} may)`);
}
// Branches on a family outside the family files.
for (const [f, t] of text)
  if (!f.startsWith('src/model/families/') && /\.family\s*[!=]==|case\s+'[a-z0-9_]+'\s*:.*family/.test(t))
    problems.push(`${f} branches on a family (ask the family table instead)`);

if (problems.length > 0) {
  for (const p of problems) console.error(`check-shape: ${p}`);
  console.error(`check-shape: ${problems.length} problem(s)`);
  process.exit(1);
}
console.log(
  `check-shape: ${nonTest.length} source files, none over ${MAX_LINES} lines, kebab-case names, ${families.length} families each named only in its file and the table`,
);
