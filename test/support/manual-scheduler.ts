import type { Scheduler } from '../../src/sidecar.js';

/** A scheduler on a clock the test moves: nothing runs until the test advances it. */
export interface ManualScheduler extends Scheduler {
  /** Moves the clock `ms` on, running each timer due on the way at its due time, in order. */
  advance(ms: number): void;
  /** Moves the clock to `at` without running any timer (what a test that ticks by hand wants). */
  setTime(at: number): void;
  /** Timers armed and not yet run. */
  readonly pending: number;
}

export function manualScheduler(start = 0): ManualScheduler {
  let now = start;
  let next = 1;
  const timers = new Map<number, { at: number; run: () => void }>();
  return {
    setTimeout: (run, ms) => (timers.set(next, { at: now + ms, run }), next++),
    clearTimeout: (handle) => void timers.delete(handle as number),
    now: () => now,
    setTime: (at) => void (now = at),
    get pending() {
      return timers.size;
    },
    advance(ms) {
      const until = now + ms;
      for (;;) {
        const due = [...timers.entries()].filter(([, timer]) => timer.at <= until).sort((a, b) => a[1].at - b[1].at || a[0] - b[0])[0];
        if (!due) break;
        timers.delete(due[0]);
        now = Math.max(now, due[1].at);
        due[1].run();
      }
      now = until;
    },
  };
}
