import type { GpuAggregate } from './gpu-aggregate.js';
import type { GpuSample } from './types.js';

/**
 * Whether a GPU's counters can tell throttling at all, and if not why, so that a verdict can say
 * "throttling could not be checked because …" instead of calling a held-down GPU compute-bound.
 */

/** What throttling is judged from: the clock-event reasons, the clock against its maximum, the power against its limit. */
export type ThrottleSignal = 'reasons' | 'max-sm-clock' | 'power-limit';

export interface ThrottleCoverage {
  known: ThrottleSignal[];
  missing: ThrottleSignal[];
  /** The reasons, or at least the clock against its maximum (a throttle of unknown cause). */
  checkable: boolean;
  /** Why the missing signals are missing, in words; null when none is. */
  because: string | null;
}

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

const NAMES: Record<ThrottleSignal, { words: string; dcgm: string; smi: string }> = {
  reasons: { words: 'the clock-event (throttle) reasons', dcgm: 'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS', smi: 'clocks_event_reasons.active' },
  'max-sm-clock': { words: 'the maximum SM clock', dcgm: 'DCGM_FI_DEV_MAX_SM_CLOCK', smi: 'clocks.max.sm' },
  'power-limit': { words: 'the power limit', dcgm: 'DCGM_FI_DEV_POWER_MGMT_LIMIT', smi: 'power.limit' },
};

const listed = (items: string[]) => (items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`);

/** Why `missing` are missing, for the GPU source the sidecar runs (its `gpu_source`). */
function because(missing: ThrottleSignal[], source: string): string {
  const what = listed(missing.map((signal) => NAMES[signal].words));
  switch (source) {
    case 'dcgm':
      return `the DCGM exporter does not export ${listed(missing.map((s) => NAMES[s].dcgm))}: its default counters leave them out, deploy/kubernetes/dcgm-exporter-counters.yaml adds them`;
    case 'nvidia-smi':
      return `nvidia-smi reports ${listed(missing.map((s) => NAMES[s].smi))} as not available for this GPU`;
    case 'hook':
      return `the hook's NVML readings lack ${what} (is pynvml installed where the job runs?)`;
    case 'none':
      return 'GPU counters are turned off (--gpu-source none)';
    default:
      return `the ${source} GPU counters lack ${what}`;
  }
}

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

export function throttleCoverage(counts: SignalCounts, source: string): ThrottleCoverage {
  if (counts.samples === 0) {
    return { known: [], missing: ['reasons', 'max-sm-clock', 'power-limit'], checkable: false, because: source === 'none' ? because([], source) : 'no GPU counters were read for this GPU' };
  }
  const present: Record<ThrottleSignal, boolean> = {
    reasons: counts.reasonSamples > 0,
    'max-sm-clock': counts.smClockMaxMHz !== null,
    'power-limit': counts.powerLimitW !== null,
  };
  const all = Object.keys(present) as ThrottleSignal[];
  const missing = all.filter((signal) => !present[signal]);
  return {
    known: all.filter((signal) => present[signal]),
    missing,
    checkable: present.reasons || present['max-sm-clock'],
    because: missing.length > 0 ? because(missing, source) : null,
  };
}
