// Loads @mlc-ai/web-xgrammar (Apache-2.0; the grammar engine of WebLLM, its WASM inlined as base64
// in one 1.1 MB file) the same way in a page, a Web Worker and Node.
//
// The package ships a UMD bundle marked `"type": "module"`. A bundler (vite) sees its `exports`
// test and wraps it as CommonJS, so the module has a default export; Node runs it as an ES module,
// where it attaches itself to `globalThis.xgrammar` instead, and its Emscripten start-up reads
// `require('url')` and `__filename`, which an ES module lacks. Under Node this file lends both as
// globals for the load and the WASM start-up only, then takes them back.
import type XGrammarDefault from '@mlc-ai/web-xgrammar';

/** The grammar engine's classes (TokenizerInfo, GrammarCompiler, GrammarMatcher, ...). */
export type XGrammar = typeof XGrammarDefault;

interface LoaderGlobals {
  xgrammar?: XGrammar;
  require?: unknown;
  __filename?: unknown;
}

interface NodeProcess {
  versions?: { node?: string };
  getBuiltinModule?: (id: string) => unknown;
}

interface NodeModuleApi {
  createRequire(from: string): unknown;
}

interface NodeUrlApi {
  fileURLToPath(url: string): string;
}

let loading: Promise<XGrammar> | undefined;

/** Runs `fn` (a synchronous engine call) with the engine's printed lines dropped. */
export function engineQuiet<T>(fn: () => T): T {
  const outer = listener;
  listener = [];
  try {
    return fn();
  } finally {
    listener = outer;
  }
}
/** Where the engine's error lines go while {@link engineMessages} listens (else to the console). */
let listener: string[] | undefined;

/**
 * Runs `fn` and returns, beside its result or error, the lines the grammar engine printed meanwhile:
 * it reports what is wrong with a grammar only there (`[FATAL] ... EBNF parser error at line 1,
 * column 15: ...`), then throws a bare `Aborted()`.
 */
export async function engineMessages<T>(
  fn: () => Promise<T>,
): Promise<{ ok: true; value: T } | { ok: false; error: unknown; lines: string[] }> {
  const lines: string[] = [];
  listener = lines;
  try {
    return { ok: true, value: await fn() };
  } catch (error) {
    return { ok: false, error, lines };
  } finally {
    listener = undefined;
  }
}

/** The grammar engine, loaded and its WASM started on first call (later calls share it). */
export function loadXGrammar(): Promise<XGrammar> {
  loading ??= load();
  return loading;
}

/** Node's `process` when this runs under Node (with `getBuiltinModule`, Node ≥ 20.16), else undefined. */
function nodeProcess(): NodeProcess | undefined {
  const p = (globalThis as { process?: NodeProcess }).process;
  return typeof p?.versions?.node === 'string' ? p : undefined;
}

async function load(): Promise<XGrammar> {
  const g = globalThis as LoaderGlobals;
  const node = nodeProcess();
  const saved = { require: g.require, __filename: g.__filename };
  const lend = node !== undefined && typeof document === 'undefined' && g.require === undefined;
  if (lend) {
    const get = node.getBuiltinModule;
    if (!get)
      throw new Error('loading the grammar engine under Node needs process.getBuiltinModule (Node ≥ 20.16)');
    const mod = get('node:module') as NodeModuleApi;
    const url = get('node:url') as NodeUrlApi;
    g.require = mod.createRequire(import.meta.url);
    g.__filename = url.fileURLToPath(import.meta.url);
  }
  // Emscripten binds its error printer to console.error when the WASM starts: route it through
  // `listener` so that engineMessages can collect what the engine says about a bad grammar.
  const consoleError = console.error;
  const consoleLog = console.log;
  console.error = (...args: unknown[]) => {
    if (listener) listener.push(args.map(String).join(' '));
    else consoleError(...args);
  };
  // Its warnings (e.g. a rejected special token) go to its output printer, bound to console.log.
  console.log = (...args: unknown[]) => {
    if (listener) listener.push(args.map(String).join(' '));
    else consoleLog(...args);
  };
  try {
    const ns: { default?: XGrammar } = await import('@mlc-ai/web-xgrammar');
    const xg = ns.default ?? g.xgrammar;
    if (!xg) throw new Error('@mlc-ai/web-xgrammar loaded but exposed no classes');
    // Starts the WASM now, while the Node globals are lent.
    (await xg.Grammar.builtinJSONGrammar()).dispose();
    return xg;
  } finally {
    console.error = consoleError;
    console.log = consoleLog;
    if (lend) {
      g.require = saved.require;
      g.__filename = saved.__filename;
      if (saved.require === undefined) delete g.require;
      if (saved.__filename === undefined) delete g.__filename;
    }
  }
}
