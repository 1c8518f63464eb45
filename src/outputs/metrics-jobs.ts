import type { Registry } from 'prom-client';
import { counterFamily, gaugeFamily } from './metrics-family.js';
import type { JobScrape, RankScrape, Scrape } from './metrics-scrape.js';
import { limiterLevels, VERDICT_CODES, verdictStateSet } from './metrics-verdicts.js';
import { speedupOf } from '../model/fix-value.js';

/** Per job and rank: where step time goes, the verdicts, the straggler. */

type RankLabel = 'training_job' | 'rank';

function* eachRank(scrape: Scrape): Generator<{ job: JobScrape; rank: RankScrape; labels: Record<RankLabel, string> }> {
  for (const job of scrape.jobs) for (const rank of job.ranks) yield { job, rank, labels: { training_job: job.job, rank: String(rank.rank) } };
}

const PHASES = [
  ['data', 'dataNs'],
  ['h2d', 'h2dNs'],
  ['compute', 'computeNs'],
  ['other', 'otherNs'],
] as const;

export function registerJobFamilies(registry: Registry, scrape: () => Scrape): void {
  counterFamily(registry, {
    name: 'stepscope_wasted_gpu_seconds_total',
    help: 'GPU-seconds the job lost to each cause (input, transfer, host, communication, throttle), from the lost shares of every tick, one GPU per rank.',
    labelNames: ['training_job', 'cause'],
    *samples() {
      for (const job of scrape().jobs) for (const entry of job.waste?.by_cause ?? []) yield [{ training_job: job.job, cause: entry.cause }, entry.gpu_seconds];
    },
  });

  counterFamily(registry, {
    name: 'stepscope_phase_seconds_total',
    help: 'Wall-clock seconds of training steps spent in each phase (data wait, host-to-device copy, compute, other), per job and rank.',
    labelNames: ['training_job', 'rank', 'phase'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) {
        for (const [phase, field] of PHASES) yield [{ ...labels, phase }, rank.totals[field] / 1e9];
      }
    },
  });

  counterFamily(registry, {
    name: 'stepscope_samples_total',
    help: 'Samples processed, as the training loop reported them with scope.step(samples=...), per job and rank.',
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) if (rank.totals.samplesSteps > 0) yield [labels, rank.totals.samples];
    },
  });

  counterFamily(registry, {
    name: 'stepscope_hook_dropped_records_total',
    help: "Step records the hook dropped because its buffer was full (the sidecar was away too long), per job and rank.",
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) yield [labels, rank.snapshot.dropped];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_verdict',
    help: "The rank's verdict as a state set: 1 for the verdict and cause in force, 0 for the others. Running jobs only.",
    labelNames: ['training_job', 'rank', 'verdict', 'cause'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) {
        if (!rank.live) continue;
        for (const { verdict, cause, value } of verdictStateSet(rank.live.verdict)) yield [{ ...labels, verdict, cause }, value];
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_verdict_code',
    help: "The rank's verdict as a number, for state timelines: 0 compute-bound, 1 input-bound, 2 transfer-bound, 3 host-bound, 4 throttled, 5 warming-up, 6 idle, 7 communication-bound, 8 memory-bound, 9 stalled, 10 hung, 11 gone. Running jobs only.",
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) {
        if (rank.live?.verdict) yield [labels, VERDICT_CODES[rank.live.verdict.verdict]];
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_limiter_share',
    help: "Share of step time each limiter costing at least 5% takes over the rank's window (input, transfer, host, communication, throttle); absent below 5%. Running jobs only.",
    labelNames: ['training_job', 'rank', 'limiter'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) for (const cost of rank.live?.verdict?.limiters ?? []) yield [{ ...labels, limiter: cost.limiter }, cost.share];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_limiter_level',
    help: "Each limiter's level beside the rank's verdict: 0 under 5% of step time, 1 moderate, 2 high (at its verdict's bar). Running jobs only.",
    labelNames: ['training_job', 'rank', 'limiter'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) {
        if (rank.live?.verdict) for (const { limiter, level } of limiterLevels(rank.live.verdict.limiters)) yield [{ ...labels, limiter }, level];
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_straggler',
    help: 'Whether the rank is the straggler that holds the other ranks of its job back (1) or not (0). Running jobs only.',
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) if (rank.live) yield [labels, rank.live.straggler ? 1 : 0];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_cgroup_cpu_throttled_ratio',
    help: "Share of CFS periods in which the training container was CPU-throttled, between the hook's last two process samples, per job and rank.",
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) yield [labels, rank.live?.cgroupThrottledShare ?? null];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_gpu_info',
    help: 'The GPU a rank runs on (join the stepscope_gpu_* series on instance and gpu), and how it was matched. Running jobs only.',
    labelNames: ['training_job', 'rank', 'gpu', 'gpu_uuid', 'gpu_instance', 'matched_by'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) {
        const match = rank.live?.gpu;
        if (match) yield [{ ...labels, gpu: match.gpu.index, gpu_uuid: match.gpu.uuid ?? '', gpu_instance: String(match.gpu.gpuInstanceId ?? ''), matched_by: match.by }, 1];
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_job_verdict',
    help: "The job's verdict as a state set (the straggler's verdict, else the one most ranks hold): 1 for the verdict and cause in force, 0 for the others. Running jobs only.",
    labelNames: ['training_job', 'verdict', 'cause'],
    *samples() {
      for (const job of scrape().jobs) {
        if (job.ended) continue;
        for (const { verdict, cause, value } of verdictStateSet(job.verdict)) yield [{ training_job: job.job, verdict, cause }, value];
      }
    },
  });

  // Static for a job and kept like its counters: what a job-wide report (report --prometheus) counts missing ranks against.
  gaugeFamily(registry, {
    name: 'stepscope_job_world_size',
    help: 'Ranks in the job (WORLD_SIZE), over all its pods: a rank no sidecar reports is missing.',
    labelNames: ['training_job'],
    *samples() {
      for (const job of scrape().jobs) yield [{ training_job: job.job }, job.worldSize];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_job_verdict_code',
    help: "The job's verdict as a number (as in stepscope_rank_verdict_code). Running jobs only.",
    labelNames: ['training_job'],
    *samples() {
      for (const job of scrape().jobs) if (!job.ended && job.verdict) yield [{ training_job: job.job }, VERDICT_CODES[job.verdict.verdict]];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_job_limiter_level',
    help: "Each limiter's level beside the job's verdict (the rank's whose verdict is the job's): 0 under 5% of step time, 1 moderate, 2 high. Running jobs only.",
    labelNames: ['training_job', 'limiter'],
    *samples() {
      for (const job of scrape().jobs) {
        if (!job.ended && job.verdict) for (const { limiter, level } of limiterLevels(job.verdict.limiters)) yield [{ training_job: job.job, limiter }, level];
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_rank_mfu_ratio',
    help: "Model FLOPs utilization over the rank's window: the FLOPs of a step (scope.set_flops_per_step, scope.count_flops) over its time, as a share of the GPU's dense datasheet peak for its dtype. Absent where not measured (no FLOP count, CPU, a GPU or dtype without a peak). Running jobs only.",
    labelNames: ['training_job', 'rank'],
    *samples() {
      for (const { rank, labels } of eachRank(scrape())) if (rank.live?.mfu != null) yield [labels, rank.live.mfu];
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_potential_speedup_ratio',
    help: "How many times as fast the job's steps would be with each cause of its verdict fixed: 1 / (1 - the share of step time the fix gives back), Amdahl; where that share is not measured, the bound from its limiter's whole share. Running jobs only.",
    labelNames: ['training_job', 'cause'],
    *samples() {
      for (const job of scrape().jobs) {
        if (job.ended || !job.verdict) continue;
        for (const fix of job.verdict.causes) {
          const speedup = speedupOf(fix.gain ?? fix.upto);
          if (Number.isFinite(speedup)) yield [{ training_job: job.job, cause: fix.cause ?? fix.limiter }, speedup];
        }
      }
    },
  });

  gaugeFamily(registry, {
    name: 'stepscope_job_straggler_excess_seconds',
    help: "Seconds per step the job's straggler loses to its own delays beyond the other ranks' median, with the main reason; absent while there is none.",
    labelNames: ['training_job', 'rank', 'reason'],
    *samples() {
      for (const { job, straggler } of scrape().jobs) {
        if (straggler) yield [{ training_job: job, rank: String(straggler.rank), reason: straggler.reason }, straggler.excess_ms / 1000];
      }
    },
  });
}
