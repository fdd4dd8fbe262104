import { InvalidInputError } from '../errors.js';
import { shaders } from '../gen/shaders.js';
import type { PipelineCode } from './pipelines.js';
import type { UniformLayout } from './uniforms.js';

// Kernel variants are made one way: text substitution by renderWgsl (values, branches, unrolled
// loops and shared snippets), not WGSL `override` constants. Overrides could set a workgroup size (WGSL, and Chromium, accept override-sized
// workgroup arrays) but not what most variants are: a choice of code (a weight format's unpacking,
// the subgroup or workgroup-memory reduction), bindings that exist or not, the uniform struct, a
// shared snippet (//#include reduce). So a workgroup size is substituted too, as a `const`
// (`const WG: u32 = {{WG}}u;`) set from the TS constant that sizes the dispatch, and every value a
// variant substitutes is part of its pipeline key (see wgslVariant).

/** Values substituted into a WGSL template. */
export type WgslVars = Record<string, string | number | boolean>;

/**
 * Renders a WGSL template: the one way weft makes kernel variants.
 *
 * - `{{NAME}}` is replaced by `vars.NAME` (numbers and strings as written).
 * - Lines between `//#if NAME` and `//#endif` (with an optional `//#else`) are kept when `vars.NAME`
 *   is truthy (the `//#else` branch otherwise). `//#if !NAME` negates. Blocks may nest.
 * - Lines between `//#for I < BOUND` and `//#endfor` are rendered once per I = 0 .. BOUND - 1
 *   (BOUND a number or the name of a numeric variable), with `{{I}}` the index: code a CPU
 *   implementation of WebGPU wants unrolled into named scalars (`var a{{r}} = 0.0;`), which an
 *   indexed local array would keep in memory. Loops may nest, and hold any other directive.
 * - `//#include NAME` is replaced by the snippet `NAME` of `includes` (default: the WGSL files of
 *   shaders/ by file name, e.g. `reduce`), rendered with the same `vars`.
 *
 * A name used but missing from `vars` throws, so a typo never silently picks a branch.
 */
export function renderWgsl(
  template: string,
  vars: WgslVars = {},
  includes: Readonly<Record<string, string>> = shaders,
): string {
  return renderLines(template.split('\n'), vars, includes).join('\n');
}

function renderLines(
  lines: readonly string[],
  vars: WgslVars,
  includes: Readonly<Record<string, string>>,
): string[] {
  const need = (name: string) => {
    if (!(name in vars)) throw new InvalidInputError(`WGSL template variable "${name}" is not set`);
    return vars[name]!;
  };
  const out: string[] = [];
  // Each stack entry: is this branch emitting, and did its parent emit.
  const stack: { on: boolean; parent: boolean }[] = [];
  const emitting = () => stack.every((s) => s.on);
  for (let at = 0; at < lines.length; at++) {
    const line = lines[at]!;
    const t = line.trim();
    const loop = /^\/\/#for\s+(\w+)\s*<\s*(\w+)\s*$/.exec(t);
    if (loop) {
      const end = loopEnd(lines, at);
      if (emitting()) {
        const bound = /^\d+$/.test(loop[2]!) ? Number(loop[2]) : Number(need(loop[2]!));
        if (!Number.isInteger(bound) || bound < 0)
          throw new InvalidInputError(`WGSL template: //#for bound ${loop[2]} = ${bound} is not a count`);
        const body = lines.slice(at + 1, end);
        for (let i = 0; i < bound; i++) out.push(...renderLines(body, { ...vars, [loop[1]!]: i }, includes));
      }
      at = end;
      continue;
    }
    if (t === '//#endfor') throw new InvalidInputError('WGSL template: //#endfor without //#for');
    const m = /^\/\/#if\s+(!?)(\w+)\s*$/.exec(t);
    if (m) {
      const v = Boolean(need(m[2]!));
      stack.push({ on: m[1] === '!' ? !v : v, parent: emitting() });
      continue;
    }
    const inc = /^\/\/#include\s+(\w+)\s*$/.exec(t);
    if (inc) {
      if (!emitting()) continue;
      const snippet = includes[inc[1]!];
      if (snippet === undefined)
        throw new InvalidInputError(`WGSL template: no snippet "${inc[1]}" to include`);
      out.push(renderWgsl(snippet, vars, includes));
      continue;
    }
    if (t === '//#else') {
      const top = stack.at(-1);
      if (!top) throw new InvalidInputError('WGSL template: //#else without //#if');
      top.on = !top.on;
      continue;
    }
    if (t === '//#endif') {
      if (!stack.pop()) throw new InvalidInputError('WGSL template: //#endif without //#if');
      continue;
    }
    if (emitting()) out.push(line.replace(/\{\{(\w+)\}\}/g, (_, n: string) => String(need(n))));
  }
  if (stack.length) throw new InvalidInputError('WGSL template: unterminated //#if');
  return out;
}

/** The index of the `//#endfor` that closes the `//#for` at `start` (loops nest). */
function loopEnd(lines: readonly string[], start: number): number {
  let depth = 0;
  for (let i = start; i < lines.length; i++) {
    const t = lines[i]!.trim();
    if (t.startsWith('//#for ')) depth++;
    else if (t === '//#endfor' && --depth === 0) return i;
  }
  throw new InvalidInputError('WGSL template: unterminated //#for');
}

/** A kernel variant as the pipeline cache takes it: its key, and its WGSL rendered on first use. */
export type WgslVariant = [key: string, source: () => PipelineCode];

/**
 * The pipeline key and source of one kernel variant: `template` rendered with the uniform struct
 * of `params` at `{{PARAMS}}` and with `vars`. The key names every value of `vars` (a true flag by
 * its name, any other value as `NAME=value`; a false flag renders like an absent one, so it is
 * left out), hence two variants that render different WGSL never share a pipeline. `params` stays
 * out of the key: a template must take the same uniform layout whenever its `vars` are equal.
 */
export function wgslVariant(
  template: string,
  params: UniformLayout<string>,
  vars: WgslVars = {},
): WgslVariant {
  const key = Object.entries(vars)
    .filter(([, v]) => v !== false)
    .map(([name, v]) => (v === true ? name : `${name}=${v}`))
    .join(',');
  return [key || 'base', () => ({ code: renderWgsl(template, { ...vars, PARAMS: params.wgsl }) })];
}
