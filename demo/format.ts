// Human-readable figures for the demo page: sizes, rates, durations.

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** `1536` → `1.5 KB` (decimal units, as browsers and disks report storage). */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '?';
  let v = n;
  let u = 0;
  while (v >= 1000 && u < UNITS.length - 1) {
    v /= 1000;
    u++;
  }
  return `${u === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${UNITS[u]}`;
}

/** Bytes per second as `12 MB/s`. */
export function formatRate(bytesPerSecond: number): string {
  return `${formatBytes(bytesPerSecond)}/s`;
}

/** Seconds left as `~5 s`, `~2 min 10 s`, `~1 h 3 min`; `Infinity` (nothing arrived yet) as `…`. */
export function formatEta(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '…';
  const s = Math.round(seconds);
  if (s < 60) return `~${s} s`;
  if (s < 3600) return `~${Math.floor(s / 60)} min ${s % 60} s`;
  return `~${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** Milliseconds as `850 ms` or `2.3 s`. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}
