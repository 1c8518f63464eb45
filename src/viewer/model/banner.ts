import { alsoCosting } from '../../model/costs.js';
import type { Cause, Verdict } from '../../model/verdict.js';
import type { Evidence, LimiterCost, VerdictState } from '../../protocol/state.js';
import { fmtNum, fmtPct, fmtShare } from '../format.js';

/** The job's verdict as the banner shows it: what, since when, why in words and figures, what to do. Pure. */

export interface Banner {
  verdict: Verdict;
  cause: Cause;
  since: number;
  heldS: number;
  rule: string;
  /** The evidence's figures in one line. */
  figures: string;
  /** "Also costing time: loading 18% (moderate).": the limiters beside the verdict's own; null where none. */
  costs: string | null;
  /** Every limiter costing at least 5%, the verdict's own among them, most costly first. */
  limiters: LimiterCost[];
  recommendation: string | null;
  /** All of them, most useful first (the first is `recommendation`). */
  recommendations: string[];
  pending: { verdict: Verdict; cause: Cause; forS: number } | null;
  /** On several sidecars: the rank whose verdict is the job's. */
  rank: number | null;
}

function figuresLine(evidence: Evidence): string {
  const f = evidence.figures;
  const num = (key: string) => (typeof f[key] === 'number' ? (f[key] as number) : null);
  const parts: string[] = [];
  const shares = (['data', 'h2d', 'compute', 'other'] as const).filter((p) => num(`${p}_share`) !== null);
  if (shares.length) parts.push(shares.map((p) => `${p} ${fmtShare(num(`${p}_share`))}`).join(' '));
  if (num('gpu_idle_share') !== null) parts.push(`GPU idle between steps ${fmtShare(num('gpu_idle_share'))}`);
  if (num('gpu_util_mean') !== null) parts.push(`GPU ${fmtPct(num('gpu_util_mean'))} busy`);
  if (num('sm_clock_frac') !== null) parts.push(`SM clock ${fmtShare(num('sm_clock_frac'))} of max`);
  if (num('temp_c_max') !== null) parts.push(`${fmtNum(num('temp_c_max'))} °C`);
  if (num('power_frac') !== null) parts.push(`power ${fmtShare(num('power_frac'))} of limit`);
  if (num('host_cpu_pct') !== null) parts.push(`host CPU ${fmtPct(num('host_cpu_pct'))}`);
  if (num('host_iowait_pct') !== null && num('host_iowait_pct')! >= 1) parts.push(`iowait ${fmtPct(num('host_iowait_pct'))}`);
  if (num('num_workers') !== null) parts.push(`num_workers ${num('num_workers')}`);
  if (num('step_ms_p50') !== null) parts.push(`step p50 ${num('step_ms_p50')!.toFixed(1)} ms`);
  return parts.join(' · ');
}

export function banner(state: VerdictState, at: number, rank: number | null): Banner {
  const since = Date.parse(state.since);
  return {
    verdict: state.verdict,
    cause: state.cause,
    since,
    heldS: Math.max(0, (at - since) / 1000),
    rule: state.evidence.rule,
    figures: figuresLine(state.evidence),
    // A sidecar from before limiters were listed sends none.
    costs: alsoCosting(state.limiters ?? [], state.verdict),
    limiters: state.limiters ?? [],
    recommendation: state.recommendations[0]?.text ?? null,
    recommendations: state.recommendations.map((r) => r.text),
    pending: state.pending ? { verdict: state.pending.verdict, cause: state.pending.cause, forS: Math.max(0, (at - Date.parse(state.pending.since)) / 1000) } : null,
    rank,
  };
}
