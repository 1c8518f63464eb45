import { describe, expect, it } from 'vitest';
import { emptyGpuSample } from '../src/counters/types.js';
import { toRow } from '../src/engine/entries.js';
import { verdictStateSet } from '../src/outputs/metrics-verdicts.js';
import type { Hello, StepRecord } from '../src/protocol/messages.js';
import { parseExposition, valueOf } from './fixtures/metrics/exposition.js';
import { cleanupList } from './support/cleanup-list.js';
import { rankHello } from './support/entries.js';
import { inProcess, SOURCES_NONE } from './support/in-process.js';
import { buildServer } from '../src/http-server.js';
import { createLogger } from '../src/log/log.js';

/** /metrics and /readyz of sidecars built in this process around a store filled by hand. */

const T0 = 1_800_000_000_000;

const hello = (rank: number, job = 'job-a'): Hello => rankHello(job, rank, T0);

/** `count` steps of 20 ms, 5 of them waiting for data, ending every 20 ms from T0. */
const records = (count: number): StepRecord[] =>
  Array.from({ length: count }, (_, i) => ({
    seq: i + 1,
    step: i,
    endNs: (i + 1) * 20e6,
    durNs: 20e6,
    dataNs: 5e6,
    h2dNs: 1e6,
    computeNs: 12e6,
    samples: 8,
    gpuH2dNs: null,
    gpuComputeNs: null,
    gpuIdleNs: null, commNs: null, commWaitNs: null, commBytes: null, evalNs: null,
  }));

const cleanups = cleanupList();

async function sidecar() {
  const s = await inProcess({ at: T0 });
  cleanups.push(() => s.app.close());
  return {
    ...s,
    async metrics() {
      await s.tick();
      const response = await s.app.inject({ url: '/metrics' });
      expect(response.statusCode).toBe(200);
      return parseExposition(response.body);
    },
  };
}

