import { deviceHint, matchGpu, type GpuMatch } from '../analysis/gpu-match.js';
import type { Straggler } from '../analysis/straggler.js';
import type { Cause, Verdict } from '../analysis/verdict.js';
import type { Analyst } from '../analyst.js';
import type { KnownGpu } from '../counters/counter-store.js';
import type { HostSample } from '../counters/host.js';
import type { GpuSample } from '../counters/types.js';
import type { IngestStats } from '../ingest/ingest.js';
import { windowFor, type SourceStatus } from '../state.js';
import type { RankSnapshot } from '../store/job-store.js';
import type { World } from '../store/replay.js';
import type { StepSums } from '../store/step-buckets.js';

/** What /metrics is made from: the sidecar's state, read once per scrape for every family. */

export interface MetricsInputs {
  world: World;
  analyst: Analyst;
  ingest: IngestStats;
  sources: () => SourceStatus;
  /** The --window: the span of the throttle-reason shares. */
  windowMs: number;
  version: string;
  /** Viewer connections open now. */
  viewers: () => number;
  now?: () => number;
}

export interface VerdictNow {
  verdict: Verdict;
  cause: Cause;
}

export interface RankScrape {
  rank: number;
  snapshot: RankSnapshot;
  totals: StepSums;
  /** What describes the present (verdict, straggler, throttling, GPU): null once the job has ended. */
  live: {
    verdict: VerdictNow | null;
    straggler: boolean;
    cgroupThrottledShare: number | null;
    gpu: GpuMatch | null;
  } | null;
}

export interface JobScrape {
  job: string;
  ended: boolean;
  verdict: VerdictNow | null;
  straggler: Straggler | null;
  ranks: RankScrape[];
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
}

const verdictNow = (held: { judgement: { verdict: Verdict; cause: Cause } } | null): VerdictNow | null =>
  held ? { verdict: held.judgement.verdict, cause: held.judgement.cause } : null;

export function readScrape(inputs: MetricsInputs, at: number): Scrape {
  const { world, analyst, windowMs } = inputs;
  const knownGpus = world.counters.knownGpus();
  const views = new Map(world.jobs.rankViews().map((view) => [`${view.job}\u0000${view.rank}`, view]));
  const jobs = world.jobs.snapshot(at).map((job): JobScrape => {
    const analysis = job.ended ? null : analyst.analysisOf(job.job);
    const straggler = analysis?.straggler() ?? null;
    return {
      job: job.job,
      ended: job.ended,
      verdict: verdictNow(analysis?.jobVerdict() ?? null),
      straggler,
      ranks: job.ranks.map((snapshot): RankScrape => {
        const view = views.get(`${job.job}\u0000${snapshot.rank}`)!;
        return {
          rank: snapshot.rank,
          snapshot,
          totals: view.totals,
          live: analysis
            ? {
                verdict: verdictNow(analysis.rankVerdict(snapshot.rank)),
                straggler: straggler?.rank === snapshot.rank,
                cgroupThrottledShare: windowFor(view, world.counters, at, windowMs).process?.cgroup_throttled_share ?? null,
                gpu: matchGpu(deviceHint(view.env, view.localRank), knownGpus),
              }
            : null,
        };
      }),
    };
  });
  return {
    at,
    jobs,
    gpus: knownGpus.map((gpu) => ({ gpu, recent: world.counters.gpuSamples(gpu.key, at - windowMs, at) })),
    host: world.counters.latestHost(),
    sources: inputs.sources(),
  };
}
