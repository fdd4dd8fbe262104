// Turns the browser benchmark page's output into the report (machine, settings, rows, and the
// weft/peer ratios), and prints it as text tables or Markdown (bench/RESULTS.md).
import { cpus, release } from 'node:os';

/** weft rows compared with each peer row: the format weft runs against the format the peer runs. */
const PAIRS = [
  { quant: 'int8', runtime: 'wllama', format: 'GGUF Q8_0' },
  { quant: 'int4', runtime: 'wllama', format: 'GGUF Q4_0' },
  { quant: 'f16', runtime: 'wllama', format: 'GGUF F16' },
  { quant: 'f16', runtime: 'transformers.js', format: 'ONNX fp32' },
];

/** A weft row's name: format, drafter, and the weights' file when it is not the safetensors. */
const label = (w) =>
  `${w.quant} ${w.drafter}${w.source && w.source !== 'safetensors' ? ` (${w.source})` : ''}`;

/** The machine this process runs on (the browser runs here too). */
export function machine() {
  const c = cpus();
  return `${c.length} x ${c[0]?.model ?? 'unknown CPU'}, Linux ${release()}, Node ${process.version}`;
}

/**
 * The report of one run: the page's rows plus, for each peer row and each weft drafter at the
 * paired format, the ratios weft/peer of prefill and decode tokens/s and of time to first token,
 * and whether both generated the same text.
 */
export function speedReport(out, meta) {
  const comparisons = [];
  for (const pair of PAIRS) {
    for (const peer of out.peers.filter((p) => p.runtime === pair.runtime && p.format === pair.format))
      for (const w of out.weft.filter((r) => r.quant === pair.quant)) {
        comparisons.push({
          weft: label(w),
          peer: `${peer.runtime} ${peer.format} on ${peer.backend.split(' ')[0]}`,
          peerBackend: peer.backend,
          prefillRatio: w.prefillTokS / peer.prefillTokS,
          decodeRatio: w.decodeTokS / peer.decodeTokS,
          ttftRatio: w.ttftMs / peer.ttftMs,
          sameText: JSON.stringify(w.texts) === JSON.stringify(peer.texts),
        });
      }
  }
  return {
    date: new Date().toISOString(),
    machine: machine(),
    host: meta.host,
    ...(meta.hostNote ? { hostNote: meta.hostNote } : {}),
    ...(meta.model ? { model: meta.model } : {}),
    quick: Boolean(meta.quick),
    browser: out.userAgent ?? null,
    adapter: out.adapter,
    settings: out.settings,
    prompts: out.prompts,
    weft: out.weft,
    peers: out.peers,
    comparisons,
  };
}

const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

/** Table rows (header first) of the weft rows, the peer rows and the comparisons. */
function tables(r) {
  // What each decode step asked of the GPU (GenerationStats' counts; '-' off the GPU).
  const g = (w, key, d) => (w.gpu ? f(w.gpu[key], d) : '-');
  const weft = [
    [
      'weights',
      'format',
      'drafter',
      'prefill tok/s',
      'decode tok/s',
      'TTFT ms',
      'tokens/pass',
      'lossless',
      'dispatches/token',
      'writes/token',
      'readbacks/pass',
      'readback B/pass',
      'weight MB/pass',
    ],
    ...r.weft.map((w) => [
      w.source ?? 'safetensors',
      w.quant,
      w.drafter,
      f(w.prefillTokS),
      f(w.decodeTokS, 2),
      f(w.ttftMs, 0),
      f(w.tokensPerPass, 2),
      w.lossless === null ? '-' : w.lossless ? 'yes' : 'NO',
      g(w, 'dispatchesPerToken', 1),
      g(w, 'writesPerToken', 1),
      g(w, 'readbacksPerPass', 2),
      g(w, 'readbackBytesPerPass', 0),
      w.gpu ? f(w.gpu.weightBytesPerPass / 1e6, 2) : '-',
    ]),
  ];
  const peers = [
    ['runtime', 'format', 'backend', 'prefill tok/s', 'decode tok/s', 'TTFT ms'],
    ...r.peers.map((p) => [
      p.runtime,
      p.format,
      p.backend,
      f(p.prefillTokS),
      f(p.decodeTokS, 2),
      f(p.ttftMs, 0),
    ]),
  ];
  const ratios = [
    ['weft', 'peer', 'prefill weft/peer', 'decode weft/peer', 'TTFT weft/peer', 'same text'],
    ...r.comparisons.map((c) => [
      c.weft,
      c.peer,
      f(c.prefillRatio, 3),
      f(c.decodeRatio, 3),
      f(c.ttftRatio, 2),
      c.sameText ? 'yes' : 'no',
    ]),
  ];
  return { weft, peers, ratios };
}

