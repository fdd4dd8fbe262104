// Activation steering on the bundled demo target (models/kjv-target), through the CPU reference in
// Node. Metric, in both tests: the mean log-probability per token of a set of lines (each line
// scored from BOS, nats/token), and the gap G = mean logp(set A) − mean logp(set B) of two books'
// held-out verses (lines of models/kjv-heldout.txt, not seen in training).
//
// 1. A Psalms − Leviticus direction measured on training verses (10 each), evaluated on 10
//    held-out verses of each book: adding it at the middle layer raises G (toward Psalms), adding
//    its negative lowers G; ablating it at every layer makes both books' text less likely.
// 2. A held-out split (the acceptance test of issue 11): the held-out verses of Psalms (lines
//    278–327) and of Leviticus + Numbers (lines 54–96) are split by alternate lines; the direction
//    r = mean(Psalms) − mean(Leviticus + Numbers) at the last token and the layer are chosen on
//    the first half only, and G is evaluated on the other half. Adding r moves G toward Psalms;
//    ablating r (h − (h·r)r on the chosen block's input and output) moves G away from Psalms.
//    Why ablation lowers G: both sets' residuals project positively on r, the Psalms ones further
//    (measuring half, last token: 302 vs 176 at layer 4), so removing the r component takes more
//    away from Psalms' representation, and Psalms text loses more log-probability than Leviticus
//    / Numbers text. A random direction (the same norm for "add") is the control: it must not move
//    G by more than a fifth of the measured direction's effect.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { pathModel } from '../../src/formats/io/node-file.js';
import { type SteerPlan, steerHook } from '../../src/kernels/steer/steer.js';
import { openModel } from '../../src/model/load.js';
import { ReferenceRunner } from '../../src/model/reference/reference.js';
import { mapWeights, readAllF32 } from '../../src/model/weights.js';
import { lastTokenResiduals, measureDirections } from '../../src/steer/measure.js';

const PS_MEASURE = [
  'But his delight is in the law of the LORD; and in his law doth he meditate day and night.',
  'The LORD hath heard my supplication; the LORD will receive my prayer.',
  'He hath said in his heart, I shall not be moved: for I shall never be in adversity.',
  'Concerning the works of men, by the word of thy lips I have kept me from the paths of the destroyer.',
  'Then did I beat them small as the dust before the wind: I did cast them out as the dirt in the streets.',
  'Many bulls have compassed me: strong bulls of Bashan have beset me round.',
  'Consider mine enemies; for they are many; and they hate me with cruel hatred.',
  'I cried to thee, O LORD; and unto the LORD I made supplication.',
  'Behold, the eye of the LORD is upon them that fear him, upon them that hope in his mercy;',
  'Stir up thyself, and awake to my judgment, even unto my cause, my God and my Lord.',
];

const LEV_MEASURE = [
  'And the LORD called unto Moses, and spake unto him out of the tabernacle of the congregation, saying,',
  'All the males among the priests shall eat thereof: it is most holy.',
  'And Moses took the anointing oil, and anointed the tabernacle and all that was therein, and sanctified them.',
  'And the LORD spake unto Aaron, saying,',
  'All fowls that creep, going upon all four, shall be an abomination unto you.',
  'But if the scall spread much in the skin after his cleansing;',
  'And for the leprosy of a garment, and of a house,',
  "Thou shalt not uncover the nakedness of thy father's sister: she is thy father's near kinswoman.",
  'Ye shall not round the corners of your heads, neither shalt thou mar the corners of thy beard.',
  'And Moses told it unto Aaron, and to his sons, and unto all the children of Israel.',
];

const PS_HELDOUT = [
  'He that sitteth in the heavens shall laugh: the LORD shall have them in derision.',
  'If I have rewarded evil unto him that was at peace with me; (yea, I have delivered him that without cause is mine enemy:)',
  'I will bless the LORD, who hath given me counsel: my reins also instruct me in the night seasons.',
  'For who is God save the LORD? or who is a rock save our God?',
  'Thine hand shall find out all thine enemies: thy right hand shall find out those that hate thee.',
  'Who is this King of glory? The LORD strong and mighty, the LORD mighty in battle.',
  'Wait on the LORD: be of good courage, and he shall strengthen thine heart: wait, I say, on the LORD.',
  'Let the lying lips be put to silence; which speak grievous things proudly and contemptuously against the righteous.',
  'Come, ye children, hearken unto me: I will teach you the fear of the LORD.',
  'Let not the foot of pride come against me, and let not the hand of the wicked remove me.',
];

