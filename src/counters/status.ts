import type { CollectorHealth } from './types.js';

/** Where the GPU counters come from and how the collectors fare, as /v1/state and /metrics report it. */

export interface SourceStatus {
  gpu: { source: string; reason: string; health: CollectorHealth | null };
  host: CollectorHealth | null;
}
