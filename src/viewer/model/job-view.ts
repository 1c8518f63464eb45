import type { Straggler } from '../../model/straggler.js';
import type { Cause, Verdict } from '../../model/verdict.js';
import type { RunsResponse } from '../../protocol/runs.js';
import type { Breakdown, JobState, SidecarState, TimelineSegment } from '../../protocol/state.js';
import { frozenKey } from './frozen.js';
import { banner, type Banner } from './banner.js';
import { combineVerdicts } from './combine.js';
import { historyView, type HistoryPart, type HistoryView } from './history-view.js';
import { notesOf, type Notes } from './notes.js';
import { holds, regressionsOf, type RegressionEpisode } from './regressions.js';
import { stopView, type StopView } from './stop.js';
import { gpuRows, rankRow, uniqueRanks, type GpuRow, type Part, type RankRow } from './rows.js';
import type { ConnectionStatus, SourceState } from './source.js';

export type { Banner, Breakdown, GpuRow, Notes, RankRow, StopView };

/** What the viewer shows, built from what each sidecar sent. Pure: no terminal, no clock of its own. */

export type EventRow =
  | { kind: 'verdict'; at: string; who: string; from: Verdict | null; to: Verdict; cause: Cause }
  /** A regression that began (`text` says how much slower, and why) or came back within its threshold. */
  | { kind: 'regression'; at: string; who: string; status: 'started' | 'ended'; changePct: number | null; thresholdPct: number; text: string };

/** A regression of the job's run, on `node` where the job spans several sidecars. */
export type RegressionView = RegressionEpisode & { node: string | null };

export interface JobView {
  id: string;
  worldSize: number;
  nodes: string[];
  steps: number;
  durationS: number;
  startedAt: number;
  ended: boolean;
  endReason: string | null;
  banner: Banner | null;
  /** While the job does not step (or as an ended run ended): hung, stalled or gone, on whom it waits. */
  stop: StopView | null;
  straggler: Straggler | null;
  /** Slowest rank's p50 and p90, summed samples/s, mean breakdown: the job at a glance. */
  stepP50: number | null;
  stepP90: number | null;
  samplesPerS: number | null;
  breakdown: Breakdown | null;
  ranks: RankRow[];
  gpus: GpuRow[];
  history: HistoryView | null;
  timelines: Array<{ label: string | null; segments: TimelineSegment[] }>;
  events: EventRow[];
  /** The verdict it ended with, from its timeline, where no verdict state was seen while it ran. */
  finalVerdict: { verdict: Verdict; cause: Cause } | null;
  /** This run against its reference (a --baseline, or the median of its recent runs), where the sidecar compares it. */
  comparison: { headline: string; changePct: number | null } | null;
  /** Memory, the waste ledger, other processes on its GPUs and nodes: the lines under the tables. */
  notes: Notes;
  /**
   * The regression holding now, as the sidecar told it (`?events=regression`): the worst where the
   * job spans several sidecars; for an ended run, the one that held when it ended. Null where none
   * holds or the sidecar tells none (one older than the regression frame).
   */
  regression: RegressionView | null;
}

export interface SourceLine {
  url: string;
  label: string;
  status: ConnectionStatus;
  attempt: number;
  error: string | null;
  /** Frames dropped on this connection because they did not parse, and why the last was. */
  refused: { count: number; reason: string } | null;
  retryInMs: number | null;
  rateHz: number | null;
  gpuSource: string | null;
}

export interface WatchView {
  sources: SourceLine[];
  jobs: Array<{ id: string; ended: boolean }>;
  job: JobView | null;
  /** The job's earlier runs, as a sidecar's run history holds them; null until one answered. */
  runs: RunsResponse | null;
}

const EVENTS_SHOWN = 8;
const RANK_EVENTS_UP_TO = 4;

const urlHost = (url: string) => {
  try {
    return new URL(url).host;
  } catch {
    return url;
  }
};

/** Each sidecar's name: the host its ranks run on, or its address where that does not tell sidecars apart. */
export function sourceLabels(sources: readonly SourceState[]): string[] {
  const byHost = sources.map((source) => {
    const hosts = new Set(source.state?.jobs.flatMap((job) => job.ranks.map((rank) => rank.host)) ?? []);
    return hosts.size === 1 ? [...hosts][0]! : urlHost(source.url);
  });
  return byHost.map((label, i) => (byHost.indexOf(label) !== byHost.lastIndexOf(label) ? urlHost(sources[i]!.url) : label));
}

