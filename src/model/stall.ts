import type { Cause } from './verdict.js';

/**
 * Whether a job that stopped stepping is hung, and on whom it waits: the job-level rule over what
 * each rank is doing. Shared by the sidecar (src/analysis/stall.ts, which finds each rank's state)
 * and the viewer (which combines ranks reported by several sidecars the same way). Pure.
 */

export const RANK_STOP_STATES = ['stepping', 'waiting', 'stalled', 'gone', 'ended'] as const;
export type RankStopState = (typeof RANK_STOP_STATES)[number];

/** What one rank is doing, as far as a stop is concerned. */
export interface RankStop {
  rank: number;
  /**
   * stepping: a step ended lately; waiting: none for a little while, not yet stalled; stalled: alive
   * and heard from, none for its threshold; gone: its connection dropped without an end; ended: it said so.
   */
  state: RankStopState;
  cause: Cause;
  /** The end of its last step, ms (null before its first). */
  since: number | null;
  /** When it went (its connection dropped), ms; null unless gone. */
  wentAt: number | null;
  lastStep: number;
  /**
   * How far it got in its collectives: the last collective it enqueued on the default process group
   * (PyTorch's Flight Recorder), else those the hook saw it enter in its current step. Null unknown.
   */
  collectives: { count: number; source: 'flight-recorder' | 'hook' } | null;
  /** The collective it waits in, in words, where it is inside one. */
  inCollective: string | null;
  /** Its code still moves (or its loader's workers still work): slow, not stuck. */
  progressing: boolean;
  /** Its stack was asked for and has not come yet (the job's verdict waits a little for it). */
  capturePending: boolean;
}

/** A job that stopped stepping: on whom it waits, and who waits. */
export interface JobStop {
  verdict: 'hung' | 'stalled' | 'gone';
  cause: Cause;
  /** The ranks behind: those the others wait for (none where all wait in one collective). */
  culprits: number[];
  /** The ranks waiting for them. */
  waiting: number[];
  /** When the job stopped stepping: the earliest last step among the ranks that stopped, ms. */
  since: number;
  /** What the waiting ranks wait in, in words; null where they are not seen inside a collective. */
  waitsIn: string | null;
}

const stopped = (r: RankStop) => r.state === 'stalled' || r.state === 'gone';

/** Orders ranks by how far they got: step first, then collectives where all have the same measure. */
function progressKey(ranks: RankStop[]): (r: RankStop) => number[] {
  const sources = new Set(ranks.map((r) => r.collectives?.source ?? null));
  const comparable = sources.size === 1 && !sources.has(null);
  return (r) => [r.lastStep, comparable ? r.collectives!.count : 0];
}

const compare = (a: number[], b: number[]) => a[0]! - b[0]! || a[1]! - b[1]!;

/**
 * The job's stop, or null while no rank stalled or went, or `pending` while the verdict should wait
 * (a rank's stack is on its way, or a rank has gone quiet without its threshold passed yet).
 */
export function jobStop(ranks: readonly RankStop[]): JobStop | 'pending' | null {
  const out = ranks.filter(stopped);
  if (out.length === 0) return null;
  const stalled = ranks.filter((r) => r.state === 'stalled');
  const gone = ranks.filter((r) => r.state === 'gone');
  const byRank = (list: RankStop[]) => list.map((r) => r.rank).sort((a, b) => a - b);
  /** When the ranks it waits on stopped stepping (those that never stepped: when the others did). */
  const sinceOf = (list: RankStop[]) => {
    const since = Math.min(...list.map((r) => r.since ?? Number.POSITIVE_INFINITY));
    if (Number.isFinite(since)) return since;
    const any = Math.min(...ranks.map((r) => r.since ?? Number.POSITIVE_INFINITY));
    return Number.isFinite(any) ? any : 0;
  };
  if (stalled.some((r) => r.capturePending)) return 'pending';
  // A rank that never ended a step while the others stopped after theirs is behind them all: it is
  // not waited for (it may be compiling) unless the others stopped; then it holds them.
  const never = ranks.filter((r) => r.state === 'waiting' && r.lastStep < 0);
  if (never.length && stalled.length) stalled.push(...never.map((r) => ({ ...r, state: 'stalled' as const })));
  // Some ranks still step: not a hang of the job, one rank of it stopped.
  if (ranks.some((r) => r.state === 'stepping')) {
    return { verdict: stalled.length ? 'stalled' : 'gone', cause: (stalled[0] ?? gone[0])!.cause, culprits: byRank(out), waiting: [], since: sinceOf(out), waitsIn: null };
  }
  if (ranks.some((r) => r.state === 'waiting' && r.lastStep >= 0)) return 'pending';
  const waitsIn = (list: RankStop[]) => list.find((r) => r.inCollective !== null)?.inCollective ?? null;
  if (gone.length) {
    // Every rank here went (or ended): the job is gone from when the first went.
    const went = Math.min(...gone.map((r) => r.wentAt ?? r.since ?? Number.POSITIVE_INFINITY));
    if (stalled.length === 0) return { verdict: 'gone', cause: gone[0]!.cause, culprits: byRank(gone), waiting: [], since: Number.isFinite(went) ? went : 0, waitsIn: null };
    return { verdict: 'hung', cause: 'rank-gone', culprits: byRank(gone), waiting: byRank(stalled), since: sinceOf(gone), waitsIn: waitsIn(stalled) };
  }
  const unresponsive = stalled.filter((r) => r.cause === 'unresponsive');
  if (unresponsive.length) {
    const others = stalled.filter((r) => r.cause !== 'unresponsive');
    return { verdict: 'hung', cause: 'unresponsive', culprits: byRank(unresponsive), waiting: byRank(others), since: sinceOf(unresponsive), waitsIn: waitsIn(others) };
  }
  const key = progressKey(stalled);
  const least = stalled.map(key).sort(compare)[0]!;
  let behind = stalled.filter((r) => compare(key(r), least) === 0);
  if (behind.length === stalled.length) {
    // As far as each other: those not inside a collective hold the others back; if every one is inside it, none does here.
    const outside = stalled.filter((r) => r.inCollective === null);
    if (outside.length === 0) return { verdict: 'hung', cause: 'collective', culprits: [], waiting: byRank(stalled), since: sinceOf(stalled), waitsIn: waitsIn(stalled) };
    behind = outside;
  }
  const waiting = stalled.filter((r) => !behind.includes(r));
  const stuck = behind.filter((r) => !r.progressing);
  // The ranks behind still work (an evaluation, a checkpoint, loader workers busy): stalled, not hung.
  const lead = stuck[0] ?? behind[0]!;
  return { verdict: stuck.length ? 'hung' : 'stalled', cause: lead.cause, culprits: byRank(behind), waiting: byRank(waiting), since: sinceOf(behind), waitsIn: waitsIn(waiting) };
}

/** "0", "0, 2", "0–3", "0, 2–7": ranks in ascending order, runs shortened. */
export function rankList(ranks: readonly number[]): string {
  const sorted = [...new Set(ranks)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(j - i >= 2 ? `${sorted[i]}–${sorted[j]}` : j === i ? `${sorted[i]}` : `${sorted[i]}, ${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(', ');
}
