import type { GpuAggregate } from './gpu-aggregate.js';
import type { GpuSample } from './types.js';

/**
 * Whether a GPU's counters can tell throttling at all, and if not why, so that a verdict can say
 * "throttling could not be checked because …" instead of calling a held-down GPU compute-bound.
 */

/** What throttling is judged from: the clock-event reasons, the clock against its maximum, the power against its limit. */
export type ThrottleSignal = 'reasons' | 'max-sm-clock' | 'power-limit';

/** How often each signal was there: a GpuAggregate has exactly these, `signalsOf` makes them from samples. */
export type SignalCounts = Pick<GpuAggregate, 'samples' | 'reasonSamples' | 'smClockMaxMHz' | 'powerLimitW'>;

export function signalsOf(samples: readonly GpuSample[]): SignalCounts {
  const last = <T>(pick: (s: GpuSample) => T | null): T | null => samples.map(pick).findLast((value) => value !== null) ?? null;
  return {
    samples: samples.length,
    reasonSamples: samples.filter((s) => s.throttleReasons !== null).length,
    smClockMaxMHz: last((s) => s.smClockMaxMHz),
    powerLimitW: last((s) => s.powerLimitW),
  };
}

const NAMES: Record<ThrottleSignal, { words: string }> = {
  reasons: { words: 'the clock-event (throttle) reasons' },
  'max-sm-clock': { words: 'the maximum SM clock' },
  'power-limit': { words: 'the power limit' },
};

const listed = (items: string[]) => (items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`);

/** Where a throttle signal the GPU source lacked was taken from instead. */
export type FillSource = 'nvidia-smi' | 'hook';
export type FilledFrom = Partial<Record<ThrottleSignal, FillSource>>;

const FILL_WORDS: Record<FillSource, string> = { 'nvidia-smi': "the sidecar's nvidia-smi", hook: "the hooks' NVML readings" };

/** "the clock-event (throttle) reasons and the maximum SM clock from the sidecar's nvidia-smi", for samples filled so; null where none was. */
export function filledText(filled: readonly FilledFrom[]): string | null {
  const bySource = new Map<FillSource, Set<ThrottleSignal>>();
  for (const one of filled) {
    for (const [signal, source] of Object.entries(one) as [ThrottleSignal, FillSource][]) {
      if (!bySource.has(source)) bySource.set(source, new Set());
      bySource.get(source)!.add(signal);
    }
  }
  if (bySource.size === 0) return null;
  const order = Object.keys(NAMES) as ThrottleSignal[];
  return [...bySource]
    .map(([source, signals]) => `${listed(order.filter((s) => signals.has(s)).map((s) => NAMES[s].words))} from ${FILL_WORDS[source]}`)
    .join('; ');
}

/**
 * Why throttling cannot be judged from these counters, or null where it can: from the clock-event
 * reasons, or at least the clock against its maximum (a throttle of unknown cause). The one rule
 * every window's `throttle_unchecked` is made by.
 */
export function throttleUnchecked(counts: SignalCounts): string | null {
  if (counts.samples === 0) return 'no GPU counters were read for this GPU';
  if (counts.reasonSamples > 0 || counts.smClockMaxMHz !== null) return null;
  return "the GPU counters carry neither clock-event (throttle) reasons nor the maximum SM clock (add them to the DCGM exporter's counters: deploy/kubernetes)";
}
