import type { Cause, Verdict } from '../analysis/verdict.js';
import type { sidecarState } from '../state.js';

/**
 * The frames of `ws /v1/stream` (sidecar → viewers), JSON in text frames; see "Stream (sidecar →
 * viewers)" in docs/protocol.md. Shared by the sidecar, which writes them, and the viewer, which reads them.
 */

export const STREAM_VERSION = 1;

/** The body of GET /v1/state: every frame that carries state carries all of it. */
export type SidecarState = ReturnType<typeof sidecarState>;

/** Per-slice figures, oldest first, slice `i` covering [from + i·slice_s, from + (i+1)·slice_s); null where nothing was seen. */
export interface StreamHistory {
  from: string;
  slice_s: number;
  ranks: Array<{ job: string; rank: number; step_ms: Array<number | null> }>;
  gpus: Array<{ index: number; uuid: string | null; util: Array<number | null>; sm_clock_pct: Array<number | null> }>;
}

export interface SnapshotFrame {
  v: typeof STREAM_VERSION;
  type: 'snapshot';
  seq: number;
  at: string;
  rate_hz: number;
  state: SidecarState;
  /** The last `history_s` seconds. */
  history: StreamHistory;
}

export interface UpdateFrame {
  v: typeof STREAM_VERSION;
  type: 'update';
  seq: number;
  at: string;
  state: SidecarState;
  /** Only the last few slices: they replace the same slices of the history already held. */
  history: StreamHistory;
}

export interface VerdictFrame {
  v: typeof STREAM_VERSION;
  type: 'verdict';
  at: string;
  job: string;
  /** null for the job's own verdict. */
  rank: number | null;
  from: Verdict | null;
  from_cause: Cause;
  to: Verdict;
  cause: Cause;
  since: string;
  rule: string;
  recommendation: string | null;
}

export type StreamFrame = SnapshotFrame | UpdateFrame | VerdictFrame;

export const StreamCloseCode = {
  goingAway: 1001,
  /** The viewer does not read fast enough: too much unsent, or nothing taken for too long. */
  tooSlow: 4008,
} as const;
