import { spawnSync } from 'node:child_process';
import { PassThrough } from 'node:stream';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { fleetWaste, type FleetJob } from '../src/prometheus/fleet.js';
import { PrometheusClient } from '../src/prometheus/client.js';
import { reportFromPrometheus } from '../src/report-prometheus.js';
import { backfill, type Backfilled } from './support/backfill.js';
import { freePort } from './support/listening.js';
import { PROMETHEUS, promQuery, startPrometheus, WITHOUT_PROMETHEUS, type PrometheusServer } from './support/prometheus-server.js';
import { PROMTOOL } from './support/promql.js';
import { CLI, ROOT } from './support/sidecar.js';
import { renderSummary } from '../src/outputs/summary-render.js';
import { reportCharts } from '../src/outputs/report-html-charts.js';
import { SummarySchema } from '../src/protocol/summary.js';
import { parseInput } from '../src/protocol/parse.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * `stepscope top` and `report --prometheus` on a real Prometheus server holding an hour of a known
 * past (a TSDB made by promtool beforehand, nothing scraped): the fleet ranked by the GPU time each
 * job wasted, and a job's summary across two pods with a straggler and a rank missing. The live
 * version, scraping real sidecars of a real job, is test/prometheus-e2e.test.ts.
 */

const why = !PROMETHEUS ? WITHOUT_PROMETHEUS : !PROMTOOL ? 'promtool is not on PATH' : '';
const tempDir = useTempDirs('stepscope-fleet-');
const HOUR = 3600;
// Two hours back, on the hour: inside what a fresh Prometheus serves, before its head block.
const T0 = Math.floor(Date.now() / 1000 / HOUR) * HOUR - 2 * HOUR;
const times = Array.from({ length: HOUR / 15 + 1 }, (_, i) => T0 + i * 15);
const since = (t: number) => t - T0;

/** A counter that grows by `perHour` an hour from 0 at T0. */
const growing = (name: string, labels: Record<string, string>, perHour: number): Backfilled => ({ name, labels, at: (t) => (since(t) * perHour) / HOUR });
const flat = (name: string, labels: Record<string, string>, value: number): Backfilled => ({ name, labels, at: () => value });

function fleetSeries(): Backfilled[] {
  const series: Backfilled[] = [];
  const ranks = (job: string, pods: Array<[string, number[]]>) => {
    for (const [pod, list] of pods) for (const rank of list) series.push(growing('stepscope_step_duration_seconds_sum', { instance: pod, job: 'stepscope', training_job: job, rank: String(rank) }, HOUR));
  };
  // a: 2 GPUs, 1.2 GPU-hours lost to input. b: 4 GPUs over two pods, 0.8 to throttling and 0.7 to host work. c: none.
  ranks('a', [['p1', [0, 1]]]);
  series.push(growing('stepscope_wasted_gpu_seconds_total', { instance: 'p1', job: 'stepscope', training_job: 'a', cause: 'input' }, 1.2 * HOUR));
  ranks('b', [['p2', [0, 1]], ['p3', [2, 3]]]);
  series.push(growing('stepscope_wasted_gpu_seconds_total', { instance: 'p2', job: 'stepscope', training_job: 'b', cause: 'throttle' }, 0.8 * HOUR));
  series.push(growing('stepscope_wasted_gpu_seconds_total', { instance: 'p2', job: 'stepscope', training_job: 'b', cause: 'host' }, 0.35 * HOUR));
  series.push(growing('stepscope_wasted_gpu_seconds_total', { instance: 'p3', job: 'stepscope', training_job: 'b', cause: 'host' }, 0.35 * HOUR));
  ranks('c', [['p6', [0]]]);
  series.push(flat('stepscope_wasted_gpu_seconds_total', { instance: 'p6', job: 'stepscope', training_job: 'c', cause: 'input' }, 0));
  return series;
}

