import { afterEach, describe, expect, it, vi } from 'vitest';
import { hostClockStepMs, sidecarNow, steadyClock } from '../src/model/clock.js';
import { REAL_TIMERS } from '../src/engine/tick-schedule.js';

describe("the sidecar's clock", () => {
  afterEach(() => vi.useRealTimers());

  it('starts at the wall clock and goes on by the monotonic one alone, through steps of the wall clock either way', () => {
    let wall = 1_800_000_000_000;
    let monotonic = 5_000.25;
    const now = steadyClock(() => wall, () => monotonic);
    expect(now()).toBe(1_800_000_000_000);
    monotonic += 1_000.5;
    wall += 1_000;
    expect(now()).toBe(1_800_000_001_000);
    wall -= 3_600_000; // a step back of an hour
    monotonic += 10;
    expect(now()).toBe(1_800_000_001_010);
    wall += 7_200_000; // and one forward of two
    monotonic += 10;
    expect(now()).toBe(1_800_000_001_020);
  });

  it('never goes back between readings, a fraction of a millisecond apart or not', () => {
    let monotonic = 0.9;
    const now = steadyClock(() => 1_000, () => monotonic);
    const seen: number[] = [];
    for (let i = 0; i < 50; i++) {
      seen.push(now());
      monotonic += 0.37;
    }
    expect(seen).toEqual([...seen].sort((a, b) => a - b));
    expect(seen.every(Number.isInteger)).toBe(true);
  });

  it("tells a step of the host's clock from drift and rounding: a second or more", () => {
    expect(hostClockStepMs(() => 1_000_999, () => 1_000_000)).toBe(0);
    expect(hostClockStepMs(() => 999_001, () => 1_000_000)).toBe(0);
    expect(hostClockStepMs(() => 1_001_000, () => 1_000_000)).toBe(1_000);
    expect(hostClockStepMs(() => 1_000_000 - 3_600_000, () => 1_000_000)).toBe(-3_600_000);
  });

  it('is what the sidecar runs on, and does not follow Date when the wall clock steps', () => {
    expect(REAL_TIMERS.now).toBe(sidecarNow);
    expect(REAL_TIMERS.hostStepMs).toBe(hostClockStepMs);
    const before = sidecarNow();
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(before - 3_600_000);
    expect(Date.now()).toBeLessThan(before - 3_000_000);
    expect(sidecarNow()).toBeGreaterThanOrEqual(before);
    expect(sidecarNow()).toBeLessThan(before + 60_000);
    expect(hostClockStepMs()).toBeLessThan(-3_000_000);
  });
});
