import type { SimFigures, SimScenario } from '../counters/sim.js';

/**
 * The demo's story on one clock: a two-rank job that is healthy (compute-bound), then slowed by
 * online augmentation in the training process (input-bound), then by one GPU overheating (throttled).
 * Both the simulated GPU counters and the Python loop's phase times are drawn from it, so they change
 * at the same moments. Pure.
 */

export type Regime = 'compute-bound' | 'input-bound' | 'throttled';
export const REGIMES: readonly Regime[] = ['compute-bound', 'input-bound', 'throttled'];

/** Milliseconds a step spends in each phase while a regime lasts. */
export interface PhaseTimes {
  data_ms: number;
  h2d_ms: number;
  compute_ms: number;
  other_ms: number;
}

/** What demo/train.py follows: each entry holds until `until_s` after t0. */
export interface ScheduleEntry extends PhaseTimes {
  regime: Regime;
  until_s: number;
}

export interface Story {
  ranks: number;
  seconds: number;
  /** The rank whose GPU overheats. */
  hotRank: number;
  scenario: SimScenario;
  schedule(rank: number): ScheduleEntry[];
}

const MAX_CLOCK_MHZ = 1695;
const THROTTLED_CLOCK_MHZ = 1065;
const HW_THERMAL_SLOWDOWN = 0x40;

const BASE: SimFigures = {
  name: 'NVIDIA A10 (simulated)',
  utilGpu: 92,
  utilMem: 38,
  memUsedMiB: 17_312,
  memTotalMiB: 23_028,
  tempC: 64,
  powerW: 132,
  powerLimitW: 150,
  smClockMHz: MAX_CLOCK_MHZ,
  smClockMaxMHz: MAX_CLOCK_MHZ,
  memClockMHz: 6251,
  pstate: 'P0',
  throttleReasons: 0,
};

const HEALTHY: PhaseTimes = { data_ms: 0.5, h2d_ms: 0.4, compute_ms: 12, other_ms: 0.6 };
/** Augmentation in the loop's own process (num_workers=0): the GPU waits about 40% of each step. */
const AUGMENTED: PhaseTimes = { ...HEALTHY, data_ms: 9 };
/** The same kernels at 1065 of 1695 MHz take 1695/1065 as long. */
const HOT: PhaseTimes = { ...HEALTHY, compute_ms: Math.round(HEALTHY.compute_ms * (MAX_CLOCK_MHZ / THROTTLED_CLOCK_MHZ) * 10) / 10 };

export function demoStory(regimeS: number, ranks = 2): Story {
  const hotRank = ranks - 1;
  const at = (regime: Regime) => REGIMES.indexOf(regime) * regimeS;
  const gpus = Array.from({ length: ranks }, (_, index) => ({
    index,
    base: { ...BASE, uuid: `GPU-5ba1e7a2-6c1d-4c55-9e0e-3f2b1d7c9a0${index}` },
  }));
  const timeline: NonNullable<SimScenario['timeline']> = [
    { at_s: at('input-bound'), set: { utilGpu: 58, utilMem: 24, powerW: 96, tempC: 58 } },
    { at_s: at('throttled'), set: { utilGpu: 93, utilMem: 38, powerW: 131, tempC: 65 } },
    {
      at_s: at('throttled'),
      gpu: hotRank,
      set: { utilGpu: 97, tempC: 90, powerW: 118, smClockMHz: THROTTLED_CLOCK_MHZ, throttleReasons: HW_THERMAL_SLOWDOWN },
    },
  ];
  const times: Record<Regime, (rank: number) => PhaseTimes> = {
    'compute-bound': () => HEALTHY,
    'input-bound': () => AUGMENTED,
    throttled: (rank) => (rank === hotRank ? HOT : HEALTHY),
  };
  return {
    ranks,
    seconds: REGIMES.length * regimeS,
    hotRank,
    scenario: { gpus, timeline },
    schedule: (rank) => REGIMES.map((regime) => ({ regime, until_s: at(regime) + regimeS, ...times[regime](rank) })),
  };
}