/** `train`: world size 5, ranks 0 and 1 on pod p4, 2 and 3 on p5, rank 4 never reported; 0.5 s steps, rank 3 waiting 0.25 s of each for data, the others 0.05 s. */
function trainSeries(): Backfilled[] {
  const series: Backfilled[] = [flat('stepscope_job_world_size', { instance: 'p4', job: 'stepscope', training_job: 'train' }, 5)];
  for (const [pod, list] of [['p4', [0, 1]], ['p5', [2, 3]]] as const) {
    for (const rank of list) {
      const labels = { instance: pod, job: 'stepscope', training_job: 'train', rank: String(rank) };
      const data = rank === 3 ? 0.25 : 0.05;
      series.push(growing('stepscope_step_duration_seconds_count', labels, 2 * HOUR));
      series.push(growing('stepscope_step_duration_seconds_sum', labels, HOUR));
      for (const le of ['0.5', '+Inf']) series.push(growing('stepscope_step_duration_seconds_bucket', { ...labels, le }, 2 * HOUR));
      series.push(growing('stepscope_phase_seconds_total', { ...labels, phase: 'data' }, 2 * data * HOUR));
      series.push(growing('stepscope_phase_seconds_total', { ...labels, phase: 'compute' }, 2 * (0.5 - data) * HOUR));
      for (const phase of ['h2d', 'other']) series.push(flat('stepscope_phase_seconds_total', { ...labels, phase }, 0));
      const [verdict, cause, code] = rank === 3 ? ['input-bound', 'few-workers', 1] : ['communication-bound', 'slow-rank', 7];
      series.push(flat('stepscope_rank_verdict', { ...labels, verdict, cause }, 1));
      series.push(flat('stepscope_rank_verdict_code', labels, code));
    }
  }
  series.push(growing('stepscope_wasted_gpu_seconds_total', { instance: 'p5', job: 'stepscope', training_job: 'train', cause: 'input' }, 0.4 * HOUR));
  // Each rank on its pod's GPU of its local rank; p5's GPU 1 (rank 3's) thermally throttled half the time, at 1,500 of 1,980 MHz then.
  for (const [pod, list] of [['p4', [0, 1]], ['p5', [2, 3]]] as const) {
    for (const rank of list) {
      const gpu = { instance: pod, job: 'stepscope', gpu: String(rank % 2), gpu_uuid: `GPU-${pod}-${rank % 2}`, gpu_instance: '' };
      const hot = rank === 3;
      series.push(flat('stepscope_rank_gpu_info', { ...gpu, training_job: 'train', rank: String(rank), matched_by: 'local-rank' }, 1));
      series.push(flat('stepscope_gpu_info', { ...gpu, gpu_name: 'NVIDIA H100 80GB HBM3' }, 1));
      series.push(flat('stepscope_gpu_utilization_ratio', gpu, 0.9));
      series.push({ name: 'stepscope_gpu_sm_clock_hertz', labels: gpu, at: (t) => (hot && (since(t) / 15) % 2 === 1 ? 1.5e9 : 1.98e9) });
      series.push(flat('stepscope_gpu_sm_clock_max_hertz', gpu, 1.98e9));
      series.push(flat('stepscope_gpu_temperature_celsius', gpu, hot ? 88 : 70));
      series.push(flat('stepscope_gpu_power_watts', gpu, 350));
      series.push(flat('stepscope_gpu_power_limit_watts', gpu, 700));
      series.push(flat('stepscope_gpu_memory_used_bytes', gpu, 40 * 1024 ** 3));
      series.push(flat('stepscope_gpu_memory_total_bytes', gpu, 80 * 1024 ** 3));
      series.push({ name: 'stepscope_gpu_throttle_reason_active', labels: { ...gpu, reason: 'HwThermalSlowdown' }, at: (t) => (hot && (since(t) / 15) % 2 === 1 ? 1 : 0) });
    }
  }
  series.push(flat('up', { instance: 'p4', job: 'stepscope' }, 1));
  // p5's sidecar missed a scrape.
  series.push({ name: 'up', labels: { instance: 'p5', job: 'stepscope' }, at: (t) => (since(t) === 1800 ? 0 : 1) });
  return series;
}

const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });

