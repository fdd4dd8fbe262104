// Small DOM helpers: typed lookups of the page's static elements, and element creation.

/**
 * The element with `id`, checked to be a `type` (e.g. `HTMLButtonElement`); throws when the page's
 * markup and the script disagree, so a renamed id fails loudly at start-up.
 */
export function byId<T extends HTMLElement>(id: string, type: { new (): T; prototype: T }): T {
  const e = document.getElementById(id);
  if (!(e instanceof type)) throw new Error(`index.html has no ${type.name} #${id}`);
  return e;
}

/** Creates `<tag>` with attributes and children (strings become text nodes). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Creates an SVG element with attributes and children. */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number> = {},
  ...children: (Node | string)[]
): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  e.append(...children);
  return e;
}
