import { rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseExposition, valueOf } from './fixtures/metrics/exposition.js';
import { cleanupList } from './support/cleanup-list.js';
import { fakeNvidiaSmiEnv } from './support/fake-gpu.js';
import { startFakeProc } from './support/fake-proc.js';
import { hello, range, row, steps, TestHook } from './support/hook-client.js';
import { startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * GET /metrics of the real sidecar after a scripted two-rank job: the hooks are TestHooks with fixed
 * step records and process counters, the GPUs a stand-in nvidia-smi, the host a stand-in procfs.
 * Everything but a few clock-dependent values is then fixed, and the exposition is compared whole
 * with test/fixtures/metrics/sidecar.prom (`npx vitest run test/metrics-sidecar -u` rewrites it).
 */

const cleanups = cleanupList();

const JOB = 'golden';
/** Families of prom-client's default metrics: their series depend on the process and the platform. */
const isProcessFamily = (name: string) => /^stepscope_(process|nodejs)_/.test(name);
/** Values read off clocks: the GPU samples' times and the host's CPU use as the collector measured it. */
const VARYING = new Set([
  'stepscope_gpu_last_sample_timestamp_seconds',
  'stepscope_host_cpu_utilization_ratio',
  // The journal holds ticks and samples as they came: its size depends on timing.
  'stepscope_journal_bytes',
  // Lost share × seconds between the sidecar's real ticks: which ticks fall in the job depends on timing.
  'stepscope_wasted_gpu_seconds_total',
  // Seconds since each rank's last step, as the sidecar's clock reads it at the scrape.
  'stepscope_rank_seconds_since_step',
  // What each source's last reading took.
  'stepscope_collector_duration_seconds',
]);

/** The exposition without the default process metrics, and with clock-dependent values as `<varies>`. */
function normalise(text: string): string {
  const kept = text.split('\n').filter((line) => {
    const name = /^(?:# (?:HELP|TYPE) )?([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line)?.[1];
    return name === undefined || !isProcessFamily(name);
  });
  return kept
    .map((line) => {
      const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0];
      return name && VARYING.has(name) ? line.replace(/ \S+$/, ' <varies>') : line;
    })
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .replace(/^\n+/, '');
}

/** The training process's CPU grows by `cores` a second; throttled, it uses the whole quota. */
const processSample = (atMs: number, periods: number, throttled: number) => {
  const cores = throttled > 0 ? 2 : 1;
  return {
    at_ns: atMs * 1e6,
    cpu_main_s: 1 + (atMs / 1000) * cores,
    cpu_workers_s: 0,
    workers: 0,
    rss_bytes: 1 << 30,
    cgroup_nr_periods: periods,
    cgroup_nr_throttled: throttled,
    cgroup_throttled_usec: throttled * 10_000,
    cgroup_quota_cores: 2,
    cgroup_usage_usec: 1_000_000 + atMs * 1000 * cores,
  };
};

/** One rank: hello, two process samples (throttled in `throttled` of 10 CFS periods), 40 steps of 10 ms. */
async function rank(sidecar: RunningSidecar, rankNo: number, phases: { dataMs: number; computeMs: number }, throttled: number, dropped: number): Promise<TestHook> {
  const hook = await TestHook.connect(sidecar.ingestUrl);
  hook.send(hello({ job: JOB, rank: rankNo, local_rank: rankNo, world_size: 2, session: `session-${rankNo}` }));
  await hook.next((m) => m.type === 'welcome');
  hook.send({ v: 1, type: 'counters', source: 'process', samples: [processSample(50, 100, 0), processSample(150, 110, throttled)] });
  hook.send(steps(range(1, 40).map((seq) => row({ seq, durMs: 10, ...phases, h2dMs: 0.5, samples: 32 })), dropped));
  await hook.next((m) => m.type === 'ack' && m.ack === 40);
  cleanups.push(() => hook.close());
  return hook;
}

async function refused(sidecar: RunningSidecar, send: (hook: TestHook) => void): Promise<number> {
  const hook = await TestHook.connect(sidecar.ingestUrl);
  send(hook);
  return (await hook.closed).code;
}

describe('GET /metrics of a real sidecar', () => {
  it('matches the golden exposition after a scripted job, and parses as the Prometheus text format', async () => {
    const proc = startFakeProc({ cpuPct: 20 });
    cleanups.push(() => proc.stop());
    // GPU 1 at its power cap, at 91% of its maximum clock: SwPowerCap active, not throttling yet.
    const gpu = fakeNvidiaSmiEnv({ gpus: [{}, { 'clocks.sm': 1800, 'clocks_event_reasons.active': 0x4, 'power.draw': 699.5 }] });
    const out = tempDir();
    cleanups.push(() => rmSync(out, { recursive: true, force: true }));
    const startedS = Date.now() / 1000;
    const sidecar = await startSidecar(['--gpu-source', 'nvidia-smi', '--proc-root', proc.root, '--hold', '0', '--out', out], gpu.env);
    cleanups.push(() => sidecar.stop('SIGKILL'));

    // Rank 0 computes; rank 1 waits 3.5 ms of each 10 ms step for data, in a CPU-throttled container.
    const rank0 = await rank(sidecar, 0, { dataMs: 0.5, computeMs: 8.5 }, 0, 0);
    rank0.send(steps(range(1, 5).map((seq) => row({ seq, durMs: 10 }))));
    await waitFor(() => rank0.received.filter((m) => m.type === 'ack').length === 2);
    await rank(sidecar, 1, { dataMs: 3.5, computeMs: 5.5 }, 3, 7);
    expect(await refused(sidecar, (hook) => hook.sendRaw('hello', false))).toBe(1003);
    expect(await refused(sidecar, (hook) => hook.send(steps([row({ seq: 1 })])))).toBe(1008);

    await waitFor(async () => {
      const state = await sidecar.state();
      const [job] = state.jobs;
      const verdicts = job?.ranks.map((r: any) => [r.verdict?.verdict, r.verdict?.cause]);
      return (
        JSON.stringify(verdicts) === JSON.stringify([['compute-bound', null], ['input-bound', 'cgroup-throttled']]) &&
        job.straggler?.rank === 1 &&
        job.verdict?.verdict === 'input-bound' &&
        state.ingest.connections === 2 &&
        typeof state.counters.host?.cpu_pct === 'number' &&
        state.counters.gpu_health?.state === 'ok'
      );
    });

    const response = await fetch(`${sidecar.http}/metrics`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = await response.text();

    const families = parseExposition(text);
    expect(families.size).toBe(text.match(/^# TYPE /gm)!.length);
    for (const name of ['stepscope_process_cpu_seconds_total', 'stepscope_process_resident_memory_bytes', 'stepscope_nodejs_heap_size_used_bytes']) {
      expect(families.get(name)?.series.length, name).toBe(1);
    }

    // These need a history of earlier runs (or --baseline) to compare with, which this scenario does not have.
    const needHistory = new Set(['stepscope_job_slowdown_ratio', 'stepscope_job_regression']);
    // And this one a hook that gives a step's FLOPs (test/mfu.test.ts has one), which these hooks do not.
    needHistory.add('stepscope_rank_mfu_ratio');
    for (const family of [...families.values()].filter((f) => !isProcessFamily(f.name))) {
      expect(family.name).toMatch(/^stepscope_[a-z][a-z0-9_]*[a-z]$/);
      expect(family.help.length, family.name).toBeGreaterThan(10);
      expect(family.name.endsWith('_total'), `${family.name}: _total is for counters, and counters end in _total`).toBe(family.type === 'COUNTER');
      if (!needHistory.has(family.name)) expect(family.series.length + family.histograms.length, `${family.name} has series in this scenario`).toBeGreaterThan(0);
      for (const { labels } of [...family.series, ...family.histograms]) {
        for (const label of Object.keys(labels)) {
          expect(label).toMatch(/^[a-z][a-z0-9_]*$/);
          // Prometheus sets these on every target; a metric's own would be renamed to exported_*.
          expect(['job', 'instance']).not.toContain(label);
        }
      }
    }

    const histogram = families.get('stepscope_step_duration_seconds')!;
    expect(histogram.histograms.map((h) => h.labels)).toEqual([
      { training_job: JOB, rank: '0' },
      { training_job: JOB, rank: '1' },
    ]);
    for (const series of histogram.histograms) {
      expect(series.count).toBe(40);
      expect(series.sum).toBeCloseTo(0.4, 9);
      expect(series.buckets).toMatchObject({ '0.005': 0, '0.01': 40, '+Inf': 40 });
    }
    const value = (name: string, labels: Record<string, string> = {}) => valueOf(families, name, labels);
    expect(value('stepscope_phase_seconds_total', { rank: '1', phase: 'data' })).toBeCloseTo(0.14, 12);
    expect(value('stepscope_rank_verdict', { rank: '1', verdict: 'input-bound', cause: 'cgroup-throttled' })).toBe(1);
    for (const rankNo of ['0', '1']) {
      const states = families.get('stepscope_rank_verdict')!.series.filter((s) => s.labels.rank === rankNo);
      expect(states.filter((s) => s.value === 1), `rank ${rankNo}: one verdict in force`).toHaveLength(1);
      expect(states).toHaveLength(45);
    }
    expect(value('stepscope_job_straggler_excess_seconds', { rank: '1', reason: 'data' })).toBeCloseTo(0.0035, 6);
    expect(value('stepscope_gpu_throttle_reason_active_ratio', { gpu: '1', reason: 'SwPowerCap' })).toBe(1);
    expect(value('stepscope_host_cpu_utilization_ratio')).toBeCloseTo(0.2, 1);
    // A reading of this sidecar's, on the wall clock: since it started (how recent is load's).
    const lastSample = value('stepscope_gpu_last_sample_timestamp_seconds', { gpu: '0' });
    expect(lastSample).toBeGreaterThanOrEqual(startedS - 1);
    expect(lastSample).toBeLessThanOrEqual(Date.now() / 1000 + 1);

    await expect(normalise(text)).toMatchFileSnapshot('./fixtures/metrics/sidecar.prom');
  });
});
