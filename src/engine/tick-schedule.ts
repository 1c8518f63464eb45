import type { EntryType } from './entries.js';
import { hostClockStepMs, sidecarNow } from '../model/clock.js';

/**
 * When the engine ticks: every `idleMs` (250 ms), or `unwatchedMs` (500 ms) apart while no viewer
 * watches a live job (a reader of the state still gets its tick 250 ms after the last at most);
 * while a viewer is connected, also as soon as something new comes in (`entered`): once every rank
 * that sent before the last tick has sent again (`awaited`), or `GATHER_MS` after the first of them,
 * so that frames sent together make one tick (the hooks' sends while watched fall on the same beats
 * of the clock), and at least
 * `watchedMs` (50 ms) after the last tick, so that a step reaches a person in a few milliseconds
 * beyond its hook's batching (issue 24, target 6: p99 ≤ 100 ms from the step's end in the training
 * process). Nothing new, no extra tick or look: a viewer of an idle sidecar costs what it did. While
 * `quiet` (no job is live, so only an entry can change anything) it does not look at all until
 * something comes in: an idle sidecar wakes for nothing but its readings (issue 24, target 8: four
 * looks a second of code too cold to be compiled cost it 0.3-0.5 ms each on a shared host); and,
 * unless a viewer watches or a reader asked (`soon`), what came in waits for a tick until `quietMs`
 * after the last: the idle sidecar's readings (the host's, the GPUs', each every 5 s at its own time)
 * make one tick, not one each. The timers are injected: tests drive them.
 */
