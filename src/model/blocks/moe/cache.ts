// A mixture layer's GPU cache of experts (paged mode: see Placer.experts): which expert each slot
// holds, least recently used first out, and how one pass's chosen experts are brought in. A pass
// whose rows chose more experts than the cache has slots runs its groups in waves of at most that
// many, each wave's misses loaded before it. Counts hits, misses and the bytes loaded.
import { type RouteShape, routeTableLayout } from '../../../kernels/moe/table.js';

/** One group of a pass's routing table: an expert and its members [first, first + count). */
export interface RouteGroup {
  readonly expert: number;
  readonly first: number;
  readonly count: number;
}

/** One wave of a paged pass: the experts to load (expert, slot) and its groups by slot. */
export interface ExpertWave {
  readonly loads: readonly (readonly [number, number])[];
  readonly groups: readonly RouteGroup[];
}

/** The groups of a routing table's words (kernels/moe/table.ts). */
export function routeGroups(words: Uint32Array): RouteGroup[] {
  return Array.from({ length: words[0]! }, (_, g) => ({
    expert: words[4 + 4 * g]!,
    first: words[5 + 4 * g]!,
    count: words[6 + 4 * g]!,
  }));
}

/** Running totals of an expert cache. */
export interface CacheCounts {
  /** Chosen experts found in their slot. */
  readonly hits: number;
  /** Chosen experts loaded into a slot. */
  readonly misses: number;
  /** Bytes loaded. */
  readonly bytesLoaded: number;
}

/** The slots of one mixture layer's GPU cache of experts, least recently used out first. */
export class ExpertCache {
  /** The expert in each slot (-1: empty). */
  private readonly holds: Int32Array;
  /** The pass that last used each slot. */
  private readonly used: Float64Array;
  private readonly slotOf = new Map<number, number>();
  private clock = 0;
  private counts = { hits: 0, misses: 0, bytesLoaded: 0 };

  constructor(
    readonly slots: number,
    /** Bytes one expert loads (every stack). */
    private readonly expertBytes: number,
  ) {
    this.holds = new Int32Array(slots).fill(-1);
    this.used = new Float64Array(slots).fill(-1);
  }

  get totals(): CacheCounts {
    return { ...this.counts };
  }

  /**
   * The waves that run a pass's groups: the experts already held first, then the others, at most
   * `slots` per wave; each wave loads its missing experts into the slots it does not use, empty or
   * least recently used first. Marks what it plans as done (the caller loads and runs it).
   */
  plan(groups: readonly RouteGroup[]): ExpertWave[] {
    this.clock++;
    const held = groups.filter((g) => this.slotOf.has(g.expert));
    const order = [...held, ...groups.filter((g) => !this.slotOf.has(g.expert))];
    const waves: ExpertWave[] = [];
    for (let at = 0; at < order.length; at += this.slots) {
      const wave = order.slice(at, at + this.slots);
      const mine = new Set(
        wave.flatMap((g) => (this.slotOf.has(g.expert) ? [this.slotOf.get(g.expert)!] : [])),
      );
      const loads: [number, number][] = [];
      const bySlot = wave.map((g): RouteGroup => {
        let slot = this.slotOf.get(g.expert);
        if (slot === undefined) {
          slot = this.victim(mine);
          const old = this.holds[slot]!;
          if (old >= 0) this.slotOf.delete(old);
          this.holds[slot] = g.expert;
          this.slotOf.set(g.expert, slot);
          loads.push([g.expert, slot]);
          this.counts.misses++;
          this.counts.bytesLoaded += this.expertBytes;
        } else this.counts.hits++;
        mine.add(slot);
        this.used[slot] = this.clock;
        return { expert: slot, first: g.first, count: g.count };
      });
      waves.push({ loads, groups: bySlot });
    }
    return waves;
  }

  /** The slot to load into: an empty one, else the least recently used one outside `taken`. */
  private victim(taken: ReadonlySet<number>): number {
    let best = -1;
    for (let s = 0; s < this.slots; s++) {
      if (taken.has(s)) continue;
      if (this.holds[s]! < 0) return s;
      if (best < 0 || this.used[s]! < this.used[best]!) best = s;
    }
    if (best < 0) throw new Error('ExpertCache: a wave holds more experts than the cache has slots');
    return best;
  }
}

/**
 * The routing table a wave's expert matmuls read, laid out for the cache (`pool`: `slots` experts):
 * the wave's groups by slot, and the pass's members and positions copied from the route kernel's
 * table `words` (laid out for `shape`).
 */
export function waveTable(
  words: Uint32Array,
  shape: RouteShape,
  pool: RouteShape,
  wave: ExpertWave,
): Uint32Array {
  const from = routeTableLayout(shape);
  const to = routeTableLayout(pool);
  const out = new Uint32Array(to.words);
  out[0] = wave.groups.length;
  for (const [i, g] of wave.groups.entries()) out.set([g.expert, g.first, g.count, 0], 4 + 4 * i);
  const n = shape.maxRows * shape.topK;
  out.set(words.subarray(from.members, from.members + n), to.members);
  out.set(words.subarray(from.positions, from.positions + n), to.positions);
  return out;
}
