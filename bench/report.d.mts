// Types of bench/report.mjs (plain JS so the bench CLIs run under Node without a build).
import type { SpeedFigures, WeftRow } from './browser.js';
import type { PeerRow } from './peers.js';

/** The browser benchmark page's output. */
export interface PageOutput {
  adapter: string;
  userAgent?: string;
  settings: { runs: number; maxTokens: number; treeBudget: number; warmup: number };
  prompts: { text: string; ids: number[] }[];
  weft: (WeftRow & { texts: string[] })[];
  peers: PeerRow[];
}

/** A weft row against a peer row at the paired format. */
export interface Comparison {
  weft: string;
  peer: string;
  peerBackend: string;
  prefillRatio: number;
  decodeRatio: number;
  ttftRatio: number;
  sameText: boolean;
}

/** The report of one benchmark run. */
export interface SpeedReport extends Omit<PageOutput, 'userAgent'> {
  date: string;
  machine: string;
  host: string;
  hostNote?: string;
  /** The model the rows ran, where it is not the demo target (`--gguf-family`). */
  model?: string;
  quick: boolean;
  browser: string | null;
  comparisons: Comparison[];
}

/** The machine this process runs on. */
export function machine(): string;
/** The report of one run, with the weft/peer ratios. */
export function speedReport(out: PageOutput, meta: { host: string; hostNote?: string; model?: string; quick?: boolean }): SpeedReport;
/** Prints the report as text tables. */
export function printSpeedTables(r: SpeedReport, print: (line: string) => void): void;
/** The report as Markdown lines. */
export function speedMarkdown(r: SpeedReport): string[];
export type { SpeedFigures };
