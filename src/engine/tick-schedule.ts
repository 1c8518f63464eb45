/**
 * When the engine ticks: every `idleMs` (250 ms) as it always has; while a viewer is connected, also
 * `watchedMs` (50 ms) after the last tick where something new came in, so a step reaches a person
 * within about one short tick. Nothing new, no extra tick: a viewer of an idle sidecar costs what it
 * did. While `quiet` (no job is live, so only an entry can change anything) it does not look at all
 * until something comes in (`entered`): an idle sidecar wakes for nothing but its readings (issue
 * 24, target 8: four looks a second of code too cold to be compiled cost it 0.3-0.5 ms each on a
 * shared host); and, unless a viewer watches or a reader asked (`soon`), what came in waits for a
 * tick until `quietMs` after the last: the idle sidecar's readings (the host's, the GPUs', each every
 * 5 s at its own time) make one tick, not one each. The timers are injected: tests drive them.
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
  /** Quiet with nothing new: no look is armed until something comes in. */
  private asleep = false;
  /** Quiet with something new: the one look armed is quietMs after the last tick. */
  private holding = false;

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

  private get quietMs(): number {
    return this.intervals.quietMs ?? this.intervals.idleMs;
  }

  /** Whether a viewer is connected: the next look comes sooner at once where it would come later than a short tick. */
  watched(watching: boolean): void {
    if (watching === this.watching) return;
    this.watching = watching;
    this.arm();
  }

  /** A reader waits for the state to catch up with what came in: the next look ticks, quiet or not (while quiet, a look now). */
  soon(): void {
    this.asked = true;
    if (this.holding || this.quiet()) this.lookNow();
  }

  /**
   * Something came in (each entry the engine applies): a schedule asleep looks now, and so does one
   * holding what came in while quiet once a job is live (a hello within the hold: its first tick at
   * once, not when the hold ends).
   */
  entered(): void {
    if (this.asleep || (this.holding && !this.quiet())) this.lookNow();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    this.timer = null;
  }

  private lookNow(): void {
    this.arm(this.timers.now() - this.everyMs);
  }

  private arm(from = this.lastAt): void {
    this.asleep = false;
    this.holding = false;
    if (this.stopped) return;
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    const wait = Math.max(0, from + this.everyMs - this.timers.now());
    this.timer = this.timers.setTimeout(() => this.fire(), wait);
  }

  private fire(): void {
    this.timer = null;
    const now = this.timers.now();
    const changed = this.changed();
    const quiet = this.quiet();
    if (quiet && !changed) {
      // Nothing new, and time alone changes nothing: no look until something comes in.
      this.asleep = true;
      return;
    }
    if (now - this.lastAt < this.intervals.idleMs && !changed) {
      // A short look found nothing new: the next look a short tick on, the next tick when due.
      this.arm(Math.min(now, this.lastAt + this.intervals.idleMs - this.everyMs));
      return;
    }
    if (quiet && this.holdsQuiet(now)) {
      // Something new, but not yet: it waits for quietMs after the last tick (or a viewer, or a reader).
      this.arm(this.lastAt + this.quietMs - this.everyMs);
      this.holding = true;
      return;
    }
    this.asked = false;
    this.lastAt = now;
    this.tick();
    this.arm();
  }

  /** While quiet, what came in waits for quietMs after the last tick, unless someone watches or asked. */
  private holdsQuiet(now: number): boolean {
    return !this.watching && !this.asked && now - this.lastAt < this.quietMs;
  }
}