const LEV_HELDOUT = [
  'And the LORD spake unto Moses, saying,',
  'And he shall put his hand upon the head of the burnt offering; and it shall be accepted for him to make atonement for him.',
  'It is a trespass offering: he hath certainly trespassed against the LORD.',
  'And that which remaineth of the flesh and of the bread shall ye burn with fire.',
  'Speak unto the children of Israel, saying, These are the beasts which ye shall eat among all the beasts that are on the earth.',
  'The garment also that the plague of leprosy is in, whether it be a woollen garment, or a linen garment;',
  'Then the priest shall go out of the house to the door of the house, and shut up the house seven days:',
  'Thou shalt not avenge, nor bear any grudge against the children of thy people, but thou shalt love thy neighbour as thyself: I am the LORD.',
  'But he shall not defile himself, being a chief man among his people, to profane himself.',
  'On the same day it shall be eaten up; ye shall leave none of it until the morrow: I am the LORD.',
];

const DIR = 'models/kjv-target';

/** Lines [from, to] of models/kjv-heldout.txt: Psalms, and Leviticus + Numbers (Bible order). */
const PSALMS_LINES = [278, 327] as const;
const LEVNUM_LINES = [54, 96] as const;
/** Lines per half and set, and tokens per line (BOS included), to keep the CPU reference quick. */
const SPLIT_LINES = 20;
const MAX_TOKENS = 48;
/**
 * The steered layer of the split test, chosen on the measuring half alone: the layer whose
 * "ablate" (input and output) lowered G most on the verses the direction was measured on
 * (ΔG by layer 0..5: +0.004, −0.017, −0.063, −0.073, −0.079, −0.035; "add" at the norm raised G
 * at every layer: +0.23, +0.24, +0.29, +0.28, +0.22, +0.18).
 */
const SPLIT_LAYER = 4;

/** A fixed pseudo-random unit vector [H] (the control direction). */
function randomUnit(H: number): Float32Array {
  const v = Float32Array.from({ length: H }, (_, i) => (Math.sin(i * 12.9898 + 78.233) * 43758.5453) % 1);
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}

/** Mean log-probability per predicted token of each line, averaged over the lines. */
function meanLogProb(model: ReferenceRunner, lines: number[][]): number {
  const V = model.spec.vocabSize;
  let total = 0;
  for (const ids of lines) {
    const logits = model.logitsFor(ids);
    let sum = 0;
    for (let t = 0; t + 1 < ids.length; t++) {
      const row = logits.subarray(t * V, (t + 1) * V);
      let max = Number.NEGATIVE_INFINITY;
      for (const v of row) max = Math.max(max, v);
      let z = 0;
      for (const v of row) z += Math.exp(v - max);
      sum += row[ids[t + 1]!]! - max - Math.log(z);
    }
    total += sum / (ids.length - 1);
  }
  return total / lines.length;
}

