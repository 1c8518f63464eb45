/**
 * When the engine ticks: every `idleMs` (250 ms) as it always has; while a viewer is connected, also
 * `watchedMs` (50 ms) after the last tick where something new came in, so a step reaches a person
 * within about one short tick. Nothing new, no extra tick: a viewer of an idle sidecar costs what it
 * did. While `quiet` (no job is live, so only an entry can change anything) a tick that nothing came
 * in for is skipped: an idle sidecar journals and publishes nothing 4 times a second (issue 24,
 * target 8); and, unless a viewer watches or a reader asked (`soon`), what came in waits for a tick
 * until `quietMs` after the last: the idle sidecar's readings (the host's, the GPUs', each every 5 s
 * at its own time) make one tick, not one each. The timers are injected: tests drive them.
 */
export interface Timers {
  setTimeout(run: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
}

export const REAL_TIMERS: Timers = {
  setTimeout: (run, ms) => setTimeout(run, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
  now: () => Date.now(),
};

/** The tick while a viewer watches: a step shows within about this (issue 24: p99 ≤ 100 ms). */
export const WATCHED_TICK_MS = 50;

export interface TickIntervals {
  idleMs: number;
  watchedMs: number;
  /** While quiet and unwatched, ticks at least this far apart (absent: idleMs). */
  quietMs?: number;
}

export class TickSchedule {
  private timer: unknown = null;
  private lastAt: number;
  private watching = false;
  private stopped = false;
  /** A reader waits for the next tick (soon): it comes at the next look that finds something new. */
  private asked = false;

  constructor(
    private readonly tick: () => void,
    /** Whether anything came in since the last tick. */
    private readonly changed: () => boolean,
    private readonly intervals: TickIntervals,
    private readonly timers: Timers = REAL_TIMERS,
    /** Whether time alone changes nothing: no job is live. */
    private readonly quiet: () => boolean = () => false,
  ) {
    this.lastAt = timers.now();
    this.arm();
  }

  private get everyMs(): number {
    return this.watching ? Math.min(this.intervals.watchedMs, this.intervals.idleMs) : this.intervals.idleMs;
  }

  /** Whether a viewer is connected: the next look comes sooner at once where it would come later than a short tick. */
  watched(watching: boolean): void {
    if (watching === this.watching) return;
    this.watching = watching;
    this.arm();
  }

  /** A reader waits for the state to catch up with what came in: the next look ticks, quiet or not. */
  soon(): void {
    this.asked = true;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    this.timer = null;
  }

  private arm(from = this.lastAt): void {
    if (this.stopped) return;
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    const wait = Math.max(0, from + this.everyMs - this.timers.now());
    this.timer = this.timers.setTimeout(() => this.fire(), wait);
  }

  private fire(): void {
    this.timer = null;
    const now = this.timers.now();
    const changed = this.changed();
    if (now - this.lastAt < this.intervals.idleMs && !changed) {
      // A short look found nothing new: the next look a short tick on, the next tick when due.
      this.arm(Math.min(now, this.lastAt + this.intervals.idleMs - this.everyMs));
      return;
    }
    if (this.quiet() && (!changed || this.holdsQuiet(now))) {
      // Due, but a tick would change nothing, or not yet: look again, and tick at the first look that may.
      this.arm(now);
      return;
    }
    this.asked = false;
    this.lastAt = now;
    this.tick();
    this.arm();
  }

  /** While quiet, what came in waits for quietMs after the last tick, unless someone watches or asked. */
  private holdsQuiet(now: number): boolean {
    return !this.watching && !this.asked && now - this.lastAt < (this.intervals.quietMs ?? this.intervals.idleMs);
  }
}
