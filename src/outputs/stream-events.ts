import type { EngineSnapshot } from '../engine/snapshot.js';
import { STREAM_EVENTS, STREAM_VERSION, type RegressionFrame, type SnapshotFrame, type StreamEvent, type UpdateFrame, type VerdictFrame } from '../protocol/stream.js';
import type { LiveSnapshot, RegressionChange } from './history-live.js';
import type { StreamViewer } from './stream-viewer.js';

export const encode = (frame: SnapshotFrame | UpdateFrame | VerdictFrame | RegressionFrame) => Buffer.from(JSON.stringify(frame));

/**
 * The frame types a viewer asked for beyond the ones every viewer gets (`?events=regression`, names
 * separated by commas). Names this sidecar does not know are left out: a newer viewer may ask for more.
 */
export function optedIn(query: unknown): Set<StreamEvent> {
  const names = typeof query === 'string' ? query.split(',') : Array.isArray(query) ? query.filter((q): q is string => typeof q === 'string').flatMap((q) => q.split(',')) : [];
  return new Set(STREAM_EVENTS.filter((event) => names.map((n) => n.trim()).includes(event)));
}

export function regressionFrame(change: RegressionChange, status: RegressionFrame['status'], at: number, changePct: number | null): RegressionFrame {
  return {
    v: STREAM_VERSION,
    type: 'regression',
    at: new Date(at).toISOString(),
    job: change.job,
    run: change.run,
    status,
    change_pct: changePct,
    threshold_pct: change.thresholdPct,
    started_at: new Date(change.startedAt).toISOString(),
    ended_at: change.endedAt === null ? null : new Date(change.endedAt).toISOString(),
    reference: change.reference,
    text: change.text,
  };
}

/**
 * Regression frames, to the viewers that asked for them: each change as the live comparisons decide
 * it, and after each snapshot a viewer gets (it connected, or fell behind and missed frames) the
 * regressions holding, as `ongoing` with the latest figure: a viewer starts over at a snapshot.
 */
export class RegressionEvents {
  readonly viewers = new Set<StreamViewer>();
  /** The regressions holding now, by job, as they were told when they began. */
  private readonly holding = new Map<string, RegressionChange>();

  publish(snapshot: LiveSnapshot): void {
    for (const change of snapshot.regressionChanges ?? []) {
      if (change.regressed) this.holding.set(change.job, change);
      else this.holding.delete(change.job);
      if (this.viewers.size === 0) continue;
      const frame = encode(regressionFrame(change, change.regressed ? 'started' : 'ended', change.at, change.changePct));
      for (const viewer of this.viewers) viewer.offer(frame, 'event', change.at);
    }
    // A run that ended, or a job compared no more, takes its regression with it.
    for (const job of this.holding.keys()) if (!snapshot.regressions?.some((r) => r.job === job && r.regressed)) this.holding.delete(job);
  }

  /** Right after a viewer's snapshot: the regressions holding, as `ongoing`, so that it need not have seen them begin. */
  resync(viewer: StreamViewer, at: number, regressions: EngineSnapshot['regressions']): void {
    if (!this.viewers.has(viewer)) return;
    for (const change of this.holding.values()) {
      const latest = regressions?.find((r) => r.job === change.job)?.change_pct ?? change.changePct;
      viewer.offer(encode(regressionFrame(change, 'ongoing', at, latest)), 'event', at);
    }
  }
}