function textTable(rows) {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
  return rows.map((r) =>
    r
      .map((c, i) => String(c).padEnd(widths[i]))
      .join('  ')
      .trimEnd(),
  );
}

function markdownTable(rows) {
  const [head, ...body] = rows;
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ];
}

/** The generated texts of every runtime, prompt by prompt. */
function generated(r) {
  const lines = [];
  r.prompts.forEach((p, i) => {
    lines.push(`prompt ${i + 1}: ${JSON.stringify(p.text)} (${p.ids.length} ids)`);
    const seen = new Set();
    for (const w of r.weft) {
      const t = w.texts?.[i];
      const name = label(w).replace(/ (none|ngram|draft-model|self-int4)/, '');
      if (t === undefined || seen.has(`${name}:${t}`)) continue;
      seen.add(`${name}:${t}`);
      lines.push(`  weft ${name}: ${JSON.stringify(t)}`);
    }
    for (const p2 of r.peers) {
      const ids = p2.ids?.[i] ? ` ids ${p2.ids[i].join(',')}` : '';
      lines.push(
        `  ${p2.runtime} ${p2.format} on ${p2.backend.split(' ')[0]}: ${JSON.stringify(p2.texts[i])}${ids}`,
      );
    }
  });
  return lines;
}

/** Prints the report as text tables. */
export function printSpeedTables(r, print) {
  print(`${r.date}  ${r.machine}`);
  print(`host: ${r.host}${r.hostNote ? ` (${r.hostNote})` : ''}; adapter: ${r.adapter}`);
  if (r.browser) print(`browser: ${r.browser}`);
  if (r.model) print(`model: ${r.model}`);
  const s = r.settings;
  print(
    `greedy, ${s.maxTokens} tokens per prompt, ${r.prompts.length} prompts, median of ${s.runs} run(s) after ${s.warmup} warm-up, tree budget ${s.treeBudget}`,
  );
  const t = tables(r);
  print('');
  for (const l of textTable(t.weft)) print(l);
  if (r.peers.length) {
    print('');
    for (const l of textTable(t.peers)) print(l);
    print('');
    for (const l of textTable(t.ratios)) print(l);
  }
  print('');
  for (const l of generated(r)) print(l);
}

/** The report as a Markdown section (tables and generated texts). */
export function speedMarkdown(r) {
  const s = r.settings;
  const t = tables(r);
  const out = [
    `- date: ${r.date}`,
    `- machine: ${r.machine}`,
    `- host: ${r.host}${r.hostNote ? ` (${r.hostNote})` : ''}`,
    `- browser: ${r.browser ?? '-'}`,
    `- WebGPU adapter: ${r.adapter}`,
    ...(r.model ? [`- model: ${r.model}`] : []),
    `- settings: greedy, ${s.maxTokens} generated tokens per prompt, ${r.prompts.length} prompts, median of ${s.runs} run(s) after ${s.warmup} warm-up request, tree budget ${s.treeBudget}${r.quick ? ' (--quick)' : ''}`,
    '',
    ...markdownTable(t.weft),
  ];
  if (r.peers.length) out.push('', ...markdownTable(t.peers), '', ...markdownTable(t.ratios));
  out.push('', 'Generated text (last run):', '', '```', ...generated(r), '```');
  return out;
}
