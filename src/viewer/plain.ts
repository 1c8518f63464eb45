import type { RegressionFrame, VerdictFrame } from '../protocol/stream.js';
import { fmtMs, fmtPct, fmtRate, fmtShare, DASH } from './format.js';
import type { GpuRow, WatchView } from './model/job-view.js';
import { framesText } from '../protocol/capture.js';

/** One line per update for logs, pipes and tests: key=value pairs, the job first, then its GPUs. Pure. */

const stamp = (at: number) => new Date(at).toISOString().replace(/\.\d{3}Z$/, 'Z');
const value = (text: string) => (text === DASH ? '-' : text.replace(/\s+/g, '_'));
const pair = (key: string, text: string) => `${key}=${value(text)}`;

function gpuPart(gpu: GpuRow, multiNode: boolean): string {
  const name = multiNode ? `${gpu.node}/gpu${gpu.index}` : `gpu${gpu.index}`;
  const sm = gpu.smMHz !== null && gpu.smMaxMHz ? fmtPct((100 * gpu.smMHz) / gpu.smMaxMHz) : DASH;
  const power = gpu.powerW !== null ? `${Math.round(gpu.powerW)}/${gpu.powerLimitW === null ? '-' : Math.round(gpu.powerLimitW)}W` : DASH;
  const mem = gpu.memUsedMiB !== null ? `${Math.round(gpu.memUsedMiB)}/${gpu.memTotalMiB === null ? '-' : Math.round(gpu.memTotalMiB)}MiB` : DASH;
  return [
    name,
    pair('util', fmtPct(gpu.util)),
    pair('sm', sm),
    pair('temp', gpu.tempC === null ? DASH : `${Math.round(gpu.tempC)}C`),
    pair('power', power),
    pair('thr', gpu.throttle.length ? gpu.throttle.join(',') : DASH),
    pair('mem', mem),
  ].join(' ');
}

export function plainLine(view: WatchView, at: number): string {
  const out = [stamp(at)];
  for (const source of view.sources) {
    if (source.status === 'live') continue;
    out.push(pair('source', `${source.url}:${source.status}`));
    if (source.error) out.push(pair('source_error', source.error));
  }
  const job = view.job;
  if (!job) {
    out.push('job=-', 'status=waiting-for-a-job');
    return out.join(' ');
  }
  const b = job.breakdown;
  out.push(
    pair('job', job.id),
    pair('verdict', job.banner?.verdict ?? DASH),
    pair('cause', job.banner?.cause ?? DASH),
    pair('steps', String(job.steps)),
    pair('step_p50', job.stepP50 === null ? DASH : `${fmtMs(job.stepP50)}ms`),
    pair('step_p90', job.stepP90 === null ? DASH : `${fmtMs(job.stepP90)}ms`),
    pair('samples_s', fmtRate(job.samplesPerS)),
    pair('data', fmtShare(b?.data)),
    pair('h2d', fmtShare(b?.h2d)),
    pair('compute', fmtShare(b?.compute)),
    pair('other', fmtShare(b?.other)),
  );
  // Every limiter costing at least 5%, as limiter:share:level ("input:18%:moderate").
  const limiters = job.banner?.limiters ?? [];
  if (limiters.length) out.push(pair('limiters', limiters.map((l) => `${l.limiter}:${fmtShare(l.share)}:${l.level}`).join(',')));
  if (job.ranks.length > 1) {
    out.push(pair('ranks', job.ranks.map((r) => `${r.rank}:${r.verdict ?? DASH}`).join(',')));
    out.push(pair('straggler', job.straggler ? `rank${job.straggler.rank}` : DASH));
  }
  if (job.stop) {
    const stop = job.stop;
    out.push(pair('stop', stop.verdict), pair('stop_cause', stop.cause ?? DASH), pair('stopped_s', stop.seconds.toFixed(1)), pair('stop_step', String(stop.step)));
    if (stop.culprits.length) out.push(pair('stop_ranks', stop.culprits.join(',')));
    if (stop.where.length) out.push(pair('stop_where', framesText(stop.where, 1)));
    if (stop.waiting.length) out.push(pair('waiting', stop.waiting.join(',')));
    if (stop.waitsIn) out.push(pair('waits_in', stop.waitsIn));
  }
  if (job.ended) out.push(pair('ended', job.endReason ?? 'yes'));
  // Only while one holds (or held when the run ended), as the sidecar told it.
  if (job.regression) out.push(pair('regression', job.regression.changePct === null ? 'yes' : fmtPct(job.regression.changePct)));
  const multiNode = new Set(job.gpus.map((g) => g.node)).size > 1;
  for (const gpu of job.gpus) out.push(gpuPart(gpu, multiNode));
  // Only what was measured: a line without memory, ledger or neighbours reads as before.
  const { notes } = job;
  if (notes.mfu) out.push(pair('mfu', notes.mfu));
  if (notes.fix) out.push(pair('fix', notes.fix));
  if (notes.memory) out.push(pair('memory', notes.memory));
  if (notes.waste) out.push(pair('waste', notes.waste));
  for (const others of notes.gpuOthers) out.push(pair('gpu_others', others));
  for (const others of notes.cpuOthers) out.push(pair('cpu_others', others));
  return out.join(' ');
}

export function plainEvent(event: VerdictFrame): string {
  return [
    stamp(Date.parse(event.at)),
    'event=verdict',
    pair('job', event.job),
    pair('rank', event.rank === null ? DASH : String(event.rank)),
    pair('from', event.from ?? DASH),
    pair('to', event.to),
    pair('cause', event.cause ?? DASH),
  ].join(' ');
}

/** A regression that began, ended, or holds (told again after each snapshot): one line each, like a verdict change. */
export function plainRegression(event: RegressionFrame): string {
  return [
    stamp(Date.parse(event.at)),
    'event=regression',
    pair('job', event.job),
    pair('run', String(event.run)),
    pair('status', event.status),
    pair('change', fmtPct(event.change_pct)),
    pair('threshold', fmtPct(event.threshold_pct)),
    pair('since', stamp(Date.parse(event.started_at))),
    ...(event.ended_at === null ? [] : [pair('until', stamp(Date.parse(event.ended_at)))]),
    pair('reference', event.reference?.kind ?? DASH),
    pair('text', event.text),
  ].join(' ');
}

/** A frame refused by the viewer, printed for the first one a connection refuses. */
export function plainRefused(url: string, reason: string, at: number): string {
  return [stamp(at), 'event=refused', pair('source', url), pair('reason', reason)].join(' ');
}
