// The floors of src/: every import must point down this list (or stay inside its own folder), and
// no set of files may import each other in a loop. Run by `npm test` (as `npm run check:imports`);
// exits 1 naming each offending import or loop. Type-only imports count: they are architecture too.
//
//   0  src/errors.ts, src/gen/        errors every floor throws; generated shader text
//   1  src/gpu/                       device, buffers, pipelines, half floats
//   2  src/quant/                     the weight formats' codec, the Hadamard construction, weight
//                                     precision, rotation, packing, calibrated rounding (CPU only)
//   3  src/kernels/                   one folder per GPU kernel family
//   4  src/formats/                   safetensors, GGUF, weft checkpoints, the model spec
//   5  src/tokenizer/, src/store/,    beside each other (none imports another)
//      src/grammar/                   (grammar: constraints compiled against a vocabulary)
//   6  src/model/spec/                the model's spec, and the fields its config readers share
//   6.1  src/model/blocks/            one folder per block kind (its tensors, reference forward, GPU
//                                     placement, kernels, state and footprint), and the kind table
//   6.2  src/model/families/          one file per family, and the family table
//   6.3  src/model/                   a checkpoint's tensors, loading, the runners' contract, trees
//   6.4  src/model/reference/,        the two runners: the plain-TS oracle, and the GPU's
//        src/model/gpu/
//   6.5  src/model/draft/             the trained draft head and a checkpoint's MTP layer
//   7  src/decode/, src/steer/,       samplers, drafters, verification; activation steering;
//      src/convert/                   offline tooling: weft convert, export-gguf, GPTQ calibration
//   8  src/engine/                    the public API
//   8  src/host/                      beside it: the Node host's Vulkan driver choice, which only
//                                     entry points make (the CLI, weft/node, tests, benchmarks)
//   9  src/index.ts, src/node.ts, src/cli/, workers/   entry points and transport
//  10  demo/                          may import only src/index.ts and workers/*.worker.ts
// A test beside its code (src/**/*.test.ts) obeys its folder's floor and may also use test/helpers/.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

const FLOORS = {
  'src/errors.ts': 0,
  'src/gen': 0,
  'src/gpu': 1,
  'src/quant': 2,
  'src/kernels': 3,
  'src/formats': 4,
  'src/tokenizer': 5,
  'src/grammar': 5,
  'src/store': 5,
  'src/model/spec': 6,
  'src/model/blocks': 6.1,
  'src/model/families': 6.2,
  'src/model': 6.3,
  'src/model/reference': 6.4,
  'src/model/gpu': 6.4,
  'src/model/draft': 6.5,
  'src/decode': 7,
  'src/steer': 7,
  'src/convert': 7,
  'src/engine': 8,
  'src/host': 8,
  'src/index.ts': 9,
  'src/node.ts': 9,
  'src/cli': 9,
  workers: 9,
  demo: 10,
};
/** What demo/ may import outside itself: the package's public entry and the worker entry files. */
const demoMayImport = (file) => file === 'src/index.ts' || /^workers\/[^/]+\.worker\.ts$/.test(file);
/** What a test file may import outside the floors: the shared test helpers. */
const testMayImport = (file, target) => file.endsWith('.test.ts') && target.startsWith('test/helpers/');

const root = process.argv[2] ?? '.';
/** The floor key of a repository path: the longest FLOORS key it starts with. */
function floorOf(file) {
  let best;
  for (const key of Object.keys(FLOORS))
    if ((file === key || file.startsWith(`${key}/`)) && (!best || key.length > best.length)) best = key;
  return best;
}

function sources(dir, out = []) {
  for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    const rel = `${dir}/${e.name}`;
    if (e.isDirectory()) sources(rel, out);
    else if (/\.(ts|mts)$/.test(e.name) && !e.name.endsWith('.d.ts')) out.push(rel);
  }
  return out;
}

const IMPORT =
  /(?:^|[\s;])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|^import\s+['"]([^'"]+)['"]/gm;
const files = ['src', 'workers', 'demo'].flatMap((d) => sources(d)).filter((f) => !f.startsWith('src/gen/'));
const graph = new Map();
const problems = [];
for (const file of files) {
  const text = readFileSync(path.join(root, file), 'utf8');
  const deps = [];
  for (const m of text.matchAll(IMPORT)) {
    const spec = m[1] ?? m[2] ?? m[3];
    if (!spec.startsWith('.')) continue;
    const target = path.posix
      .normalize(path.posix.join(path.posix.dirname(file), spec))
      .replace(/\.js$/, '.ts');
    deps.push(target);
    if (testMayImport(file, target)) continue;
    const from = floorOf(file);
    const to = floorOf(target);
    if (from === undefined || to === undefined) {
      problems.push(
        `${file} imports ${target}: outside the floors (add its folder to scripts/check-imports.mjs)`,
      );
      continue;
    }
    if (from === to) continue;
    if (from === 'demo') {
      if (!demoMayImport(target))
        problems.push(`${file} imports ${target}: demo/ uses only the public entry points`);
      continue;
    }
    if (FLOORS[to] >= FLOORS[from])
      problems.push(
        `${file} imports ${target}: ${to} (floor ${FLOORS[to]}) is not below ${from} (floor ${FLOORS[from]})`,
      );
  }
  graph.set(file, deps);
}

// Loops: strongly connected components of the file graph (Tarjan), any with two or more files.
let index = 0;
const idx = new Map();
const low = new Map();
const stack = [];
const onStack = new Set();
function visit(v) {
  idx.set(v, index);
  low.set(v, index++);
  stack.push(v);
  onStack.add(v);
  for (const w of graph.get(v) ?? []) {
    if (!graph.has(w)) continue;
    if (!idx.has(w)) {
      visit(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
  }
  if (low.get(v) === idx.get(v)) {
    const scc = [];
    let w;
    do {
      w = stack.pop();
      onStack.delete(w);
      scc.push(w);
    } while (w !== v);
    if (scc.length > 1) problems.push(`import loop through ${scc.length} files: ${scc.sort().join(', ')}`);
  }
}
for (const f of graph.keys()) if (!idx.has(f)) visit(f);

if (problems.length > 0) {
  for (const p of problems) console.error(`check-imports: ${p}`);
  console.error(`check-imports: ${problems.length} problem(s) in ${files.length} files`);
  process.exit(1);
}
console.log(`check-imports: ${files.length} files, imports point down the floors, no loops`);