describe.skipIf(!!why)(`the fleet and a job across pods, from a real Prometheus${why ? ` (skipped: ${why})` : ''}`, () => {
  let server: PrometheusServer;
  beforeAll(async () => {
    const dir = tempDir();
    const storage = backfill(dir, [...fleetSeries(), ...trainSeries()], times);
    server = await startPrometheus({ dir, storage, rules: false });
  }, 90_000);
  afterAll(() => server?.stop());

  it('top ranks jobs by the GPU time they wasted, all causes, with money and links', async () => {
    const jobs = await fleetWaste(new PrometheusClient(server.url), { from: T0, to: T0 + HOUR, gpuHourPrice: 2.5, grafana: 'http://grafana:3000/' });
    const pick = (j: FleetJob) => [j.job, j.wasted_gpu_hours, j.share, j.cost, j.by_cause.map((c) => [c.cause, c.gpu_hours])];
    // b wastes more in all (1.5 GPU-hours) though a's one cause (1.2) is bigger than any of b's; c wastes none.
    expect(jobs.filter((j) => j.job !== 'train').map(pick)).toEqual([
      ['b', 1.5, 0.375, 3.75, [['throttle', 0.8], ['host', 0.7]]],
      ['a', 1.2, 0.6, 3, [['input', 1.2]]],
    ]);
    expect(jobs.find((j) => j.job === 'a')!.link).toBe(`http://grafana:3000/d/stepscope-job/?var-training_job=a&from=${T0 * 1000}&to=${(T0 + HOUR) * 1000}`);
    // Half the range: half the waste.
    const half = await fleetWaste(new PrometheusClient(server.url), { from: T0 + HOUR / 2, to: T0 + HOUR, gpuHourPrice: null });
    expect(half.filter((j) => j.job !== 'train').map((j) => [j.job, j.wasted_gpu_hours, j.cost])).toEqual([
      ['b', 0.75, null],
      ['a', 0.6, null],
    ]);
    const printed = cli('top', '--prometheus', server.url, '--from', String(T0), '--to', String(T0 + HOUR), '--gpu-hour-price', '2.5');
    expect(printed.status, printed.stderr).toBe(0);
    const lines = printed.stdout.split('\n');
    expect(lines[2]).toMatch(/^1\s+b\s+1\.5 GPU-h\s+38%\s+3\.75\s+throttle 0\.8 GPU-h, host 0\.7 GPU-h$/);
    expect(lines[3]).toMatch(/^2\s+a\s+1\.2 GPU-h\s+60%\s+3\.00\s+input 1\.2 GPU-h$/);
  });

  it('the fleet dashboard ranks them alike: each of its queries, run on the same Prometheus', async () => {
    const dashboard = JSON.parse(readFileSync(path.join(ROOT, 'deploy', 'grafana', 'stepscope-fleet.json'), 'utf8')) as { uid: string; panels: Array<{ title: string; targets: Array<{ expr: string; refId: string }> }> };
    expect(dashboard.uid).toBe('stepscope-fleet');
    const at = T0 + HOUR;
    const run = (expr: string) => promQuery(server.url, expr.replaceAll('$__range', '3600s').replaceAll('$__rate_interval', '60s').replaceAll('$gpu_hour_price', '2.5'), at);
    const byJob = async (expr: string) => Object.fromEntries((await run(expr)).filter((r) => r.metric.training_job !== 'train').map((r) => [r.metric.training_job, Math.round(Number(r.value[1]) * 100) / 100]));
    const [table, causes, now] = dashboard.panels;
    const [wasted, share, cost] = table!.targets.map((t) => t.expr);
    expect((await run(wasted!)).filter((r) => r.metric.training_job !== 'train').map((r) => r.metric.training_job)).toEqual(['b', 'a', 'c']);
    expect(await byJob(wasted!)).toEqual({ a: 1.2, b: 1.5, c: 0 });
    expect(await byJob(share!)).toEqual({ a: 0.6, b: 0.38, c: 0 });
    expect(await byJob(cost!)).toEqual({ a: 3, b: 3.75, c: 0 });
    expect((await run(causes!.targets[0]!.expr)).filter((r) => r.metric.training_job === 'b').map((r) => r.metric.cause).sort()).toEqual(['host', 'throttle']);
    expect((await run(now!.targets[0]!.expr)).length).toBeGreaterThan(0);
    // Every link goes to the job dashboard.
    const job = JSON.parse(readFileSync(path.join(ROOT, 'deploy', 'grafana', 'stepscope.json'), 'utf8')) as { uid: string };
    expect(JSON.stringify(dashboard).match(/\/d\/([\w-]+)\//g)!.every((link) => link === `/d/${job.uid}/`)).toBe(true);
  });

  it('report --prometheus makes the job-wide summary: the straggler across pods, its verdict, the missing rank and pod', () => {
    const run = cli('report', '--prometheus', server.url, '--job', 'train', '--from', String(T0), '--to', String(T0 + HOUR), '--format', 'json');
    expect(run.status, run.stderr).toBe(0);
    const summary = JSON.parse(run.stdout) as Summary;
    expect(summary.straggler).toMatchObject({ rank: 3, reason: 'data', excess_ms: 200 });
    // The straggler's verdict is the job's, though three ranks of four hold another.
    expect([summary.verdict, summary.cause]).toEqual(['input-bound', 'few-workers']);
    expect(summary.ranks.map((r) => [r.rank, r.host, r.verdict, r.straggler])).toEqual([
      [0, 'p4', 'communication-bound', false],
      [1, 'p4', 'communication-bound', false],
      [2, 'p5', 'communication-bound', false],
      [3, 'p5', 'input-bound', true],
    ]);
    expect(summary).toMatchObject({ steps: 4 * 2 * HOUR, world_size: 5, step_ms: { mean: 500 }, breakdown: { data: 0.2, compute: 0.8 } });
    // The GPUs its ranks ran on, rank 3's throttled half the time.
    expect(summary.gpus.map((g) => [g.index, g.ranks, g.name, g.util_mean, g.temp_c_max, g.power_frac_mean, g.mem_peak_mib, g.mem_total_mib])).toEqual([
      [0, [0], 'NVIDIA H100 80GB HBM3', 90, 70, 0.5, 40960, 81920],
      [1, [1], 'NVIDIA H100 80GB HBM3', 90, 70, 0.5, 40960, 81920],
      [0, [2], 'NVIDIA H100 80GB HBM3', 90, 70, 0.5, 40960, 81920],
      [1, [3], 'NVIDIA H100 80GB HBM3', 90, 88, 0.5, 40960, 81920],
    ]);
    expect(summary.gpus[3]).toMatchObject({ sm_clock_max_mhz: 1980, throttle_share: { HwThermalSlowdown: expect.closeTo(0.5, 1) } });
    expect(summary.gpus[3]!.sm_clock_frac_mean).toBeCloseTo((1.98 + 1.5) / 2 / 1.98, 1);
    expect(summary.gpus[0]!.throttle_share).toEqual({});
    expect(summary.waste).toMatchObject({ lost_gpu_seconds: 0.4 * HOUR, gpu_seconds: 4 * HOUR, lost_share: 0.1 });
    expect(summary.job_wide).toEqual({
      from: 'prometheus',
      pods: [
        { pod: 'p4', ranks: [0, 1] },
        { pod: 'p5', ranks: [2, 3] },
      ],
      missing_ranks: [4],
      missing_pods: [{ pod: 'p5', why: 'Prometheus could not scrape its sidecar for part of the range' }],
    });
    // The run over time, for the report's charts: 500 ms steps, 100 ms of them data (its mean over the ranks' steps).
    expect(summary.series).toMatchObject({ slice_s: 12, ranks_total: 4 });
    expect(summary.series!.ranks.map((r) => r.rank)).toEqual([0, 1, 2, 3]);
    const late = summary.series!.step_ms.length - 10;
    expect([summary.series!.step_ms[late], summary.series!.phase_ms.data[late], summary.series!.steps[late]]).toEqual([500, 100, 4 * 2 * 12]);
    expect(reportCharts(summary).length).toBeGreaterThan(0);
    // It reads back as any summary file does (stepscope report, compare, --baseline).
    expect(parseInput(SummarySchema, summary, 'summary')).toEqual(summary);
    expect(renderSummary(summary)).toContain('Missing: rank 4 of 5; pod p5 (Prometheus could not scrape its sidecar for part of the range).');
  });

  it('says plainly what is wrong: a bad address, an empty range, a job it never saw', async () => {
    const port = await freePort();
    const refused = cli('report', '--prometheus', `http://127.0.0.1:${port}`, '--job', 'train');
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain(`cannot reach Prometheus at http://127.0.0.1:${port}: ECONNREFUSED`);
    const report = (prometheus: string, job: string, from: number, to: number) => reportFromPrometheus({ prometheus, job, from, to, format: 'json' }, new PassThrough());
    await expect(report('not a url', 'train', T0, T0 + HOUR)).rejects.toThrow('not a URL');
    await expect(report(server.url, 'train', T0 + HOUR, T0)).rejects.toThrow('an empty range');
    await expect(fleetWaste(new PrometheusClient(server.url), { from: T0 + HOUR, to: T0, gpuHourPrice: null })).rejects.toThrow('an empty range');
    await expect(report(server.url, 'nobody', T0, T0 + HOUR)).rejects.toThrow(/has no steps of job "nobody" .*; the jobs it has then: train/);
    await expect(report(server.url, 'train', T0 - 3 * HOUR, T0 - 2 * HOUR)).rejects.toThrow('it has no stepscope job then');
    // Something that answers, but not as Prometheus does.
    await expect(report(`${server.url}/-/healthy#`, 'train', T0, T0 + HOUR)).rejects.toThrow('with something other than JSON: is it Prometheus');
  });
});