export interface Timers {
  setTimeout(run: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  now(): number;
  /** How far the host's wall clock has stepped under `now` (ms; absent: a clock that cannot step, as a test's). */
  hostStepMs?(): number;
}

export const REAL_TIMERS: Timers = {
  setTimeout: (run, ms) => setTimeout(run, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
  now: sidecarNow,
  hostStepMs: hostClockStepMs,
};

/**
 * While a job is live and no viewer watches, ticks this far apart: the hooks then send every 0.5 s
 * (docs/protocol.md), so a tick every 250 ms judged each frame twice, and the ticks were 45% of the
 * main thread's busy time beside 8 ranks at 100 steps/s (BENCHMARKS.md, "What a live job costs the
 * sidecar"). A reader of the state is still answered 250 ms after the last tick at most (`soon`).
 */
export const UNWATCHED_TICK_MS = 500;
/** The least time between two ticks while a viewer watches (the stream's 20 frames a second). */
export const WATCHED_TICK_MS = 50;
/** While watched, the most that what came in waits for the other ranks' frames of the same send to share its tick. */
export const GATHER_MS = 20;
/** A rank that sent steps this long before the last tick, and nothing since, has its next frame on the way (while watched, the hooks send every 80 ms). */
export const AWAITED_WITHIN_MS = 150;
/**
 * What a hook sends that a person sees change at once: ticked on arrival while watched. The rest (the
 * host's and GPUs' readings, a hook's counters and heartbeats) waits for the next tick, and does not
 * push the steps behind it 50 ms back.
 */
export const SHOWN_AT_ONCE: ReadonlySet<EntryType> = new Set<EntryType>(['steps', 'hello', 'connect', 'disconnect', 'end', 'stack', 'reference']);

export interface TickIntervals {
  idleMs: number;
  watchedMs: number;
  /** While a job is live and no viewer watches, ticks this far apart (absent: idleMs); a reader still gets one idleMs after the last. */
  unwatchedMs?: number;
  /** While quiet and unwatched, ticks at least this far apart (absent: idleMs). */
  quietMs?: number;
}

export class TickSchedule {
  private timer: unknown = null;
  /** When the armed look comes (infinite while none is armed). */
  private dueAt = Number.POSITIVE_INFINITY;
  private lastAt: number;
  private watching = false;
  private stopped = false;
  /** A reader waits for the next tick (soon): it comes at the next look that finds something new. */
  private asked = false;
  /** Quiet with nothing new: no look is armed until something comes in. */
  private asleep = false;
  /** Quiet with something new: the one look armed is quietMs after the last tick. */
  private holding = false;
  /** While watched, when the first thing shown at once came in since the last tick. */
  private firstAt: number | null = null;

  constructor(
    private readonly tick: () => void,
    /** Whether anything came in since the last tick. */
    private readonly changed: () => boolean,
    private readonly intervals: TickIntervals,
    private readonly timers: Timers = REAL_TIMERS,
    /** Whether time alone changes nothing: no job is live. */
    private readonly quiet: () => boolean = () => false,
    /** Whether a rank that sent steps before `since` (the last tick) has yet to send again: its frame is on the way. */
    private readonly awaited: (since: number) => boolean = () => false,
  ) {
    this.lastAt = timers.now();
    this.arm();
  }

  private get quietMs(): number {
    return this.intervals.quietMs ?? this.intervals.idleMs;
  }

  /** The time between two ticks when nothing asks for one sooner. */
  private get regularMs(): number {
    return this.watching ? this.intervals.idleMs : (this.intervals.unwatchedMs ?? this.intervals.idleMs);
  }

  /** Whether a viewer is connected: what came in before the first one is shown as what comes in after it. */
  watched(watching: boolean): void {
    if (watching === this.watching) return;
    this.watching = watching;
    this.firstAt = null;
    if (this.asleep) return;
    this.arm();
    if (watching && this.changed()) this.entered();
    // The last viewer left while a reader waits: its tick stays idleMs after the last, not unwatchedMs.
    else if (this.asked) this.readerTick();
  }

  /** A reader waits for the state to catch up with what came in: the next look ticks, quiet or not (while quiet, a look now). */
  soon(): void {
    this.asked = true;
    if (this.holding || this.quiet()) this.lookNow();
    else if (this.watching) this.early();
    else this.readerTick();
  }

  /** Unwatched, the ticks are unwatchedMs apart: a reader's comes idleMs after the last at most. */
  private readerTick(): void {
    if (this.lastAt + this.intervals.idleMs < this.dueAt) this.armAt(this.lastAt + this.intervals.idleMs);
  }

  /**
   * Something came in (each entry the engine applies): a schedule asleep looks now, and so does one
   * holding what came in while quiet once a job is live (a hello within the hold: its first tick at
   * once, not when the hold ends); while watched, what a person sees change at once (`shown`) is
   * ticked early.
   */
  entered(shown = true): void {
    if (this.asleep || (this.holding && !this.quiet())) this.lookNow();
    else if (shown && this.watching && !this.holding) this.early();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    this.timer = null;
  }

  /** While watched: a tick once no rank's frame is on the way (GATHER_MS after the first at most), and watchedMs after the last at least. */
  private early(): void {
    const now = this.timers.now();
    this.firstAt ??= now;
    const soonest = this.lastAt + this.intervals.watchedMs;
    // Already due as soon as it may be: the ranks are not scanned again for each frame that comes.
    if (this.dueAt <= soonest) return;
    const at = Math.max(soonest, this.awaited(this.lastAt) ? this.firstAt + GATHER_MS : now);
    if (at < this.dueAt) this.armAt(at);
  }

  private lookNow(): void {
    this.armAt(this.timers.now());
  }

  /** The next look at the next tick due. */
  private arm(): void {
    this.armAt(this.lastAt + this.regularMs);
  }

  private armAt(at: number): void {
    this.asleep = false;
    this.holding = false;
    if (this.stopped) return;
    if (this.timer !== null) this.timers.clearTimeout(this.timer);
    const now = this.timers.now();
    this.dueAt = Math.max(at, now);
    this.timer = this.timers.setTimeout(() => this.fire(), this.dueAt - now);
  }

  private fire(): void {
    this.timer = null;
    this.dueAt = Number.POSITIVE_INFINITY;
    const now = this.timers.now();
    const changed = this.changed();
    const quiet = this.quiet();
    if (quiet && !changed) {
      // Nothing new, and time alone changes nothing: no look until something comes in.
      this.asleep = true;
      return;
    }
    if (now - this.lastAt < this.regularMs && !changed) {
      // An early look found nothing new: the next tick when due.
      this.arm();
      return;
    }
    if (quiet && this.holdsQuiet(now)) {
      // Something new, but not yet: it waits for quietMs after the last tick (or a viewer, or a reader).
      this.armAt(this.lastAt + this.quietMs);
      this.holding = true;
      return;
    }
    this.asked = false;
    this.firstAt = null;
    this.lastAt = now;
    this.tick();
    this.arm();
  }

  /** While quiet, what came in waits for quietMs after the last tick, unless someone watches or asked. */
  private holdsQuiet(now: number): boolean {
    return !this.watching && !this.asked && now - this.lastAt < this.quietMs;
  }
}