describe('steering the KJV demo target (CPU reference)', () => {
  it('a Psalms − Leviticus direction moves held-out log-probs toward Psalms when added, away from both books when ablated', async () => {
    const heldout = new Set(readFileSync('models/kjv-heldout.txt', 'utf8').split('\n'));
    for (const line of [...PS_HELDOUT, ...LEV_HELDOUT]) expect(heldout.has(line)).toBe(true);
    const files = await pathModel(DIR);
    const opened = await openModel(files);
    const { spec, tokenizer } = opened;
    const model = new ReferenceRunner(spec, mapWeights(await readAllF32(opened.weights)), { capacity: 128 });
    const tok = (lines: string[]) => lines.map((l) => tokenizer.encode(l, { addSpecialTokens: true }));
    const all = Array.from({ length: spec.layers }, (_, l) => l);
    const { vectors, norms } = measureDirections(model, tok(PS_MEASURE), tok(LEV_MEASURE), all);
    const ps = tok(PS_HELDOUT);
    const lev = tok(LEV_HELDOUT);
    const gap = (plan?: SteerPlan) => {
      model.residualHook = plan && steerHook(plan);
      const g = { ps: meanLogProb(model, ps), lev: meanLogProb(model, lev) };
      model.residualHook = undefined;
      return { ...g, gap: g.ps - g.lev };
    };
    const mid = Math.floor(spec.layers / 2);
    const only = (l: number) => all.map((i) => (i === l ? vectors.get(i) : undefined));
    const random = randomUnit(spec.hidden);
    const base = gap();
    const added = gap({ mode: 'add', scale: norms.get(mid)!, inputs: false, vectors: only(mid) });
    const subtracted = gap({ mode: 'add', scale: -norms.get(mid)!, inputs: false, vectors: only(mid) });
    const ablated = gap({ mode: 'ablate', scale: 1, inputs: true, vectors: all.map((l) => vectors.get(l)) });
    const control = gap({ mode: 'ablate', scale: 1, inputs: true, vectors: all.map(() => random) });
    console.log(JSON.stringify({ mid, norm: norms.get(mid), base, added, subtracted, ablated, control }));
    // Added at the middle layer (scale: the distance between the two means there): toward Psalms.
    expect(added.gap - base.gap).toBeGreaterThan(0.2);
    // Subtracted: toward Leviticus.
    expect(subtracted.gap - base.gap).toBeLessThan(-0.1);
    // Ablated at every block's input and output: the model loses what tells the books apart, and
    // both books' held-out text gets less likely, by far more than ablating a random direction.
    for (const set of ['ps', 'lev'] as const) {
      expect(ablated[set] - base[set]).toBeLessThan(-0.02);
      expect(Math.abs(control[set] - base[set])).toBeLessThan(Math.abs(ablated[set] - base[set]) / 4);
    }
    await files.close?.();
  }, 600_000);

  it('held-out split: a Psalms − Leviticus/Numbers direction moves G toward Psalms when added and away when ablated; random directions do not', async () => {
    const text = readFileSync('models/kjv-heldout.txt', 'utf8').split('\n');
    // The line ranges are the books they claim to be (first and last verse of each range).
    expect(text[PSALMS_LINES[0]]).toMatch(/^He that sitteth in the heavens shall laugh/); // Ps 2:4
    expect(text[PSALMS_LINES[1]]).toMatch(/^Praise him upon the loud cymbals/); // Ps 150:5
    expect(text[LEVNUM_LINES[0]]).toMatch(/^And he shall put his hand upon the head of the burnt/); // Lev 1:4
    expect(text[LEVNUM_LINES[1]]).toMatch(/^And the suburbs of the cities/); // Num 35:4
    const files = await pathModel(DIR);
    const opened = await openModel(files);
    const { spec, tokenizer } = opened;
    const model = new ReferenceRunner(spec, mapWeights(await readAllF32(opened.weights)), { capacity: 128 });
    const lines = ([from, to]: readonly [number, number], half: 0 | 1) =>
      Array.from({ length: to - from + 1 }, (_, i) => from + i)
        .filter((_, i) => i % 2 === half)
        .slice(0, SPLIT_LINES)
        .map((i) => tokenizer.encode(text[i]!, { addSpecialTokens: true }).slice(0, MAX_TOKENS));
    const L = SPLIT_LAYER;
    // Measured on the first half only.
    const psM = lines(PSALMS_LINES, 0);
    const lnM = lines(LEVNUM_LINES, 0);
    const { vectors, norms } = measureDirections(model, psM, lnM, [L]);
    const r = vectors.get(L)!;
    const norm = norms.get(L)!;
    const projection = (set: number[][]) => {
      let sum = 0;
      for (const ids of set) {
        const x = lastTokenResiduals(model, ids, [L]).get(L)!;
        for (let i = 0; i < x.length; i++) sum += (x[i]! * r[i]!) / set.length;
      }
      return sum;
    };
    const proj = { ps: projection(psM), levnum: projection(lnM) };
    // Evaluated on the other half.
    const ps = lines(PSALMS_LINES, 1);
    const ln = lines(LEVNUM_LINES, 1);
    const at = (v: Float32Array) => Array.from({ length: spec.layers }, (_, l) => (l === L ? v : undefined));
    const gap = (plan?: SteerPlan) => {
      model.residualHook = plan && steerHook(plan);
      const g = { ps: meanLogProb(model, ps), levnum: meanLogProb(model, ln) };
      model.residualHook = undefined;
      return { ...g, gap: g.ps - g.levnum };
    };
    const random = randomUnit(spec.hidden);
    const base = gap();
    const shift = (plan: SteerPlan) => {
      const g = gap(plan);
      return { ps: g.ps - base.ps, levnum: g.levnum - base.levnum, gap: g.gap - base.gap };
    };
    const added = shift({ mode: 'add', scale: norm, inputs: false, vectors: at(r) });
    const ablated = shift({ mode: 'ablate', scale: 1, inputs: true, vectors: at(r) });
    const randomAdded = shift({ mode: 'add', scale: norm, inputs: false, vectors: at(random) });
    const randomAblated = shift({ mode: 'ablate', scale: 1, inputs: true, vectors: at(random) });
    console.log(JSON.stringify({ L, norm, proj, base, added, ablated, randomAdded, randomAblated }));
    // Measured here (evaluation half, layer 4, nats/token): G = −0.636 unsteered; ΔG add +0.249
    // (Psalms −0.304, Lev/Num −0.553), ablate −0.064 (Psalms −0.101, Lev/Num −0.037), random add
    // −0.007, random ablate +0.004. The thresholds below leave about half of each effect as margin.
    // Both sets project positively on r, Psalms further: what ablation removes is mostly Psalms'.
    expect(proj.levnum).toBeGreaterThan(0);
    expect(proj.ps).toBeGreaterThan(1.3 * proj.levnum);
    // Added (scale: the distance between the two means): G rises, toward Psalms.
    expect(added.gap).toBeGreaterThan(0.15);
    // Ablated: G falls, away from Psalms (Psalms text loses more log-probability).
    expect(ablated.gap).toBeLessThan(-0.03);
    expect(ablated.ps).toBeLessThan(ablated.levnum);
    // Controls: a random direction, steered the same way, barely moves G.
    expect(Math.abs(randomAdded.gap)).toBeLessThan(added.gap / 5);
    expect(Math.abs(randomAblated.gap)).toBeLessThan(Math.abs(ablated.gap) / 5);
    await files.close?.();
  }, 900_000);
});
