// A profiled forward (GpuRunner.profiler): its passes per section, and their times per section.
import { PROFILE_SECTIONS, type ProfileSection } from '../blocks/gpu.js';

export { PROFILE_SECTIONS, type ProfileSection };

/** Timed passes of one profiled forward of a model with `layers` layers. */
export function profilePasses(layers: number): number {
  return 3 + 5 * layers;
}

/** One section's GPU time, summed over its passes (every layer's for a layer section). */
export interface SectionTime {
  section: ProfileSection;
  ns: number;
  /** Its share of all sections' time. */
  share: number;
}

/** The profiler's passes (as {@link GpuTimer.read} returns them) summed per section, in run order. */
export function profileSections(passes: readonly { label: string; ns: number }[]): SectionTime[] {
  const ns = new Map<string, number>();
  for (const p of passes) ns.set(p.label, (ns.get(p.label) ?? 0) + p.ns);
  const total = [...ns.values()].reduce((a, b) => a + b, 0);
  return PROFILE_SECTIONS.filter((s) => ns.has(s)).map((section) => ({
    section,
    ns: ns.get(section)!,
    share: total > 0 ? ns.get(section)! / total : 0,
  }));
}
