import { describe, expect, it } from 'vitest';
import { parseScenario, simulate } from '../src/counters/sim.js';

describe('simulated GPU counters', () => {
  const scenario = parseScenario(
    JSON.stringify({
      gpus: [
        { index: 0, base: { uuid: 'GPU-a', smClockMHz: 1980, smClockMaxMHz: 1980, throttleReasons: 0 } },
        { index: 1, base: { uuid: 'GPU-b', smClockMHz: 1980, smClockMaxMHz: 1980, throttleReasons: 0 } },
      ],
      timeline: [
        { at_s: 3, gpu: 0, set: { smClockMHz: 1980, throttleReasons: 0 } },
        { at_s: 1, gpu: 0, set: { smClockMHz: 1100, throttleReasons: 0x40 } },
        { at_s: 2, set: { tempC: 90 } },
      ],
    }),
  );

  it('applies the timeline entries whose time has come, in time order, to the GPUs they name', () => {
    expect(simulate(scenario, 0.5, 1)[0]).toMatchObject({ smClockMHz: 1980, throttleReasons: 0, tempC: null, at: 1 });
    expect(simulate(scenario, 1.5, 2)[0]).toMatchObject({ smClockMHz: 1100, throttleReasons: 0x40 });
    expect(simulate(scenario, 1.5, 2)[1]).toMatchObject({ smClockMHz: 1980, throttleReasons: 0 });
    expect(simulate(scenario, 2.5, 3).map((s) => s.tempC)).toEqual([90, 90]);
    expect(simulate(scenario, 3.5, 4)[0]).toMatchObject({ smClockMHz: 1980, throttleReasons: 0 });
  });

  it('refuses a scenario without GPUs', () => {
    expect(() => parseScenario('{"gpus": []}')).toThrow(/non-empty array/);
  });
});
