// bench:occupancy's model over the runner's real decode dispatches (recorded without a GPU): the
// counts a decode step holds, and the launch of every decode matmul, held to Little's law.
import { describe, expect, it } from 'vitest';
import { DEVICES, neededInFlight, occupancySummary } from '../../bench/occupancy.js';

describe('bench:occupancy', () => {
  it('Llama-3.2-1B and Qwen3-0.6B shapes at f16, int8, int4, int2: counts and the predicted bandwidth of every decode matmul', async () => {
    const s = await occupancySummary();
    expect(s.reports).toHaveLength(8);
    for (const r of s.reports) {
      // 4096 keys: attention is the partial pass and its merge.
      expect(r.dispatchesPerLayer).toBeLessThanOrEqual(7);
      expect(r.dispatchesPerToken).toBeLessThanOrEqual(4);
      const matmuls = r.rows.filter((row) => row.kind === 'matmul');
      expect(matmuls.map((m) => m.name)).toEqual(['q|k|v', 'o', 'gate|up', 'down', 'lm_head']);
      for (const m of matmuls) {
        expect(m.devices).toHaveLength(DEVICES.length);
        for (const d of m.devices) {
          // At least 80% of bandwidth, or the whole matrix requested at once where the matrix is
          // smaller than 80% of what the device needs in flight (no launch can do more).
          expect(d.predicted, `${r.model} ${r.quant} ${m.name} on ${d.device}`).toBeGreaterThanOrEqual(
            Math.min(0.8, d.bound) - 1e-9,
          );
        }
      }
    }
    // What falls short is only what no launch shape can reach, and it is listed.
    for (const b of s.below) expect(b.bound).toBeLessThan(0.8);
    expect(s.below.every((b) => b.device === 'H100')).toBe(true);
    console.log(
      `[occupancy] needed in flight: ${DEVICES.map((d) => `${d.name} ${(neededInFlight(d) / 1e6).toFixed(2)} MB`).join(', ')}; below 80%: ${s.below.map((b) => `${b.model} ${b.quant} ${b.name} on ${b.device} ${Math.round(b.predicted * 100)}%`).join('; ')}`,
    );
  });
});