function jobView(id: string, parts: Part[]): JobView {
  const ranks = uniqueRanks(parts.flatMap((part) => part.job.ranks.map((rank) => ({ part, rank }))));
  const single = parts.length === 1 ? parts[0]! : null;
  const combined = single ? { verdict: single.job.verdict, rank: null, straggler: single.job.straggler } : combineVerdicts(ranks.map((r) => r.rank));
  const at = Math.max(...parts.map((p) => Date.parse(p.state.now)));
  const rows = ranks.map(({ part, rank }) => rankRow(part, rank, combined.straggler?.rank ?? null));
  const windows = ranks.map((r) => r.rank.window);
  const withBreakdown = windows.filter((w) => w.breakdown !== null);
  const maxOf = (xs: Array<number | null>) => (xs.some((x) => x !== null) ? Math.max(...xs.filter((x): x is number => x !== null)) : null);
  const rates = windows.map((w) => w.samples_per_s).filter((x): x is number => x !== null);
  const mean = (pick: (b: Breakdown) => number) => withBreakdown.reduce((sum, w) => sum + pick(w.breakdown!), 0) / withBreakdown.length;
  // Each sidecar numbers its own runs: its part's regressions are those of the run it reports.
  const told = (p: Part) => regressionsOf(p.source.regressions, id, p.job.run);
  const historyParts: HistoryPart[] = parts
    .filter((p) => p.history !== null)
    .map((p) => ({
      history: p.history!,
      // An ended job's last slice is whole: no step will come into it.
      at: p.job.ended ? Math.ceil(Date.parse(p.state.now) / p.history!.sliceMs) * p.history!.sliceMs : Date.parse(p.state.now),
      job: id,
      jobStartedAt: Date.parse(p.job.started_at),
      timeline: p.job.timeline,
      ranks: p.job.ranks.map((r) => ({ rank: r.rank, label: `rank ${r.rank}` })),
      regressions: told(p).map((r) => ({ from: r.startedAt, to: r.endedAt })),
      gpus: p.state.counters.gpus.map((g) => ({ key: g.key, index: g.index, uuid: g.uuid, label: `${parts.length > 1 ? `${p.label} ` : ''}${gpuLabel(g)}` })),
    }));
  // A big job's ranks change verdict together: there, only the job's own changes are worth the lines.
  const rankEvents = ranks.length <= RANK_EVENTS_UP_TO;
  const node = (p: Part) => (parts.length > 1 ? `${p.label} ` : '');
  const regressions = parts.flatMap((p) => told(p).map((r): RegressionView => ({ ...r, node: parts.length > 1 ? p.label : null })));
  const events = [
    ...parts.flatMap((p) =>
      p.source.events
        .filter((e) => e.job === id && (rankEvents || e.rank === null))
        .map((e): EventRow => ({ kind: 'verdict', at: e.at, who: e.rank === null ? `${node(p)}job` : `${node(p)}rank ${e.rank}`, from: e.from, to: e.to, cause: e.cause })),
    ),
    ...regressions.flatMap(regressionEvents),
  ]
    .sort((a, b) => a.at.localeCompare(b.at))
    .slice(-EVENTS_SHOWN);
  return {
    id,
    worldSize: Math.max(...parts.map((p) => p.job.world_size)),
    nodes: [...new Set(ranks.map((r) => r.rank.host))],
    steps: ranks.reduce((sum, r) => sum + r.rank.steps, 0),
    durationS: Math.max(...parts.map((p) => p.job.duration_s)),
    startedAt: Math.min(...parts.map((p) => Date.parse(p.job.started_at))),
    ended: parts.every((p) => p.job.ended),
    endReason: parts.find((p) => p.job.end_reason)?.job.end_reason ?? null,
    banner: combined.verdict ? banner(combined.verdict, at, combined.rank) : null,
    stop: stopView(
      parts.map((p) => p.job),
      ranks.map((r) => r.rank),
      at,
    ),
    straggler: combined.straggler,
    stepP50: maxOf(windows.map((w) => w.step_ms_p50)),
    stepP90: maxOf(windows.map((w) => w.step_ms_p90)),
    samplesPerS: rates.length ? rates.reduce((a, b) => a + b, 0) : null,
    breakdown: withBreakdown.length ? { data: mean((b) => b.data), h2d: mean((b) => b.h2d), compute: mean((b) => b.compute), other: mean((b) => b.other) } : null,
    ranks: rows,
    gpus: parts.flatMap(gpuRows),
    history: historyView(historyParts),
    timelines: parts.map((p) => ({ label: parts.length > 1 ? p.label : null, segments: p.job.timeline })),
    events,
    finalVerdict: finalVerdict(parts),
    comparison: comparisonOf(parts),
    notes: notesOf(parts, ranks.map((r) => r.rank)),
    regression: worst(regressions.filter(holds)),
  };
}

