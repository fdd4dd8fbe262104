import { type RejectionStep, type rejectionVerify, sampleWeights } from '../../src/decode/rejection.js';

/**
 * The classic rule with a deliberately wrong residual step: after a rejection it resamples from p
 * instead of max(0, p − q), over-weighting what the draft liked. The distribution tests use it to
 * show they have the power to see such a bug.
 */
export const brokenResidualVerify: typeof rejectionVerify = (drafts, q, p, rand): RejectionStep => {
  const emitted: number[] = [];
  for (let i = 0; i < drafts.length; i++) {
    const x = drafts[i]!;
    if (rand(i, 'accept') * q[i]![x]! < p[i]![x]!) {
      emitted.push(x);
      continue;
    }
    emitted.push(sampleWeights(p[i]!, rand(i, 'resample')));
    return { accepted: i, emitted };
  }
  emitted.push(sampleWeights(p[drafts.length]!, rand(drafts.length, 'resample')));
  return { accepted: drafts.length, emitted };
};
