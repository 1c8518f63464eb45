import { processList } from '../model/process-list.js';
import { stopSentence } from '../analysis/summary.js';
import type { SummaryGpu, RankSummary, Summary } from '../protocol/summary.js';
import { limiterText } from '../model/costs.js';
import { framesText } from '../protocol/capture.js';
import type { SummaryStop } from '../protocol/stall-state.js';
import { rankList } from '../model/stall.js';
import type { NodeSummary } from '../protocol/state.js';

/** The words and figures a summary is shown with, one set for the text, Markdown and HTML renderings. */

export const pct = (x: number | null | undefined) => (x === null || x === undefined ? 'n/a' : `${Math.round(x * 100)}%`);
export const num = (x: number | null | undefined, digits = 1) => (x === null || x === undefined ? 'n/a' : x.toFixed(digits));
export const withCause = (verdict: string, cause: string | null) => (cause ? `${verdict} (${cause})` : verdict);

export const RANK_COLUMNS = ['rank', 'host', 'steps', 'p50 ms', 'p90 ms', 'data', 'h2d', 'compute', 'other', 'verdict', 'straggler'] as const;

/** One rank's row under RANK_COLUMNS, as plain text; `straggler` is what marks the straggler. */
export function rankCells(r: RankSummary, straggler: string): string[] {
  return [
    String(r.rank),
    r.host,
    String(r.steps),
    num(r.step_ms.p50, 2),
    num(r.step_ms.p90, 2),
    pct(r.breakdown.data),
    pct(r.breakdown.h2d),
    pct(r.breakdown.compute),
    pct(r.breakdown.other),
    withCause(r.verdict, r.cause),
    r.straggler ? straggler : '',
  ];
}

/** The sentence under a summary's GPU table for a GPU others shared; null where none did or none were measured. */
export function otherProcessesLine(g: SummaryGpu): string | null {
  if (!g.other_processes?.length) return null;
  const list = processList(g.other_processes.map((p) => ({ pid: p.pid, name: p.name, figure: p.used_mib_max === null ? null : `${p.used_mib_max} MiB` })));
  return `Other processes on GPU ${g.index}: ${list}.`;
}

const gib = (bytes: number) => `${(bytes / 1024 ** 3).toFixed(0)} GiB`;

/** "Node: Intel Xeon …, 224 cores (112 physical), 2048 GiB, 8 × NVIDIA H100 80GB HBM3, driver 590.48.01, CUDA 13.1; 28 cores per GPU." */
export function nodeLine(node: NodeSummary): string {
  const cores = node.cores_logical === null ? null : `${node.cores_logical} cores${node.cores_physical === null ? '' : ` (${node.cores_physical} physical)`}`;
  const parts = [
    node.cpu_model,
    cores,
    node.memory_bytes === null ? null : gib(node.memory_bytes),
    node.gpu_models?.map((m) => `${m.count} × ${m.name}`).join(', ') || null,
    node.driver_version === null ? null : `driver ${node.driver_version}`,
    node.cuda_version === null ? null : `CUDA ${node.cuda_version}`,
  ].filter((part): part is string => part !== null);
  const perGpu = node.cores_per_gpu === null ? '' : `; ${node.cores_per_gpu} cores per GPU`;
  return `Node: ${parts.join(', ') || 'not known'}${perGpu}.`;
}

/** What a summary says of one stop, a line each: the stop, the culprit's stack, what it cost, its dumps. */
export function stopLines(stop: SummaryStop): string[] {
  const lines = [`${stopSentence(stop)} From ${num(stop.since_s)} s into the run.`];
  if (stop.where.length) {
    const first = stop.where[0]!;
    lines.push(`Rank ${stop.culprits[0] ?? '?'}'s own code, innermost first: ${framesText(stop.where)} (${first.file}:${first.line}).`);
  }
  if (stop.gpu_seconds >= 1) lines.push(`GPU time held idle: ${num(stop.gpu_seconds, 0)} GPU-seconds.`);
  if (stop.dumps?.length) lines.push(`Every rank's stacks when it was declared hung: ${stop.dumps.join(', ')}.`);
  return lines;
}

/** "Limiters (≥ 5% of the time): loading 30% (high), work outside the phases 8% (moderate)."; null where none (or summaries before them). */
export function limitersLine(summary: Pick<Summary, 'limiters'>): string | null {
  if (!summary.limiters?.length) return null;
  return `Limiters (at least 5% of the time): ${summary.limiters.map(limiterText).join(', ')}.`;
}

/** "Across 3 pods (a: ranks 0, 1; b: ranks 2, 3; …). Missing: ranks 6, 7; pod c (no summary of the job)." Null for one sidecar's summary. */
export function jobWideLine(s: Summary): string | null {
  const wide = s.job_wide;
  if (!wide) return null;
  const from = wide.from === 'prometheus' ? 'from Prometheus' : 'from their summaries';
  const pods = wide.pods.map((p) => `${p.pod}: rank${p.ranks.length === 1 ? '' : 's'} ${rankList(p.ranks)}`).join('; ');
  const missing = [
    ...(wide.missing_ranks.length ? [`rank${wide.missing_ranks.length === 1 ? '' : 's'} ${rankList(wide.missing_ranks)} of ${s.world_size}`] : []),
    ...wide.missing_pods.map((p) => `pod ${p.pod} (${p.why})`),
  ];
  return `The job across ${wide.pods.length} pod${wide.pods.length === 1 ? '' : 's'}, ${from} (${pods}). ${missing.length ? `Missing: ${missing.join('; ')}.` : 'None missing.'}`;
}