/** A regression's beginning and, once over, its end, as lines among the verdict changes. */
function regressionEvents(r: RegressionView): EventRow[] {
  const who = r.node === null ? 'job' : `${r.node} job`;
  const row = (status: 'started' | 'ended', at: number): EventRow => ({ kind: 'regression', at: new Date(at).toISOString(), who, status, changePct: r.changePct, thresholdPct: r.thresholdPct, text: r.text });
  return r.endedAt === null ? [row('started', r.startedAt)] : [row('started', r.startedAt), row('ended', r.endedAt)];
}

/** Of several holding (one per sidecar of the job), the one slowest against its reference. */
function worst(holding: RegressionView[]): RegressionView | null {
  return holding.reduce<RegressionView | null>((a, b) => (a === null || (b.changePct ?? -Infinity) > (a.changePct ?? -Infinity) ? b : a), null);
}

/** "gpu 0", or "gpu 0 gi 2" for a MIG instance known by its instance id (DCGM), so slices of one GPU read apart. */
export function gpuLabel(gpu: { index: number; gpu_instance_id?: number | null }): string {
  return gpu.gpu_instance_id == null ? `gpu ${gpu.index}` : `gpu ${gpu.index} gi ${gpu.gpu_instance_id}`;
}

function finalVerdict(parts: Part[]): JobView['finalVerdict'] {
  if (!parts.every((p) => p.job.ended)) return null;
  const last = parts.map((p) => p.job.timeline.at(-1)).find((segment) => segment !== undefined);
  return last ? { verdict: last.verdict, cause: last.cause } : null;
}

function comparisonOf(parts: Part[]): JobView['comparison'] {
  const baseline = parts.find((p) => p.job.baseline !== null)?.job.baseline;
  return baseline ? { headline: baseline.text.split('\n')[0] ?? '', changePct: baseline.change_pct } : null;
}

/**
 * One sidecar's part of the job: as sent while it runs; once ended, as it was when it ended (its
 * verdict, its ranks' windows, its GPUs and sparklines up to its last step).
 */
function partOf(source: SourceState, state: SidecarState, job: JobState, label: string): Part {
  const frozen = job.ended ? source.frozen.get(frozenKey(job.job)) : undefined;
  if (!frozen || frozen.run !== job.run) return { source, state, job, label, history: source.history };
  // The comparison comes once the sidecar has written the run's summary: taken from the job as sent.
  const frozenJob = { ...frozen.job, baseline: job.baseline ?? frozen.job.baseline };
  return { source, state: { ...state, now: new Date(frozen.at).toISOString(), counters: frozen.counters }, job: frozenJob, label, history: frozen.history ?? source.history };
}

/** Live jobs first, the newest first. */
function jobOrder(sources: readonly SourceState[]): Array<{ id: string; ended: boolean; startedAt: number }> {
  const jobs = new Map<string, { id: string; ended: boolean; startedAt: number }>();
  for (const job of sources.flatMap((s) => s.state?.jobs ?? [])) {
    const held = jobs.get(job.job);
    const startedAt = Date.parse(job.started_at);
    jobs.set(job.job, { id: job.job, ended: (held?.ended ?? true) && job.ended, startedAt: Math.min(held?.startedAt ?? startedAt, startedAt) });
  }
  return [...jobs.values()].sort((a, b) => Number(a.ended) - Number(b.ended) || b.startedAt - a.startedAt);
}

export function buildView(sources: readonly SourceState[], selected: string | null, now: number, runs: (job: string) => RunsResponse | null = () => null): WatchView {
  const jobs = jobOrder(sources);
  const id = jobs.find((j) => j.id === selected)?.id ?? jobs[0]?.id ?? null;
  const labels = sourceLabels(sources);
  const parts: Part[] = [];
  sources.forEach((source, i) => {
    const job = source.state?.jobs.find((j) => j.job === id);
    if (source.state && job) parts.push(partOf(source, source.state, job, labels[i]!));
  });
  return {
    sources: sources.map((s, i) => ({
      url: s.url,
      label: labels[i]!,
      status: s.status,
      attempt: s.attempt,
      error: s.error,
      refused: s.refused,
      retryInMs: s.retryAt === null ? null : Math.max(0, s.retryAt - now),
      rateHz: s.rateHz,
      gpuSource: s.state?.counters.gpu_source ?? null,
    })),
    jobs: jobs.map(({ id: jobId, ended }) => ({ id: jobId, ended })),
    job: id !== null && parts.length ? jobView(id, parts) : null,
    runs: id !== null ? runs(id) : null,
  };
}
