import type { RunsResponse } from '../../protocol/runs.js';
import type { ViewerFrame } from './frames.js';
import { buildView, type WatchView } from './job-view.js';
import { applyFrame, disconnected, initialSource, refusedFrame, type SourceState } from './source.js';
import { inertLine } from '../../protocol/terminal-text.js';

/**
 * What changed: a frame from a sidecar, a frame refused (`first` for the first one this connection
 * refused: the one worth a line), a connection's status, or the job looked at.
 */
export type Change =
  | { kind: 'frame'; source: number; frame: ViewerFrame }
  | { kind: 'refused'; source: number; reason: string; first: boolean }
  | { kind: 'connecting' | 'lost'; source: number }
  | { kind: 'selected' }
  | { kind: 'runs'; job: string };
type Listener = (change: Change) => void;

/** The viewer's state: one SourceState per sidecar and the job looked at. Whoever draws subscribes. */
export class WatchStore {
  private sources: SourceState[];
  private selected: string | null = null;
  /** Each job's run history, as a sidecar last answered. */
  private readonly runs = new Map<string, RunsResponse>();
  private readonly listeners = new Set<Listener>();

  constructor(urls: readonly string[]) {
    this.sources = urls.map(initialSource);
  }

  subscribe(listener: Listener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  frame(source: number, frame: ViewerFrame, at: number): void {
    this.replace(source, applyFrame(this.sources[source]!, frame, at), { kind: 'frame', source, frame });
  }

  /** A frame that did not parse was dropped; the source keeps what it had and takes the frames after it. */
  refused(source: number, reason: string): void {
    // Why a frame was refused quotes what the sidecar sent, and a lost connection its close reason: shown inert.
    reason = inertLine(reason);
    const held = this.sources[source]!;
    const first = held.refused === null;
    this.replace(source, refusedFrame(held, reason), { kind: 'refused', source, reason, first });
  }

  connecting(source: number): void {
    const held = this.sources[source]!;
    this.replace(source, { ...held, status: held.status === 'live' ? 'reconnecting' : held.status, retryAt: null, refused: null }, { kind: 'connecting', source });
  }

  lost(source: number, error: string, retryAt: number): void {
    error = inertLine(error);
    this.replace(source, disconnected(this.sources[source]!, error, retryAt), { kind: 'lost', source });
  }

  /** Looks at the next job in the list (live jobs first). */
  nextJob(now: number): void {
    const view = this.view(now);
    const ids = view.jobs.map((j) => j.id);
    if (ids.length < 2) return;
    const at = view.job ? ids.indexOf(view.job.id) : -1;
    this.selected = ids[(at + 1) % ids.length]!;
    this.notify({ kind: 'selected' });
  }

  /** A sidecar's answer about the job's earlier runs. */
  setRuns(response: RunsResponse): void {
    this.runs.set(response.job, response);
    this.notify({ kind: 'runs', job: response.job });
  }

  view(now: number): WatchView {
    return buildView(this.sources, this.selected, now, (job) => this.runs.get(job) ?? null);
  }

  get sourceStates(): readonly SourceState[] {
    return this.sources;
  }

  private replace(index: number, next: SourceState, change: Change): void {
    this.sources = this.sources.map((s, i) => (i === index ? next : s));
    this.notify(change);
  }

  private notify(change: Change): void {
    for (const listener of this.listeners) listener(change);
  }
}
