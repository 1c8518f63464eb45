/** How the journal fares, as /readyz, /v1/state and /metrics report it. */
export interface JournalHealth {
  ok: boolean;
  reason: string | null;
  writeErrors: number;
  lastError: string | null;
  bytes: number;
  maxBytes: number;
  segments: number;
  checkpoints: number;
  lastCheckpointAt: number | null;
  lastCheckpointMs: number | null;
  lastCheckpointBytes: number | null;
  /** Entries not journaled to stay under the cap, by kind (counter samples first; never steps). */
  givenUp: Record<string, number>;
  /** What the last replay could not use. */
  replay: { entries: number; skipped: number; problems: number; ms: number } | null;
}
