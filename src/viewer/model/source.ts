import type { SidecarState } from '../../protocol/state.js';
import type { VerdictFrame } from '../../protocol/stream.js';
import type { ViewerFrame } from './frames.js';
import { freezeEnded, type FrozenJob } from './frozen.js';
import { historyFromSnapshot, mergeHistory, type HistoryState } from './history.js';
import { afterSnapshot, applyRegression, type Regressions } from './regressions.js';

export type ConnectionStatus = 'connecting' | 'live' | 'reconnecting';

/** What a viewer knows of one sidecar: its connection and the newest state it sent. */
export interface SourceState {
  url: string;
  status: ConnectionStatus;
  /** Failed connection attempts since the last snapshot. */
  attempt: number;
  error: string | null;
  /** When the next attempt is due (local clock, ms). */
  retryAt: number | null;
  rateHz: number | null;
  seq: number | null;
  /** Local clock, ms, of the newest frame. */
  receivedAt: number | null;
  state: SidecarState | null;
  history: HistoryState | null;
  /** Verdict changes seen on this connection, oldest first. */
  events: VerdictFrame[];
  /** Frames refused on this connection, and why the last was: the rest were taken, and what they held is shown. */
  refused: { count: number; reason: string } | null;
  /** Jobs that ended, as they were when they ended (by job name). */
  frozen: ReadonlyMap<string, FrozenJob>;
  /** Regressions told on this connection (or held from before it, for runs that ended). */
  regressions: Regressions;
}

const EVENTS_KEPT = 50;

export function initialSource(url: string): SourceState {
  return { url, status: 'connecting', attempt: 0, error: null, retryAt: null, rateHz: null, seq: null, receivedAt: null, state: null, history: null, events: [], refused: null, frozen: new Map(), regressions: new Map() };
}

/** The source after a frame. Pure. An update before any snapshot is ignored: it has only the tail of the history. */
export function applyFrame(source: SourceState, frame: ViewerFrame, receivedAt: number): SourceState {
  switch (frame.type) {
    case 'snapshot': {
      const history = historyFromSnapshot(frame.history, Date.parse(frame.at));
      return {
        ...source,
        status: 'live',
        attempt: 0,
        error: null,
        retryAt: null,
        rateHz: frame.rate_hz,
        seq: frame.seq,
        receivedAt,
        state: frame.state,
        history,
        frozen: freezeEnded(source.frozen, source.state, frame.state, history),
        regressions: afterSnapshot(source.regressions, frame.state),
      };
    }
    case 'update': {
      if (!source.history) return source;
      const history = mergeHistory(source.history, frame.history);
      return { ...source, seq: frame.seq, receivedAt, state: frame.state, history, frozen: freezeEnded(source.frozen, source.state, frame.state, history) };
    }
    case 'verdict':
      return { ...source, receivedAt, events: [...source.events, frame].slice(-EVENTS_KEPT) };
    case 'regression':
      return { ...source, receivedAt, regressions: applyRegression(source.regressions, frame) };
  }
}

/** The source after a frame that did not parse: the frame is dropped, what the source holds is kept. */
export function refusedFrame(source: SourceState, reason: string): SourceState {
  return { ...source, refused: { count: (source.refused?.count ?? 0) + 1, reason } };
}

/** The source after its connection was lost or refused; what it last showed is kept, marked stale. */
export function disconnected(source: SourceState, error: string, retryAt: number): SourceState {
  return { ...source, status: 'reconnecting', attempt: source.attempt + 1, error, retryAt };
}
