import { readFile } from 'node:fs/promises';
import type { Source } from './source.js';
import { emptyGpuSample, type GpuSample } from './types.js';
import { sidecarNow } from '../model/clock.js';

/**
 * Scripted GPU counters for the demo and for tests: each GPU starts from its `base` figures and
 * every timeline entry, once its time has come, overrides some of them.
 */

export type SimFigures = Partial<Omit<GpuSample, 'at' | 'index'>>;

export interface SimScenario {
  gpus: Array<{ index: number; base: SimFigures }>;
  /** Sorted or not; entries apply in time order. `gpu` omitted means every GPU. */
  timeline?: Array<{ at_s: number; gpu?: number; set: SimFigures }>;
}

export const DEFAULT_SIM_SCENARIO: SimScenario = {
  gpus: [
    {
      index: 0,
      base: {
        uuid: 'GPU-5ba1e7a2-6c1d-4c55-9e0e-3f2b1d7c9a01',
        name: 'NVIDIA A10 (simulated)',
        utilGpu: 95,
        utilMem: 40,
        memUsedMiB: 14_000,
        memTotalMiB: 23_028,
        tempC: 62,
        powerW: 138,
        powerLimitW: 150,
        smClockMHz: 1695,
        smClockMaxMHz: 1695,
        memClockMHz: 6251,
        pstate: 'P0',
        throttleReasons: 0,
      },
    },
  ],
};

export function parseScenario(text: string): SimScenario {
  const value = JSON.parse(text) as SimScenario;
  if (!Array.isArray(value.gpus) || value.gpus.length === 0) throw new Error('sim scenario: "gpus" must be a non-empty array');
  for (const gpu of value.gpus) {
    if (!Number.isInteger(gpu.index) || gpu.index < 0) throw new Error('sim scenario: every GPU needs an integer "index" >= 0');
  }
  for (const entry of value.timeline ?? []) {
    if (typeof entry.at_s !== 'number' || entry.at_s < 0) throw new Error('sim scenario: every timeline entry needs "at_s" >= 0');
  }
  return value;
}

/** The samples the scenario gives `elapsedS` seconds after its start. Pure. */
export function simulate(scenario: SimScenario, elapsedS: number, at: number): GpuSample[] {
  const timeline = (scenario.timeline ?? []).filter((entry) => entry.at_s <= elapsedS).sort((a, b) => a.at_s - b.at_s);
  return scenario.gpus.map((gpu) => {
    const sample: GpuSample = { ...emptyGpuSample(at, gpu.index), ...gpu.base };
    for (const entry of timeline) {
      if (entry.gpu === undefined || entry.gpu === gpu.index) Object.assign(sample, entry.set);
    }
    sample.at = at;
    sample.index = gpu.index;
    return sample;
  });
}

export interface SimOptions {
  scenario?: SimScenario;
  scenarioFile?: string;
  now?: () => number;
}

/** The scenario's GPUs as they are now, from its start (the first read). */
export class SimSource implements Source<GpuSample[]> {
  readonly name = 'sim';
  private scenario: { scenario: SimScenario; startedAt: number } | null = null;
  private readonly now: () => number;

  constructor(private readonly options: SimOptions = {}) {
    this.now = options.now ?? sidecarNow;
  }

  async read(): Promise<GpuSample[]> {
    this.scenario ??= {
      scenario: this.options.scenarioFile ? parseScenario(await readFile(this.options.scenarioFile, 'utf8')) : (this.options.scenario ?? DEFAULT_SIM_SCENARIO),
      startedAt: this.now(),
    };
    const at = this.now();
    return simulate(this.scenario.scenario, (at - this.scenario.startedAt) / 1000, at);
  }
}
