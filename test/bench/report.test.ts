// The browser benchmark's pure parts: medians and per-run means, the fixed prompts, the weft/peer
// ratios of the report.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { benchPrompts, median, type SpeedFigures, summarize, type WeftRow } from '../../bench/browser.js';
import type { PeerRow } from '../../bench/peers.js';
import { speedMarkdown, speedReport } from '../../bench/report.mjs';
import { pathModel } from '../../src/formats/io/node-file.js';
import { openModel } from '../../src/model/load.js';

const fig = (decode: number, extra: Partial<SpeedFigures> = {}): SpeedFigures => ({
  prefillTokS: 10,
  decodeTokS: decode,
  ttftMs: 100,
  tokensPerPass: 1,
  promptTokens: 12,
  completionTokens: 8,
  ...extra,
});

describe('bench statistics', () => {
  it('median of odd and even lists', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
  });

  it('summarize: mean over the prompts of each run, then the median over runs', () => {
    // Run means of decode: 2, 10, 4 -> median 4; a slow outlier run does not move it.
    const runs = [
      [fig(1), fig(3)],
      [fig(10), fig(10)],
      [fig(4), fig(4)],
    ];
    const s = summarize(runs);
    expect(s.decodeTokS).toBe(4);
    expect(s.prefillTokS).toBe(10);
    expect(summarize([[fig(1, { tokensPerPass: 2 }), fig(1, { tokensPerPass: 4 })]]).tokensPerPass).toBe(3);
  });

  it('summarize: the GPU figures alike, and none unless every request has them', () => {
    const gpu = (dispatches: number) => ({
      dispatchesPerToken: dispatches,
      writesPerToken: 40,
      readbacksPerPass: 1,
      readbackBytesPerPass: 4,
      weightBytesPerPass: 1000,
    });
    const s = summarize([[fig(1, { gpu: gpu(30) }), fig(1, { gpu: gpu(40) })]]);
    expect(s.gpu).toEqual(gpu(35));
    expect(summarize([[fig(1, { gpu: gpu(30) }), fig(1)]]).gpu).toBeUndefined();
  });
});

describe('bench prompts', () => {
  const heldout = readFileSync('models/kjv-heldout.txt', 'utf8');

  it('are 10-word starts of distinct held-out verses, the warm-up another one', async () => {
    const { texts, warmup } = benchPrompts(heldout, 3);
    expect(texts).toHaveLength(3);
    const verses = heldout.split('\n');
    for (const t of texts) {
      expect(t.split(' ')).toHaveLength(10);
      expect(verses.some((v) => v.startsWith(t))).toBe(true);
    }
    expect(new Set([...texts, warmup]).size).toBe(4);
    // Consecutive prompts share only BOS, so the engine's prefix cache cannot skip prefill.
    const files = await pathModel('models/kjv-target');
    const { tokenizer } = await openModel(files);
    await files.close?.();
    const ids = [warmup, ...texts].map((t) => tokenizer.encode(t, { addSpecialTokens: true }));
    for (let i = 1; i < ids.length; i++) {
      expect(ids[i]![0]).toBe(ids[i - 1]![0]);
      expect(ids[i]![1]).not.toBe(ids[i - 1]![1]);
    }
  });
});

describe('bench report', () => {
  const weftRow = (
    quant: WeftRow['quant'],
    drafter: string,
    decode: number,
    text: string,
    source = 'safetensors',
  ) => ({
    runtime: 'weft' as const,
    source,
    quant,
    drafter,
    ...fig(decode, { ttftMs: 50 }),
    ids: [[1, 2]],
    lossless: true,
    texts: [text],
  });
  const peer = (runtime: PeerRow['runtime'], format: string, decode: number, text: string): PeerRow => ({
    runtime,
    format,
    backend: 'wasm (2 threads)',
    ...fig(decode, { prefillTokS: 20, ttftMs: 200 }),
    ids: null,
    texts: [text],
  });
  const out = {
    adapter: 'test adapter',
    userAgent: 'test browser',
    settings: { runs: 1, maxTokens: 8, treeBudget: 8, warmup: 1 },
    prompts: [{ text: 'And God said', ids: [0, 1, 2] }],
    weft: [
      {
        ...weftRow('f16', 'none', 3, ' unto'),
        gpu: {
          dispatchesPerToken: 34,
          writesPerToken: 40,
          readbacksPerPass: 1,
          readbackBytesPerPass: 4,
          weightBytesPerPass: 188544,
        },
      },
      weftRow('int8', 'none', 2, ' unto'),
      weftRow('int8', 'ngram', 6, ' unto'),
      weftRow('int4', 'none', 4, ' unto'),
      weftRow('int8', 'none', 4, ' unto', 'GGUF Q8_0'),
    ],
    peers: [
      peer('wllama', 'GGUF Q8_0', 8, ' unto'),
      peer('wllama', 'GGUF Q4_0', 8, ' to'),
      peer('transformers.js', 'ONNX fp32', 1.5, ' unto'),
    ],
  };

  it('pairs int8 with Q8_0, int4 with Q4_0 and f16 with ONNX, per drafter, with ratios weft/peer', () => {
    const r = speedReport(out, { host: 'chromium' });
    expect(r.comparisons.map((c) => `${c.weft} | ${c.peer}`)).toEqual([
      'int8 none | wllama GGUF Q8_0 on wasm',
      'int8 ngram | wllama GGUF Q8_0 on wasm',
      'int8 none (GGUF Q8_0) | wllama GGUF Q8_0 on wasm',
      'int4 none | wllama GGUF Q4_0 on wasm',
      'f16 none | transformers.js ONNX fp32 on wasm',
    ]);
    const [q8, q8ngram, q8gguf, q4, onnx] = r.comparisons;
    expect(q8gguf!.decodeRatio).toBeCloseTo(0.5);
    expect(q8!.decodeRatio).toBeCloseTo(0.25);
    expect(q8ngram!.decodeRatio).toBeCloseTo(0.75);
    expect(q8!.prefillRatio).toBeCloseTo(0.5);
    expect(q8!.ttftRatio).toBeCloseTo(0.25);
    expect(onnx!.decodeRatio).toBeCloseTo(2);
    expect(q8!.sameText).toBe(true);
    expect(q4!.sameText).toBe(false);
    const md = speedMarkdown(r).join('\n');
    expect(md).toContain('| int8 none | wllama GGUF Q8_0 on wasm | 0.500 | 0.250 | 0.25 | yes |');
    expect(md).toContain('wllama GGUF Q4_0 on wasm: " to"');
    // The GPU's work per decode step, '-' for rows without it.
    expect(md).toContain(
      '| safetensors | f16 | none | 10.0 | 3.00 | 50 | 1.00 | yes | 34.0 | 40.0 | 1.00 | 4 | 0.19 |',
    );
    expect(md).toContain('| safetensors | int4 | none | 10.0 | 4.00 | 50 | 1.00 | yes | - | - | - | - | - |');
  });
});