describe('/metrics from a store filled in process', () => {
  it('feeds the step histogram from a journal replay as from live ingest, so that it agrees with the phase counters', async () => {
    const replayed = await sidecar();
    replayed.engine.apply({ t: 'hello', at: T0, hello: hello(0) });
    replayed.engine.apply({ t: 'steps', at: T0 + 1000, session: 'job-a-0', dropped: 3, rows: records(30).map(toRow) });
    const live = await sidecar();
    await live.ingest.hello(hello(0));
    await live.ingest.steps('job-a-0', { type: 'steps', records: records(30), dropped: 3 });

    const [fromReplay, fromLive] = [await replayed.metrics(), await live.metrics()];
    for (const families of [fromReplay, fromLive]) {
      const [series] = families.get('stepscope_step_duration_seconds')!.histograms;
      expect(series).toMatchObject({ labels: { training_job: 'job-a', rank: '0' }, count: 30 });
      expect(series!.buckets).toMatchObject({ '0.01': 0, '0.02': 30 });
      const phases = families.get('stepscope_phase_seconds_total')!.series.reduce((sum, s) => sum + s.value, 0);
      expect(series!.sum).toBeCloseTo(phases, 9);
      expect(valueOf(families, 'stepscope_phase_seconds_total', { phase: 'data' })).toBeCloseTo(0.15, 12);
      expect(valueOf(families, 'stepscope_hook_dropped_records_total')).toBe(3);
      expect(valueOf(families, 'stepscope_samples_total')).toBe(240);
    }
    // Live ingest counts what arrived over websockets since the process started; a replay is not that.
    expect(valueOf(fromLive, 'stepscope_ingest_records_total')).toBe(30);
    expect(valueOf(fromReplay, 'stepscope_ingest_records_total')).toBe(0);
  });

  it("keeps an ended job's counters but drops its verdicts, straggler and GPU match", async () => {
    const s = await sidecar();
    for (const rank of [0, 1]) {
      await s.ingest.hello(hello(rank));
      await s.ingest.steps(`job-a-${rank}`, { type: 'steps', records: records(30), dropped: 0 });
    }
    await s.ingest.gpuSamples([0, 1].map((index) => ({ ...emptyGpuSample(T0 + 900, index), uuid: `GPU-${index}`, utilGpu: 90 })));
    s.setTime(T0 + 1000);
    const running = await s.metrics();
    expect(valueOf(running, 'stepscope_rank_verdict_code', { rank: '1' })).toBe(1);
    expect(valueOf(running, 'stepscope_rank_verdict', { rank: '1', verdict: 'input-bound', cause: 'unknown' })).toBe(1);
    expect(valueOf(running, 'stepscope_job_verdict_code')).toBe(1);
    expect(running.get('stepscope_rank_straggler')!.series).toHaveLength(2);
    expect(running.get('stepscope_rank_gpu_info')!.series.map((series) => series.labels.gpu_uuid)).toEqual(['GPU-0', 'GPU-1']);
    // 25% of each step waiting for data (its verdict), 10% outside the phases and 5% copying beside it.
    expect(valueOf(running, 'stepscope_rank_limiter_share', { rank: '1', limiter: 'input' })).toBeCloseTo(0.25, 4);
    expect(valueOf(running, 'stepscope_rank_limiter_share', { rank: '1', limiter: 'host' })).toBeCloseTo(0.1, 4);
    expect(running.get('stepscope_rank_limiter_share')!.series.filter((series) => series.labels.rank === '1').map((series) => series.labels.limiter)).toEqual(['input', 'host', 'transfer']);
    const levels = Object.fromEntries(running.get('stepscope_rank_limiter_level')!.series.filter((series) => series.labels.rank === '1').map((series) => [series.labels.limiter, series.value]));
    expect(levels).toEqual({ input: 2, transfer: 1, host: 1, communication: 0, throttle: 0 });
    expect(valueOf(running, 'stepscope_job_limiter_level', { limiter: 'input' })).toBe(2);

    s.setTime(T0 + 2000);
    await s.record({ t: 'stop', at: T0 + 2000 });
    const ended = await s.metrics();
    for (const name of ['stepscope_rank_verdict', 'stepscope_rank_verdict_code', 'stepscope_job_verdict', 'stepscope_job_verdict_code', 'stepscope_rank_straggler', 'stepscope_rank_gpu_info', 'stepscope_rank_limiter_share', 'stepscope_rank_limiter_level', 'stepscope_job_limiter_level']) {
      expect(ended.get(name)!.series, name).toEqual([]);
    }
    expect(ended.get('stepscope_phase_seconds_total')!.series).toHaveLength(8);
    expect(ended.get('stepscope_step_duration_seconds')!.histograms.map((h) => h.count)).toEqual([30, 30]);
  });

  it('leaves out what a GPU does not report, rather than reporting zero', async () => {
    const s = await sidecar();
    const mig = { ...emptyGpuSample(T0, 0), uuid: 'MIG-7a3c', name: 'NVIDIA A30 MIG 2g.12gb', memUsedMiB: 1024, memTotalMiB: 12032, smClockMHz: 1440 };
    await s.ingest.gpuSamples([mig]);
    const families = await s.metrics();
    expect(families.get('stepscope_gpu_info')!.series).toEqual([{ labels: { gpu: '0', gpu_uuid: 'MIG-7a3c', gpu_instance: '', gpu_name: 'NVIDIA A30 MIG 2g.12gb' }, value: 1 }]);
    expect(valueOf(families, 'stepscope_gpu_memory_used_bytes')).toBe(1024 * 1024 * 1024);
    expect(valueOf(families, 'stepscope_gpu_sm_clock_hertz')).toBe(1.44e9);
    for (const name of ['stepscope_gpu_utilization_ratio', 'stepscope_gpu_sm_clock_max_hertz', 'stepscope_gpu_power_watts', 'stepscope_gpu_throttle_reason_active', 'stepscope_gpu_throttle_reason_active_ratio']) {
      expect(families.get(name)!.series, name).toEqual([]);
    }
    // No collector runs for --gpu-source none, and there is no host collector here.
    expect(families.get('stepscope_collector_up')!.series).toEqual([]);
    expect(families.get('stepscope_host_cpu_utilization_ratio')!.series).toEqual([]);
    expect(valueOf(families, 'stepscope_gpu_source_info', { source: 'none' })).toBe(1);
  });

  it('gives each sidecar in a process a registry of its own', async () => {
    const [a, b] = [await sidecar(), await sidecar()];
    await a.ingest.hello(hello(0, 'job-a'));
    await a.ingest.steps('job-a-0', { type: 'steps', records: records(5), dropped: 0 });
    await b.ingest.hello(hello(0, 'job-b'));
    await b.ingest.steps('job-b-0', { type: 'steps', records: records(7), dropped: 0 });
    const [fromA, fromB] = [await a.metrics(), await b.metrics()];
    expect(fromA.get('stepscope_step_duration_seconds')!.histograms).toMatchObject([{ labels: { training_job: 'job-a' }, count: 5 }]);
    expect(fromB.get('stepscope_step_duration_seconds')!.histograms).toMatchObject([{ labels: { training_job: 'job-b' }, count: 7 }]);
    expect(valueOf(fromA, 'stepscope_process_cpu_seconds_total')).toBeGreaterThan(0);
  });
});

