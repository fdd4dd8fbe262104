// Tool calls in model output, in the two conventions chat templates teach: Qwen (2.5, 3)
// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks, and Llama 3.1's bare JSON
// object `{"name": ..., "parameters": {...}}` as the whole reply. Turned into OpenAI `tool_calls`
// (arguments as JSON text), and back: OpenAI messages to what templates read (arguments as objects,
// as Transformers passes them).
import type { JSONSchemaFormat, StructuralTag, TagFormat } from '@mlc-ai/web-xgrammar';
import { InvalidInputError } from '../errors.js';
import type { ChatMessage, ChatTool, ToolCall } from './types.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

/** One parsed call: the function's name and its arguments as JSON text. */
interface ParsedCall {
  name: string;
  arguments: string;
}

/** `{name, arguments | parameters}` of a call's JSON text, or undefined if it is not one. */
function callOf(json: string): ParsedCall | undefined {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const o: { name?: unknown; arguments?: unknown; parameters?: unknown } = v;
  if (typeof o.name !== 'string') return undefined;
  const args = o.arguments ?? o.parameters ?? {};
  return { name: o.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) };
}

/**
 * Splits streamed model text into content and tool calls as it arrives: text outside tool-call
 * markup is content (held back only while it may be the start of `<tool_call>`), each complete
 * `<tool_call>` block is a call, and a reply that is one JSON object `{name, parameters}` (Llama
 * 3.1) is a call once the reply ends. Calls get ids `call_<n>` in order.
 */
export class ToolCallParser {
  private buffer = '';
  private inCall = false;
  /** Whether the reply so far is only whitespace and an opening `{` (a Llama 3.1 JSON call). */
  private bareJson: boolean | undefined;
  private count = 0;

  constructor(private readonly idPrefix = 'call') {}

  /** Feeds the next text; returns the content to show now and the calls completed by it. */
  push(text: string): { content: string; calls: ToolCall[] } {
    this.buffer += text;
    if (this.bareJson === undefined) {
      const start = this.buffer.trimStart();
      if (start.length === 0) return { content: '', calls: [] };
      this.bareJson = start.startsWith('{');
    }
    if (this.bareJson) return { content: '', calls: [] };
    let content = '';
    const calls: ToolCall[] = [];
    for (;;) {
      if (this.inCall) {
        const end = this.buffer.indexOf(CLOSE);
        if (end < 0) break;
        const body = this.buffer.slice(0, end);
        this.buffer = this.buffer.slice(end + CLOSE.length);
        this.inCall = false;
        const call = callOf(body.trim());
        if (call) calls.push(this.toolCall(call));
        else content += OPEN + body + CLOSE; // not a call after all: show it as written
      } else {
        const at = this.buffer.indexOf(OPEN);
        if (at >= 0) {
          content += this.buffer.slice(0, at);
          this.buffer = this.buffer.slice(at + OPEN.length);
          this.inCall = true;
          continue;
        }
        // Keep back a tail that may be the start of `<tool_call>`.
        let keep = 0;
        for (let k = Math.min(OPEN.length - 1, this.buffer.length); k > 0; k--)
          if (OPEN.startsWith(this.buffer.slice(-k))) {
            keep = k;
            break;
          }
        content += this.buffer.slice(0, this.buffer.length - keep);
        this.buffer = this.buffer.slice(this.buffer.length - keep);
        break;
      }
    }
    return { content, calls };
  }

  /** Ends the reply: what is left as content, and a bare-JSON reply's call. */
  finish(): { content: string; calls: ToolCall[] } {
    const rest = this.buffer;
    this.buffer = '';
    if (this.bareJson) {
      const call = callOf(rest.trim());
      return call ? { content: '', calls: [this.toolCall(call)] } : { content: rest, calls: [] };
    }
    return { content: this.inCall ? OPEN + rest : rest, calls: [] };
  }

  private toolCall(c: ParsedCall): ToolCall {
    return {
      id: `${this.idPrefix}_${this.count++}`,
      type: 'function',
      function: { name: c.name, arguments: c.arguments },
    };
  }
}

/** Content and tool calls of a whole reply (see {@link ToolCallParser}). */
export function parseToolCalls(text: string): { content: string; calls: ToolCall[] } {
  const p = new ToolCallParser();
  const a = p.push(text);
  const b = p.finish();
  return { content: a.content + b.content, calls: [...a.calls, ...b.calls] };
}

/**
 * The grammar of a reply that is one call to one of `tools` (XGrammar's structural tag), in the
 * conventions {@link ToolCallParser} reads: a Qwen `<tool_call>` block, or Llama 3.1's bare JSON
 * object. The model picks the convention with its first token, as it was trained to; then the
 * function's name is one of the tools' and its arguments are JSON valid under that tool's
 * `parameters` (none: `{}`), so the reply always parses into a call its tool accepts.
 */
export function forcedCallTag(tools: readonly ChatTool[]): StructuralTag {
  const call = (begin: (name: string) => string, end: string) =>
    tools.map(({ function: f }): TagFormat => {
      if (typeof f?.name !== 'string')
        throw new InvalidInputError(`tools: each function needs a name, got ${JSON.stringify(f)}`);
      const schema = schemaOf(f.name, f.parameters ?? { type: 'object' });
      return { type: 'tag', begin: begin(JSON.stringify(f.name)), content: schema, end };
    });
  const qwen = call((name) => `${OPEN}\n{"name": ${name}, "arguments": `, `}\n${CLOSE}`);
  const llamaCall = call((name) => `{"name": ${name}, "parameters": `, '}');
  return { type: 'structural_tag', format: { type: 'or', elements: [...qwen, ...llamaCall] } };
}

/** A tool's parameters as a structural tag's JSON schema (strict: no keys it does not name). */
function schemaOf(name: string, parameters: unknown): JSONSchemaFormat {
  if (typeof parameters !== 'object' || parameters === null || Array.isArray(parameters))
    throw new InvalidInputError(
      `tools: the parameters of ${JSON.stringify(name)} must be a JSON schema object, got ${JSON.stringify(parameters)}`,
    );
  return { type: 'json_schema', json_schema: { ...parameters } };
}

/** A chat message as templates read it: tool-call arguments as values, not JSON text. */
export type TemplateMessage = Omit<ChatMessage, 'tool_calls'> & {
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: unknown } }[];
};

/**
 * A message as chat templates read it: an assistant's OpenAI `tool_calls` with their arguments
 * parsed to objects (Transformers' convention, which Llama 3.1's template needs: it writes
 * `arguments | tojson`), everything else as given.
 */
export function templateMessage(m: ChatMessage): TemplateMessage {
  if (!m.tool_calls) {
    // Absent, not undefined: a template tests `message.tool_calls is defined`.
    const { tool_calls: _, ...rest } = m;
    return rest;
  }
  return {
    ...m,
    tool_calls: m.tool_calls.map((c, i) => {
      let args: unknown;
      try {
        args = JSON.parse(c.function.arguments);
      } catch (cause) {
        throw new InvalidInputError(
          `tool_calls[${i}].function.arguments must be JSON text, got ${JSON.stringify(c.function.arguments)}`,
          { cause },
        );
      }
      return { id: c.id, type: 'function', function: { name: c.function.name, arguments: args } };
    }),
  };
}
