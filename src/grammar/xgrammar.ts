// Loads @mlc-ai/web-xgrammar (Apache-2.0; the grammar engine of WebLLM, its WASM inlined as base64
// in one 1.1 MB file) the same way in a page, a Web Worker and Node, from the copy in src/gen that
// scripts/gen-xgrammar.mjs writes: the package's bundle with its Node-only start-up lines made
// invisible to bundlers (an app's browser build would otherwise warn about Node's `module` and
// `url`) and its stand-in for `import.meta.url` replaced by `import.meta.url` itself.
//
// The bundle is UMD in a file marked `"type": "module"`. A bundler (vite) sees its `exports` test
// and wraps it as CommonJS, so the module has a default export; served or run as an ES module
// (Vite's dev server, Node), it attaches itself to `globalThis.xgrammar` instead.
import type XGrammarDefault from '@mlc-ai/web-xgrammar';

/** The grammar engine's classes (TokenizerInfo, GrammarCompiler, GrammarMatcher, ...). */
export type XGrammar = typeof XGrammarDefault;

interface LoaderGlobals {
  xgrammar?: XGrammar;
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

async function load(): Promise<XGrammar> {
  const g = globalThis as LoaderGlobals;
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
    const ns: { default?: XGrammar } = await import('../gen/xgrammar.js');
    const xg = ns.default ?? g.xgrammar;
    if (!xg) throw new Error('@mlc-ai/web-xgrammar loaded but exposed no classes');
    // Starts the WASM now, with the console routed.
    (await xg.Grammar.builtinJSONGrammar()).dispose();
    return xg;
  } finally {
    console.error = consoleError;
    console.log = consoleLog;
  }
}
