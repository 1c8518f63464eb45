import type { SourceTiming } from './source.js';
import type { CollectorHealth } from './types.js';

/** Where the GPU counters come from and how the sources fare, as /v1/state and /metrics report it. */

export interface SourceStatus {
  gpu: { source: string; reason: string; health: CollectorHealth | null };
  host: CollectorHealth | null;
  /** Every source running, with what its reads cost; and a configured DCGM exporter that gave nothing and was replaced (no timing). */
  collectors: Array<{ health: CollectorHealth; timing: SourceTiming | null; restartsChild: boolean }>;
}