describe('the verdict state set', () => {
  it('has one series per verdict and cause, exactly one of them 1', () => {
    const series = verdictStateSet({ verdict: 'throttled', cause: 'power' });
    expect(series).toHaveLength(45);
    expect(series.filter((s) => s.value === 1)).toEqual([{ verdict: 'throttled', cause: 'power', value: 1 }]);
    expect(verdictStateSet(null).every((s) => s.value === 0)).toBe(true);
  });

  it('adds the pair in force when it is not one of the listed ones', () => {
    // A verdict kept through a window without steps carries no cause.
    const series = verdictStateSet({ verdict: 'input-bound', cause: null });
    expect(series).toHaveLength(46);
    expect(series.filter((s) => s.value === 1)).toEqual([{ verdict: 'input-bound', cause: '', value: 1 }]);
  });
});

describe('GET /readyz', () => {
  it('answers 503 until the sidecar listens, 200 while it is ready, 503 once it is not', async () => {
    let ready = true;
    // The sidecar's parts behind an app whose own readiness the test sets (the Sidecar's is `stopping`).
    const s = await sidecar();
    const app = await buildServer({
      ingest: s.ingest,
      log: createLogger('silent'),
      snapshot: () => s.engine.snapshot(),
      fresh: async () => s.engine.snapshot(),
      onSnapshot: () => () => undefined,
      journal: () => s.recorder.health(),
      maxFrameBytes: 1 << 20,
      windowMs: 4_000,
      sources: () => SOURCES_NONE,
      ready: () => ({ ready, reason: ready ? null : 'journal write failed: ENOSPC' }),
    });
    cleanups.push(() => app.close());
    expect((await app.inject({ url: '/readyz' })).statusCode).toBe(503);
    expect((await app.inject({ url: '/healthz' })).statusCode).toBe(200);
    await app.listen({ host: '127.0.0.1', port: 0 });
    const response = await app.inject({ url: '/readyz' });
    expect([response.statusCode, response.json()]).toEqual([200, { status: 'ready' }]);
    ready = false;
    const notReady = await app.inject({ url: '/readyz' });
    expect([notReady.statusCode, notReady.json()]).toEqual([503, { status: 'not ready', reason: 'journal write failed: ENOSPC' }]);
    expect((await app.inject({ url: '/healthz' })).statusCode).toBe(200);
  });
});
