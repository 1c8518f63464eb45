import type { SummaryGpu } from '../protocol/summary.js';
import { round } from '../model/round.js';
import { THROTTLE_REASON_NAMES, type ThrottleReasonName } from '../model/gpu.js';
import { promString, value, type PrometheusClient, type Vector } from './client.js';

/**
 * The GPUs a job's ranks ran on, over a range, from the sidecars' GPU families as Prometheus holds
 * them: each GPU found through stepscope_rank_gpu_info (so only the job's), its figures the range's
 * means and peaks, as a sidecar's summary gives them. `samples` counts the scrapes that read it.
 */

const GPU_LABELS = ['instance', 'pod', 'gpu', 'gpu_uuid', 'gpu_instance'];
const idOf = (m: Record<string, string>) => GPU_LABELS.map((l) => m[l] ?? '').join('\u0000');
const MIB = 1024 * 1024;

export async function fetchJobGpus(client: PrometheusClient, job: string, from: number, to: number): Promise<SummaryGpu[]> {
  const range = `${Math.max(1, Math.ceil(to - from))}s`;
  const by = GPU_LABELS.join(', ');
  const owners = await client.query(`max by (${by}, rank) (last_over_time(stepscope_rank_gpu_info{training_job=${promString(job)}}[${range}]))`, to);
  if (owners.length === 0) return [];
  const instances = [...new Set(owners.map((o) => o.metric.instance ?? ''))].map((i) => i.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|');
  const sel = (metric: string) => `${metric}{instance=~${promString(instances)}}`;
  const over = (fn: string, metric: string, extra = '') => client.query(`max by (${by}${extra}) (${fn}(${sel(metric)}[${range}]))`, to);
  const [util, clock, clockMax, temp, power, limit, used, total, throttle, samples, info] = await Promise.all([
    over('avg_over_time', 'stepscope_gpu_utilization_ratio'),
    over('avg_over_time', 'stepscope_gpu_sm_clock_hertz'),
    over('max_over_time', 'stepscope_gpu_sm_clock_max_hertz'),
    over('max_over_time', 'stepscope_gpu_temperature_celsius'),
    over('avg_over_time', 'stepscope_gpu_power_watts'),
    over('last_over_time', 'stepscope_gpu_power_limit_watts'),
    over('max_over_time', 'stepscope_gpu_memory_used_bytes'),
    over('last_over_time', 'stepscope_gpu_memory_total_bytes'),
    over('avg_over_time', 'stepscope_gpu_throttle_reason_active', ', reason'),
    over('count_over_time', 'stepscope_gpu_sm_clock_hertz'),
    over('last_over_time', 'stepscope_gpu_info', ', gpu_name'),
  ]);
  const byId = (result: Vector) => new Map(result.map((s) => [idOf(s.metric), value(s.value)]));
  const [u, c, cm, t, p, pl, mu, mt, n] = [byId(util), byId(clock), byId(clockMax), byId(temp), byId(power), byId(limit), byId(used), byId(total), byId(samples)] as const;
  const gpus = new Map<string, { metric: Record<string, string>; ranks: number[] }>();
  for (const o of owners) {
    const id = idOf(o.metric);
    const gpu = gpus.get(id) ?? { metric: o.metric, ranks: [] };
    gpu.ranks.push(Number(o.metric.rank));
    gpus.set(id, gpu);
  }
  const num = (map: Map<string, number>, id: string) => (map.has(id) && Number.isFinite(map.get(id)) ? map.get(id)! : null);
  return [...gpus.entries()].map(([id, { metric, ranks }]): SummaryGpu => {
    const share: Partial<Record<ThrottleReasonName, number>> = {};
    for (const s of throttle) {
      const reason = s.metric.reason as ThrottleReasonName;
      if (idOf(s.metric) === id && THROTTLE_REASON_NAMES.includes(reason) && value(s.value) > 0) share[reason] = round(value(s.value), 3);
    }
    const clockNow = num(c, id);
    const clockTop = num(cm, id);
    const watts = num(p, id);
    const cap = num(pl, id);
    return {
      index: Number(metric.gpu),
      uuid: metric.gpu_uuid || null,
      name: info.find((s) => idOf(s.metric) === id)?.metric.gpu_name ?? null,
      ranks: ranks.sort((a, b) => a - b),
      samples: num(n, id) ?? 0,
      util_mean: num(u, id) === null ? null : round(num(u, id)! * 100, 1),
      sm_clock_frac_mean: clockNow !== null && clockTop ? round(clockNow / clockTop, 3) : null,
      sm_clock_max_mhz: clockTop === null ? null : Math.round(clockTop / 1e6),
      throttle_share: share,
      temp_c_max: num(t, id),
      power_frac_mean: watts !== null && cap ? round(watts / cap, 3) : null,
      power_limit_w: cap,
      mem_peak_mib: num(mu, id) === null ? null : Math.round(num(mu, id)! / MIB),
      mem_total_mib: num(mt, id) === null ? null : Math.round(num(mt, id)! / MIB),
    };
  }).sort((a, b) => Math.min(...a.ranks) - Math.min(...b.ranks));
}
