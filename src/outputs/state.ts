import { deviceHint, matchGpu } from './analysis/gpu-match.js';
import { rankWindow, type RankWindow } from './analysis/window.js';
import { compare, type Comparison } from './analysis/compare.js';
import type { TimelineSegment } from './analysis/job-analysis.js';
import type { Straggler } from './analysis/straggler.js';
import type { HostSample } from './counters/host.js';
import type { CounterStore } from './counters/counter-store.js';
import { throttleReasonNames, type CollectorHealth, type GpuSample } from './counters/types.js';
import type { IngestStats } from './ingest/ingest.js';
import type { JobSnapshot, RankSnapshot, RankView } from './store/job-store.js';
import type { World } from './store/replay.js';
import type { Analyst } from './analyst.js';
import type { Judgement } from './analysis/verdict.js';

export interface SourceStatus {
  gpu: { source: string; reason: string; health: CollectorHealth | null };
  host: CollectorHealth | null;
}

export interface VerdictState {
  verdict: Judgement['verdict'];
  cause: Judgement['cause'];
  since: string;
  evidence: Judgement['evidence'];
  recommendations: Judgement['recommendations'];
  /** A different verdict waiting out its hold time, if any. */
  pending: { verdict: Judgement['verdict']; cause: Judgement['cause']; since: string } | null;
}

export interface RankState extends RankSnapshot {
  window: RankWindow;
  verdict: VerdictState | null;
  straggler: boolean;
}

export interface JobState extends Omit<JobSnapshot, 'ranks'> {
  ranks: RankState[];
  verdict: VerdictState | null;
  straggler: Straggler | null;
  timeline: TimelineSegment[];
  baseline: Comparison | null;
}

function verdictState(held: { judgement: Judgement; since: number; pending?: { judgement: Judgement; since: number } | null } | null): VerdictState | null {
  if (!held) return null;
  const { judgement } = held;
  return {
    verdict: judgement.verdict,
    cause: judgement.cause,
    since: new Date(held.since).toISOString(),
    evidence: judgement.evidence,
    recommendations: judgement.recommendations,
    pending: held.pending ? { verdict: held.pending.judgement.verdict, cause: held.pending.judgement.cause, since: new Date(held.pending.since).toISOString() } : null,
  };
}

/** A window holds at least this many steps where the last minute has them: slow steps get longer windows. */
const MIN_WINDOW_STEPS = 5;
const MAX_WINDOW_MS = 60_000;

/** The window of one rank ending at `at`: its steps matched with its GPU's, the host's and its process's counters. */
export function windowFor(view: RankView, counters: CounterStore<HostSample>, at: number, windowMs: number): RankWindow {
  let span = windowMs;
  while (span < MAX_WINDOW_MS && view.buckets.between(at - span, at).steps < MIN_WINDOW_STEPS) span = Math.min(MAX_WINDOW_MS, span * 2);
  const from = at - span;
  const match = matchGpu(deviceHint(view.env, view.localRank), counters.knownGpus());
  return rankWindow({
    from,
    to: at,
    steps: view.buckets.between(from, at),
    stepMs: view
      .recent()
      .filter((step) => step.endAt >= from && step.endAt < at)
      .map((step) => step.record.durNs / 1e6),
    gpu: match ? { samples: counters.gpuSamples(match.gpu.key, from, at), matchedBy: match.by } : null,
    host: counters.hostSamples(from, at),
    process: view.process(),
  });
}

export function jobsState(world: World, analyst: Analyst, at: number, windowMs: number): JobState[] {
  const views = new Map(world.jobs.rankViews().map((view) => [`${view.job}\u0000${view.rank}`, view]));
  return world.jobs.snapshot(at).map((job) => {
    const analysis = analyst.analysisOf(job.job);
    const straggler = analysis?.straggler() ?? null;
    const baseline = analyst.options.baseline;
    const live = baseline ? analyst.summary(job.job, at) : null;
    return {
      ...job,
      verdict: verdictState(analysis?.jobVerdict() ?? null),
      straggler,
      timeline: analysis?.timeline(at) ?? [],
      baseline: baseline && live ? compare(baseline, live) : null,
      ranks: job.ranks.map((rank) => ({
        ...rank,
        window: windowFor(views.get(`${job.job}\u0000${rank.rank}`)!, world.counters, at, windowMs),
        verdict: verdictState(analysis?.rankVerdict(rank.rank) ?? null),
        straggler: straggler?.rank === rank.rank,
      })),
    };
  });
}

function gpuSummary(sample: GpuSample) {
  return {
    index: sample.index,
    uuid: sample.uuid,
    name: sample.name,
    at: new Date(sample.at).toISOString(),
    util_gpu: sample.utilGpu,
    util_mem: sample.utilMem,
    sm_clock_mhz: sample.smClockMHz,
    sm_clock_max_mhz: sample.smClockMaxMHz,
    mem_clock_mhz: sample.memClockMHz,
    temp_c: sample.tempC,
    power_w: sample.powerW,
    power_limit_w: sample.powerLimitW,
    mem_used_mib: sample.memUsedMiB,
    mem_total_mib: sample.memTotalMiB,
    pstate: sample.pstate,
    throttle_reasons: throttleReasonNames(sample.throttleReasons),
    sm_active: sample.smActive,
    tensor_active: sample.tensorActive,
  };
}

function hostSummary(sample: HostSample | null) {
  if (!sample) return null;
  return {
    at: new Date(sample.at).toISOString(),
    cpu_pct: sample.cpuPct,
    cpu_per_core_pct: sample.cpuPerCorePct,
    iowait_pct: sample.iowaitPct,
    steal_pct: sample.stealPct,
    load1: sample.load1,
    load5: sample.load5,
    load15: sample.load15,
    mem_used_bytes: sample.memUsedBytes,
    mem_total_bytes: sample.memTotalBytes,
    mem_available_bytes: sample.memAvailableBytes,
    disk_read_bps: sample.diskReadBps,
    disk_write_bps: sample.diskWriteBps,
    net_rx_bps: sample.netRxBps,
    net_tx_bps: sample.netTxBps,
  };
}

export interface StateInput {
  world: World;
  analyst: Analyst;
  ingest: IngestStats;
  sources: SourceStatus;
  version: string;
  startedAt: number;
  at: number;
  windowMs: number;
}

/** The body of GET /v1/state. */
export function sidecarState(input: StateInput) {
  const { world, at } = input;
  return {
    version: input.version,
    now: new Date(at).toISOString(),
    uptime_s: (at - input.startedAt) / 1000,
    window_s: input.windowMs / 1000,
    ingest: input.ingest,
    counters: {
      gpu_source: input.sources.gpu.source,
      gpu_source_reason: input.sources.gpu.reason,
      gpu_health: input.sources.gpu.health,
      host_health: input.sources.host,
      gpus: world.counters.knownGpus().map((gpu) => gpuSummary(gpu.latest)),
      host: hostSummary(world.counters.latestHost()),
    },
    jobs: jobsState(world, input.analyst, at, input.windowMs),
  };
}
