// Activation steering on the bundled demo target (models/kjv-target), through the CPU reference in
// Node. A direction is measured between verses of two books, Psalms (positive) and Leviticus
// (negative), then applied while scoring held-out verses of each book (lines of
// models/kjv-heldout.txt, not seen in training and not used for measuring).
//
// Metric: the mean log-probability per token of a set of lines (each line scored from BOS), and
// the gap G = mean logp(Psalms lines) − mean logp(Leviticus lines). Adding the direction at the
// middle layer must raise G (toward Psalms) and adding its negative must lower G (toward
// Leviticus). Ablating it at every layer must make both books' held-out text less likely (the
// model loses what tells them apart), by over 4x what ablating a random direction does.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type SteerPlan, steerHook } from '../../src/kernels/steer/steer.js';
import { openModel } from '../../src/model/load.js';
import { dirModelFiles } from '../../src/model/node-files.js';
import { ReferenceModel } from '../../src/model/reference.js';
import { readAllF32 } from '../../src/model/reference-runner.js';
import { mapWeights } from '../../src/model/weights.js';
import { measureDirections } from '../../src/steer/measure.js';

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

/** A fixed pseudo-random unit vector [H] (the control direction). */
function randomUnit(H: number): Float32Array {
  const v = Float32Array.from({ length: H }, (_, i) => (Math.sin(i * 12.9898 + 78.233) * 43758.5453) % 1);
  const n = Math.hypot(...v);
  return v.map((x) => x / n);
}

/** Mean log-probability per predicted token of each line, averaged over the lines. */
function meanLogProb(model: ReferenceModel, lines: number[][]): number {
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
    const files = dirModelFiles(DIR);
    const opened = await openModel(files);
    const { spec, tokenizer } = opened;
    const model = new ReferenceModel(spec, mapWeights(await readAllF32(opened.weights)), { capacity: 128 });
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
});
