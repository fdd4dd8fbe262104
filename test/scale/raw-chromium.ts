// Chromium driven over the DevTools protocol directly (`--remote-debugging-pipe`), for the scale
// test's memory figures. Playwright enables the Network domain on every page it drives, and
// DevTools then keeps a copy of each response body, up to about 190 MiB, in the tab's memory
// (Blink's buffer partition): a tab that reads a checkpoint over HTTP looks ~190 MiB heavier than
// it is for a user. A page opened here has only the domains asked for (Runtime, Performance).
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { chromiumLaunchOptions } from '../helpers/chromium.js';

type Params = Record<string, unknown>;

/** A message from Chromium: a command's answer (`id`) or an event (`method`, `params`). */
export interface Message {
  id?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: unknown;
  error?: { message: string };
  sessionId?: string;
}

/** The fields of a trace event that a memory dump reads. */
interface TraceEvent {
  ph: string;
  name?: string;
  pid: number;
  args?: {
    name?: string;
    dumps?: { allocators?: Record<string, { attrs?: { size?: { value?: unknown } } }> };
  };
}

/** A Chromium process and its DevTools pipe. */
export interface RawChromium {
  readonly pid: number;
  /** Sends a command (to a page's session when `sessionId` is given) and resolves with its result. */
  send<T = unknown>(method: string, params?: Params, sessionId?: string): Promise<T>;
  /** Calls `listener` with every event until the returned function is called. */
  on(listener: (m: Message) => void): () => void;
  /** Opens `url` in a new tab and returns its session id (Runtime and Performance enabled). */
  openPage(url: string): Promise<{ sessionId: string; targetId: string }>;
  close(): Promise<void>;
}

/** Launches headless Chromium (the tests' flags and executable) with a pipe for DevTools. */
export async function launchRawChromium(): Promise<RawChromium> {
  const { executablePath, args } = chromiumLaunchOptions();
  const profile = await mkdtemp(join(tmpdir(), 'weft-raw-chromium-'));
  const child: ChildProcess = spawn(
    executablePath,
    [...args, '--headless', '--remote-debugging-pipe', `--user-data-dir=${profile}`, 'about:blank'],
    { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] },
  );
  const toChrome = child.stdio[3] as Writable;
  const fromChrome = child.stdio[4] as Readable;
  let nextId = 0;
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void; method: string }>();
  const listeners = new Set<(m: Message) => void>();
  let buffered = '';
  fromChrome.setEncoding('utf8');
  fromChrome.on('data', (chunk: string) => {
    buffered += chunk;
    for (let end = buffered.indexOf('\0'); end >= 0; end = buffered.indexOf('\0')) {
      const m: Message = JSON.parse(buffered.slice(0, end));
      buffered = buffered.slice(end + 1);
      const waiting = m.id === undefined ? undefined : pending.get(m.id);
      if (waiting) {
        pending.delete(m.id!);
        if (m.error) waiting.reject(new Error(`${waiting.method}: ${m.error.message}`));
        else waiting.resolve(m.result);
      } else for (const l of listeners) l(m);
    }
  });
  const send = <T = unknown>(method: string, params: Params = {}, sessionId?: string) =>
    new Promise<T>((resolve, reject) => {
      const id = ++nextId;
      pending.set(id, { resolve: (v) => resolve(v as T), reject, method });
      toChrome.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`);
    });
  const on = (l: (m: Message) => void) => {
    listeners.add(l);
    return () => listeners.delete(l);
  };
  await send('Browser.getVersion');
  return {
    pid: child.pid!,
    send,
    on,
    async openPage(url) {
      const { targetId } = await send<{ targetId: string }>('Target.createTarget', { url: 'about:blank' });
      const { sessionId } = await send<{ sessionId: string }>('Target.attachToTarget', {
        targetId,
        flatten: true,
      });
      await send('Runtime.enable', {}, sessionId);
      await send('Performance.enable', {}, sessionId);
      await send('Page.navigate', { url }, sessionId);
      return { sessionId, targetId };
    },
    async close() {
      await send('Browser.close').catch(() => undefined);
      await new Promise((r) => (child.exitCode === null ? child.once('exit', r) : r(undefined)));
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** What one memory-infra dump says of a process: its allocators' sizes in bytes, by path. */
export interface ProcessMemory {
  readonly name: string;
  readonly pid: number;
  readonly allocators: ReadonlyMap<string, number>;
}

/** A detailed memory-infra dump of every Chromium process (what chrome://tracing shows). */
export async function memoryDump(chrome: RawChromium): Promise<ProcessMemory[]> {
  const events: TraceEvent[] = [];
  let complete!: () => void;
  const done = new Promise<void>((r) => {
    complete = r;
  });
  const off = chrome.on((m) => {
    if (m.method === 'Tracing.dataCollected') events.push(...((m.params?.value ?? []) as TraceEvent[]));
    if (m.method === 'Tracing.tracingComplete') complete();
  });
  await chrome.send('Tracing.start', {
    traceConfig: {
      includedCategories: ['disabled-by-default-memory-infra'],
      excludedCategories: ['*'],
      memoryDumpConfig: { triggers: [] },
    },
    transferMode: 'ReportEvents',
  });
  await chrome.send('Tracing.requestMemoryDump', { deterministic: true, levelOfDetail: 'detailed' });
  await chrome.send('Tracing.end');
  await done;
  off();
  const names = new Map<number, string>();
  for (const e of events)
    if (e.ph === 'M' && e.name === 'process_name') names.set(e.pid, e.args?.name ?? String(e.pid));
  const out: ProcessMemory[] = [];
  for (const e of events) {
    const dumped = e.ph === 'v' ? e.args?.dumps?.allocators : undefined;
    if (!dumped || Object.keys(dumped).length === 0) continue;
    const allocators = new Map<string, number>();
    for (const [path, v] of Object.entries(dumped)) {
      const size = v?.attrs?.size?.value;
      if (typeof size === 'string') allocators.set(path, Number.parseInt(size, 16));
    }
    out.push({ name: names.get(e.pid) ?? String(e.pid), pid: e.pid, allocators });
  }
  return out;
}
