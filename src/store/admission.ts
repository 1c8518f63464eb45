import type { Env, Hello, StepRecord } from '../protocol/messages.js';
import { plausibleAt } from '../model/clock.js';

/**
 * What the ingest asks before it journals a frame, and all it may ask: read-only, answered from the
 * sessions the engine holds (src/store/session-table.ts implements it). The rules it answers by are
 * the ones the engine applies entries by, so a record is admitted once, by one rule.
 */
export interface AdmissionPort {
  /** The limit this hello would pass (a new job or rank past the limits), or null. */
  refusal(hello: Hello): HelloRefusal | null;
  /** Why this hello may not take its session (another job or rank holds it, or the secret is wrong), or null. */
  sessionConflict(hello: Hello, resume: string | null): string | null;
  /** Whether a hello with this session would resume it (the same job's current run has it). */
  hasSession(sessionId: string, jobId: string): boolean;
  /** The secret of a known session (null for an unknown one, or one journaled before secrets). */
  secretOf(sessionId: string): string | null;
  /** Highest sequence number held for the session (0 for one not known). */
  ack(sessionId: string): number;
  /** The rank's env with `update` merged in; throws EnvTooLargeError when that would pass the rank's bound. */
  mergedEnv(sessionId: string, update: Env): Env;
  /** What bounds the seqs the session may send next, and its clock; null for an unknown session. */
  seqRange(sessionId: string): SeqRange | null;
}

export interface HelloRefusal {
  limit: 'jobs' | 'ranks';
  reason: string;
}

/** Jobs and ranks per job kept: a hello past them is refused live and skipped in a replay. */
export interface AdmissionLimits {
  maxJobs: number;
  maxRanksPerJob: number;
}

/** Sidecar time and hook monotonic time at a session's latest hello: maps hook times onto the sidecar's clock. */
export interface SessionClock {
  helloAt: number;
  monoAtHello: number;
}

export interface SeqRange extends SessionClock {
  /** The highest seq held, or what the hook said was acknowledged when first seen. */
  base: number;
  /** Seqs already passed over between the records held. */
  skipped: number;
}

/** An env update that would grow a rank's env past its bound. */
export class EnvTooLargeError extends Error {}

/** A hello past --max-jobs or --max-ranks: refused live before it is logged, skipped in a replay. */
export class LimitError extends Error {
  constructor(readonly limit: 'jobs' | 'ranks') {
    super(`too many ${limit}`);
  }
}

/** Hook monotonic ns -> sidecar clock ms, through the latest hello's pair of readings. */
export function toSidecarMs(clock: SessionClock, monoNs: number): number {
  return clock.helloAt + (monoNs - clock.monoAtHello) / 1e6;
}

/** Whether a hook time, through the session's clock (none: not known yet, taken), could be real when received at `at`. */
export function plausibleFor(clock: SessionClock | null, monoNs: number, at: number): boolean {
  return clock === null || plausibleAt(toSidecarMs(clock, monoNs), at);
}

export interface AdmittedRows {
  /** The rows past `after`, in order: new to the session. */
  fresh: readonly StepRecord[];
  /** Of those, the rows whose end the rank's clock could have given: what is kept. */
  kept: readonly StepRecord[];
  /** Rows at or below `after`: resent, already held. */
  duplicates: number;
  /** The fresh rows left out for their times, and the highest fresh seq (what the acknowledgement covers); null when none. */
  refused: { count: number; through: number } | null;
}

/**
 * The one rule for a frame's step rows: those at or below `after` are duplicates; of the rest, those
 * that end where the session's clock could not put them are refused (acknowledged, never applied).
 * The ingest decides by it before journaling; the engine applies a journal's rows by it again, which
 * for what the ingest wrote changes nothing and keeps a forged or older journal to the same rule.
 */
export function admitRows(clock: SessionClock | null, after: number, records: readonly StepRecord[], at: number): AdmittedRows {
  // The usual frame, every row new and plausible, is taken as it came: this runs twice a frame, and
  // its copies were a tenth of what the ingest allocated a record (BENCHMARKS.md, "allocation").
  let usual = 0;
  while (usual < records.length && records[usual]!.seq > after && plausibleFor(clock, records[usual]!.endNs, at)) usual++;
  if (usual === records.length) return { fresh: records, kept: records, duplicates: 0, refused: null };
  const fresh = records.filter((record) => record.seq > after);
  const kept = fresh.filter((record) => plausibleFor(clock, record.endNs, at));
  const count = fresh.length - kept.length;
  return { fresh, kept, duplicates: records.length - fresh.length, refused: count > 0 ? { count, through: fresh.at(-1)!.seq } : null };
}
