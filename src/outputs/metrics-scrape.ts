import type { GpuMatch } from '../analysis/gpu-match.js';
import type { Straggler } from '../model/straggler.js';
import type { KnownGpu } from '../counters/counter-store.js';
import type { HostSample } from '../counters/host.js';
import type { GpuSample } from '../counters/types.js';
import type { EngineSnapshot, RankTotals, SnapshotVerdict } from '../engine/snapshot.js';
import type { IngestStats } from '../protocol/state.js';
import type { SourceStatus } from '../counters/status.js';
import type { JournalHealth } from '../protocol/state.js';
import type { DurationCounts } from '../store/duration-counts.js';
import type { RankSnapshot } from '../store/job-snapshot.js';
import type { StepSums } from '../store/step-buckets.js';
import type { Waste } from '../protocol/state.js';

/** What /metrics is made from: the engine's latest snapshot, read once per scrape for every family. */

export interface MetricsInputs {
  snapshot: () => EngineSnapshot;
  ingest: IngestStats;
  sources: () => SourceStatus;
  /** The journal's health (null without --out). */
  journal: () => JournalHealth | null;
  version: string;
  /** Viewer connections open now. */
  viewers: () => number;
  /** How far the host's wall clock has stepped under the sidecar's since it started, ms (hostClockStepMs; 0 on a test's clock). */
  hostStepMs: () => number;
}

/** What /metrics reads of a verdict in force: the verdict and cause, its limiters and its causes with what fixing each would buy. */
export type VerdictNow = Pick<SnapshotVerdict, 'verdict' | 'cause' | 'limiters' | 'causes'>;

export interface RankScrape {
  rank: number;
  snapshot: RankSnapshot;
  totals: StepSums;
  durations: DurationCounts;
  /** What describes the present (verdict, straggler, throttling, GPU): null once the job has ended. */
  live: {
    verdict: VerdictNow | null;
    straggler: boolean;
    cgroupThrottledShare: number | null;
    gpu: GpuMatch | null;
    /** Seconds since its last step ended, and whether it is stalled (null where not judged). */
    secondsSinceStep: number | null;
    stalled: boolean | null;
    /** Its MFU over the window (0..1); null where not measured or no hook gave FLOPs. */
    mfu: number | null;
  } | null;
}

export interface JobScrape {
  job: string;
  ended: boolean;
  /** Ranks in the job (WORLD_SIZE), whichever pods they run in. */
  worldSize: number;
  verdict: VerdictNow | null;
  straggler: Straggler | null;
  ranks: RankScrape[];
  waste: Waste | null;
}

export interface GpuScrape {
  gpu: KnownGpu;
  /** Samples of the last window, for the throttle-reason shares. */
  recent: GpuSample[];
}

export interface Scrape {
  at: number;
  jobs: JobScrape[];
  gpus: GpuScrape[];
  host: HostSample | null;
  sources: SourceStatus;
  journal: JournalHealth | null;
  skipped: Record<string, number>;
}

const verdictNow = (held: SnapshotVerdict | null): VerdictNow | null => (held ? { verdict: held.verdict, cause: held.cause, limiters: held.limiters, causes: held.causes } : null);

export function readScrape(inputs: MetricsInputs): Scrape {
  const snapshot = inputs.snapshot();
  const totals = new Map<string, RankTotals>(snapshot.ranks.map((rank) => [`${rank.job}\u0000${rank.rank}`, rank]));
  const jobs = snapshot.jobs.map(
    (job): JobScrape => ({
      job: job.job,
      ended: job.ended,
      worldSize: job.world_size,
      verdict: job.ended ? null : verdictNow(job.verdict),
      straggler: job.ended ? null : job.straggler,
      waste: job.waste,
      ranks: job.ranks.flatMap((rank): RankScrape[] => {
        const held = totals.get(`${job.job}\u0000${rank.rank}`);
        if (!held) return [];
        return [
          {
            rank: rank.rank,
            snapshot: rank,
            totals: held.totals,
            durations: held.durations,
            live: job.ended
              ? null
              : {
                  verdict: verdictNow(rank.verdict),
                  straggler: rank.straggler,
                  cgroupThrottledShare: rank.window.process?.cgroup_throttled_share ?? null,
                  gpu: held.gpu,
                  secondsSinceStep: rank.stall?.no_step_s ?? null,
                  stalled: rank.stall ? rank.stall.state === 'stalled' : null,
                  mfu: rank.mfu?.mfu ?? null,
                },
          },
        ];
      }),
    }),
  );
  return {
    at: snapshot.at,
    jobs,
    gpus: snapshot.gpus.map(({ known, recent }) => ({ gpu: known, recent })),
    host: snapshot.host,
    sources: inputs.sources(),
    journal: inputs.journal(),
    skipped: snapshot.entries.skipped,
  };
}
