import type { RegressionFrame } from '../../protocol/stream.js';
import type { SidecarState } from '../../protocol/state.js';

/**
 * Regressions a sidecar told this viewer of (`regression` frames), one entry per episode: a run
 * passing its threshold at `started_at`, as its latest frame has it. A run's episodes outlive the
 * run: the sidecar says nothing more of a run that ended, so an ended run keeps its final state.
 * Pure.
 */

export interface RegressionEpisode {
  job: string;
  run: number;
  /** `ended` once back within the threshold; otherwise it holds (or held when the run ended). */
  status: RegressionFrame['status'];
  startedAt: number;
  endedAt: number | null;
  /** The latest figure told, percent slower per sample; null where the run had none yet. */
  changePct: number | null;
  thresholdPct: number;
  reference: RegressionFrame['reference'];
  text: string;
  /** When the sidecar last said anything of it (ms). */
  at: number;
}

export type Regressions = ReadonlyMap<string, RegressionEpisode>;

/** Episodes kept per sidecar; the oldest go first. */
const KEPT = 32;

const episodeKey = (job: string, run: number, startedAt: number) => `${job}\u0000${run}\u0000${startedAt}`;

export const holds = (r: RegressionEpisode) => r.status !== 'ended';

/** The episodes after a regression frame. */
export function applyRegression(held: Regressions, frame: RegressionFrame): Regressions {
  const regression: RegressionEpisode = {
    job: frame.job,
    run: frame.run,
    status: frame.status,
    startedAt: Date.parse(frame.started_at),
    endedAt: frame.ended_at === null ? null : Date.parse(frame.ended_at),
    changePct: frame.change_pct,
    thresholdPct: frame.threshold_pct,
    reference: frame.reference,
    text: frame.text,
    at: Date.parse(frame.at),
  };
  const next = new Map(held);
  const key = episodeKey(regression.job, regression.run, regression.startedAt);
  // Re-set, so that the map's order is the order they were last told of.
  next.delete(key);
  next.set(key, regression);
  return next.size > KEPT ? new Map([...next].slice(next.size - KEPT)) : next;
}

/**
 * The episodes after a snapshot. The sidecar sends the regressions holding right after it, as
 * `ongoing`; one held here for a job still running that is not among them ended while this viewer
 * was away, at a time it cannot know: dropped rather than shown as holding. Those of a run that has
 * ended (or is gone) stay as they were when it ended.
 */
export function afterSnapshot(held: Regressions, state: SidecarState): Regressions {
  const running = (r: RegressionEpisode) => state.jobs.some((job) => job.job === r.job && job.run === r.run && !job.ended);
  const kept = [...held].filter(([, r]) => !(holds(r) && running(r)));
  return kept.length === held.size ? held : new Map(kept);
}

/** The episodes of `job`'s run `run`, oldest first. */
export function regressionsOf(held: Regressions, job: string, run: number): RegressionEpisode[] {
  return [...held.values()].filter((r) => r.job === job && r.run === run).sort((a, b) => a.startedAt - b.startedAt);
}

const pct = (x: number) => `${Math.round(Math.abs(x))}% ${x >= 0 ? 'slower' : 'faster'}`;

/** The regression in one line, for the line under the banner: since when, how much slower and why, now. */
export function regressionHeadline(r: RegressionEpisode, runEnded: boolean, clock: (at: number) => string): string {
  const when = runEnded ? `held from ${clock(r.startedAt)} until the run ended` : `since ${clock(r.startedAt)}`;
  const figure = r.changePct === null ? '' : `${runEnded ? 'last' : 'now'} ${pct(r.changePct)}; `;
  return `REGRESSION ${when} — ${r.text} (${figure}threshold ${r.thresholdPct}%)`;
}

/** A regression's beginning or end, as a line among the verdict changes. */
export function regressionChange(status: 'started' | 'ended', text: string, changePct: number | null, thresholdPct: number): string {
  return status === 'started' ? `regression: ${text}` : `regression over: back within ${thresholdPct}%${changePct === null ? '' : ` (${pct(changePct)})`}`;
}
