import type { EngineSnapshot } from '../engine/snapshot.js';
import { STREAM_EVENTS, STREAM_VERSION, type RegressionFrame, type SnapshotFrame, type StreamEvent, type UpdateFrame, type VerdictFrame } from '../protocol/stream.js';
import type { RegressionChange } from '../engine/runs.js';
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
 * Regression frames, to the viewers that asked for them: each change as the engine decides it, and
 * after each snapshot a viewer gets (it connected, or fell behind and missed frames) the regressions
 * holding, as `ongoing` with the latest figure: a viewer starts over at a snapshot. The regressions
 * holding are the engine's (with their onset), so a restarted sidecar tells them too.
 */
export class RegressionEvents {
  readonly viewers = new Set<StreamViewer>();

  publish(snapshot: EngineSnapshot): void {
    if (this.viewers.size === 0) return;
    for (const change of snapshot.regressionChanges) {
      const frame = encode(regressionFrame(change, change.regressed ? 'started' : 'ended', change.at, change.changePct));
      for (const viewer of this.viewers) viewer.offer(frame, 'event', change.at);
    }
  }

  /** Right after a viewer's snapshot: the regressions holding, as `ongoing`, so that it need not have seen them begin. */
  resync(viewer: StreamViewer, at: number, regressions: EngineSnapshot['regressions']): void {
    if (!this.viewers.has(viewer)) return;
    for (const r of regressions) if (r.began) viewer.offer(encode(regressionFrame(r.began, 'ongoing', at, r.change_pct ?? r.began.changePct)), 'event', at);
  }
}
