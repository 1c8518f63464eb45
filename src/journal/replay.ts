import { Engine, type EngineLimits } from '../engine/engine.js';
import { parseEntry, type JournalEntry } from '../engine/entries.js';
import { readWal } from './wal-read.js';

export interface ReplayProblem {
  file: string;
  offset: number;
  reason: string;
}

export interface ReplayReport {
  /** Entries applied. */
  entries: number;
  /** Entries read but not usable (bad shape), or not applicable (the engine skipped them). */
  skipped: number;
  /** Lines or files that could not be read: torn, corrupt, a missing segment. */
  problems: number;
  /** The first few problems, with their file and byte offset. */
  examples: ReplayProblem[];
  checkpoint: string | null;
  ms: number;
}

export interface ReplayOptions {
  /** The sidecar's --max-jobs and --max-ranks: a journal with more cannot fill the heap. */
  limits?: EngineLimits | null;
  /** Called with each entry applied, and what it published (paced replays print verdicts from it). */
  onEntry?: (entry: JournalEntry, engine: Engine) => Promise<void> | void;
  /** Publish a snapshot at every tick (slower; for paced replays), instead of once at the end. */
  publishTicks?: boolean;
  /** A checkpoint larger than this is refused unread (ingest/limits.ts checkpointBytesFor: what the limits could write). */
  maxCheckpointBytes?: number;
}

const MAX_EXAMPLES = 20;
/** Journals written before ticks were journaled get ticks at this interval of their own time. */
export const TICK_MS = 250;

/**
 * The made-up ticks after an entry at `lastAt`, up to (not past) `until`: every TICK_MS while time
 * alone can still change the state (windows emptying, verdicts held, runs ending: `settleMs`), then
 * at doubling spacing, so that a gap of a year costs a few dozen ticks and a time-based change in
 * it is still seen within a fraction of its age. Each tick's interval since the previous one covers
 * the stretch it jumped, which is how the analysis counts time: idle comes out of the gap itself.
 */
export function* madeUpTicks(from: number, lastAt: number, until: number, settleMs: number): Generator<number> {
  let at = from;
  let step = TICK_MS;
  while (at + TICK_MS <= until) {
    if (at + step > lastAt + settleMs) step = Math.min(step * 2, Math.max(TICK_MS, Math.floor((until - at) / TICK_MS) * TICK_MS));
    at = Math.min(at + step, until - ((until - at) % TICK_MS));
    yield at;
  }
}

/**
 * Streams a journal folder (its newest good checkpoint, then the segments after it) into a new
 * engine. Never throws for content: whatever cannot be read or used is skipped, counted and
 * reported with its file and offset. Memory is bounded by the state, not by the journal.
 */
export async function replayJournal(dir: string, options: ReplayOptions = {}): Promise<{ engine: Engine; report: ReplayReport }> {
  const started = performance.now();
  const report: ReplayReport = { entries: 0, skipped: 0, problems: 0, examples: [], checkpoint: null, ms: 0 };
  const problem = (file: string, offset: number, reason: string) => {
    report.problems += 1;
    if (report.examples.length < MAX_EXAMPLES) report.examples.push({ file, offset, reason });
  };
  let engine = new Engine({ limits: options.limits ?? undefined });
  engine.replaying = !options.publishTicks;
  // Older journals have no ticks, starts or connections: ticks are made up from their entries' times,
  // and each hello counts as connected, as it was.
  let sawTick = false;
  let sawStart = false;
  let nextTick: number | null = null;
  let lastAt = 0;
  const apply = async (entry: JournalEntry) => {
    const applied = engine.stats.applied;
    engine.apply(entry);
    if (engine.stats.applied > applied) report.entries += 1;
    else report.skipped += 1;
    await options.onEntry?.(entry, engine);
  };
  // A checkpoint is checked whole and built apart: one that is refused leaves the engine as it was,
  // and the journal falls back to an older checkpoint or to the segments from the first.
  let restored: Engine | null = null;
  const unusable = (value: unknown) => {
    try {
      restored = Engine.fromCheckpoint(value, options.limits ?? null);
      return null;
    } catch (error) {
      return `checkpoint not usable: ${(error as Error).message}`;
    }
  };
  for await (const item of readWal(dir, { onBad: (bad) => problem(bad.file, bad.offset, bad.reason), maxCheckpointBytes: options.maxCheckpointBytes, unusable })) {
    if (item.kind === 'checkpoint') {
      engine = restored!;
      engine.replaying = !options.publishTicks;
      report.checkpoint = item.file;
      sawStart = true;
      continue;
    }
    const entry = parseEntry(item.value);
    if (typeof entry === 'string') {
      report.skipped += 1;
      if (report.examples.length < MAX_EXAMPLES) report.examples.push({ file: item.file, offset: item.offset, reason: entry });
      continue;
    }
    if (entry.t === 'tick') sawTick = true;
    if (entry.t === 'start') sawStart = true;
    if (!sawTick) {
      nextTick ??= lastAt = entry.at;
      const { windowMs, holdMs, endGraceMs } = engine.config;
      for (const at of madeUpTicks(nextTick, lastAt, entry.at, 2 * (windowMs + holdMs + endGraceMs))) {
        nextTick = at;
        await apply({ t: 'tick', at });
      }
      lastAt = Math.max(lastAt, entry.at);
    }
    await apply(entry);
    if (!sawStart && entry.t === 'hello') await apply({ t: 'connect', at: entry.at, session: entry.hello.session });
  }
  if (engine.replaying) engine.publishNow();
  report.ms = Math.round(performance.now() - started);
  return { engine, report };
}
