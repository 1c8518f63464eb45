import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { VERDICT_CODES } from '../src/outputs/metrics-verdicts.js';
import { cleanupList } from './support/cleanup-list.js';
import { freePort } from './support/listening.js';
import { promQuery, promRange, PROMETHEUS, startPrometheus, WITHOUT_PROMETHEUS } from './support/prometheus-server.js';
import { findPython } from './support/python.js';
import { fixture, runPython } from './support/run-python.js';
import { CLI, startSidecar, tempDir, waitFor, type RunningSidecar } from './support/sidecar.js';

/**
 * A job across three pods on a real Prometheus server: a six-rank torch.distributed job (gloo, on
 * CPU) whose ranks report two by two to three real sidecars, rank 5's loader slow (in the third
 * pod), scraped by the real `prometheus` with the stepscope rules. The rules' job verdict and
 * straggler, `stepscope report --prometheus` and `stepscope merge` must all say what one sidecar
 * that saw all six ranks of the same job says, and the rules' excess match that sidecar's within 5%.
 * Slow (two six-rank jobs, about 90 s on two cores): `.ci/run`'s later stage, with
 * STEPSCOPE_E2E=all (or STEPSCOPE_PROMETHEUS_E2E=1).
 */

const torch = findPython(['torch', 'torch.distributed']);
const RUN = process.env.STEPSCOPE_E2E === 'all' || !!process.env.STEPSCOPE_PROMETHEUS_E2E;
const why = !RUN ? 'STEPSCOPE_E2E=all runs it' : !PROMETHEUS ? WITHOUT_PROMETHEUS : !torch.python ? torch.why : '';
const cleanups = cleanupList();

const STEPS = 150;
const LOOP = ['--steps', String(STEPS), '--data-ms', '1', '--slow-rank', '5', '--slow-data-ms', '100', '--compute-ms', '5'];

function killByPidFile(pidFile: string) {
  if (!existsSync(pidFile)) return;
  try {
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // already gone
  }
}

async function sidecar(out: string): Promise<RunningSidecar> {
  const started = await startSidecar(['--gpu-source', 'none', '--out', out, '--end-grace', '1', '--hold', '1']);
  cleanups.push(() => started.stop('SIGKILL'));
  return started;
}

/** Six ranks of one job, rank r reporting to sidecars[podOf(r)]. */
async function runJob(job: string, sidecars: RunningSidecar[], podOf: (rank: number) => number, scratch: string) {
  const port = await freePort();
  const runs = await Promise.all(
    [0, 1, 2, 3, 4, 5].map((rank) => {
      const pidFile = path.join(scratch, `${job}-rank${rank}.pid`);
      cleanups.push(() => killByPidFile(pidFile));
      const env = { STEPSCOPE_URL: sidecars[podOf(rank)]!.ingestUrl, STEPSCOPE_JOB: job, RANK: String(rank), WORLD_SIZE: '6', LOCAL_RANK: String(rank % 2), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port) };
      return runPython(torch.python!, fixture('ddp_loop.py'), ['--port', String(port), ...LOOP, '--pid-file', pidFile], env, 240_000);
    }),
  );
  for (const run of runs) expect(run.code, run.stderr).toBe(0);
}

const summaryOf = (out: string): Summary => JSON.parse(readFileSync(path.join(out, 'summary.json'), 'utf8'));
const cli = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 120_000 });

describe.skipIf(!!why)(`a job across three pods on a real Prometheus server${why ? ` (skipped: ${why})` : ''}`, () => {
  it('the rules, report --prometheus and merge name the slow rank in pod 3 as one sidecar that saw all six ranks does', async () => {
    const scratch = tempDir('stepscope-prom-e2e-');
    const outs = ['pod-1', 'pod-2', 'pod-3', 'whole'].map((name) => path.join(scratch, name));
    const pods = await Promise.all(outs.slice(0, 3).map(sidecar));
    const whole = await sidecar(outs[3]!);
    const prometheus = await startPrometheus({
      dir: path.join(scratch, 'prometheus'),
      targets: pods.map((p, i) => ({ target: `127.0.0.1:${p.port}`, pod: `pod-${i + 1}` })),
    });
    cleanups.push(() => prometheus.stop());

    // The one sidecar that sees every rank, then the same job over three pods.
    await runJob('whole', [whole], () => 0, scratch);
    const started = Date.now() / 1000;
    await runJob('split', pods, (rank) => Math.floor(rank / 2), scratch);
    for (const out of outs) await waitFor(() => existsSync(path.join(out, 'summary.json')), 30_000, 200);
    // Prometheus has scraped every rank's last step.
    await waitFor(async () => Number((await promQuery(prometheus.url, 'sum(stepscope_step_duration_seconds_count{training_job="split"})'))[0]?.value[1]) === 6 * STEPS, 30_000, 250);
    const ended = Date.now() / 1000;
    const reference = summaryOf(outs[3]!);
    if (process.env.STEPSCOPE_DEBUG_E2E) console.log(JSON.stringify({ headline: reference.headline, straggler: reference.straggler, ranks: reference.ranks.map((r) => [r.rank, r.verdict, r.cause, r.breakdown, r.step_ms.mean]), timeline: reference.timeline }));
    expect(reference.straggler, reference.headline).toMatchObject({ rank: 5, reason: 'data' });

    // Each pod's own sidecar sees no straggler beyond its two ranks: pods 1 and 2 none at all.
    const own = outs.slice(0, 3).map(summaryOf);
    expect(own.map((s) => s.ranks.map((r) => r.rank))).toEqual([[0, 1], [2, 3], [4, 5]]);

    // The rules, at the last evaluation while the job ran (its verdicts go with it).
    const last = async (expr: string) => {
      const series = await promRange(prometheus.url, expr, started, ended, 1);
      return series.map((s) => ({ metric: s.metric, value: Number(s.values[s.values.length - 1]![1]) }));
    };
    const named = await last('training_job_rank:stepscope_straggler_excess_seconds:named5m{training_job="split"}');
    expect(named.map((s) => s.metric.rank)).toEqual(['5']);
    const excessMs = named[0]!.value * 1000;
    if (process.env.STEPSCOPE_DEBUG_E2E) console.log(`PromQL excess ${excessMs.toFixed(2)} ms, the sidecar's ${reference.straggler!.excess_ms} ms`);
    expect(Math.abs(excessMs - reference.straggler!.excess_ms) / reference.straggler!.excess_ms, `PromQL ${excessMs} ms against the sidecar's ${reference.straggler!.excess_ms} ms`).toBeLessThan(0.05);
    // The rules' job verdict across pods, the one it held longest (as a summary's), is the whole sidecar's.
    const codes = await promRange(prometheus.url, 'training_job:stepscope_verdict_code:job{training_job="split"}', started, ended, 1);
    const held = new Map<number, number>();
    for (const [, v] of codes[0]!.values) if (![5, 6].includes(Number(v))) held.set(Number(v), (held.get(Number(v)) ?? 0) + 1);
    const longest = [...held.entries()].sort((a, b) => b[1] - a[1])[0]![0];
    expect(longest, JSON.stringify([...held])).toBe(VERDICT_CODES[reference.verdict]);

    // report --prometheus: the job's summary across the pods.
    const report = cli('report', '--prometheus', prometheus.url, '--job', 'split', '--from', String(started - 5), '--to', String(ended), '--window', '5', '--format', 'json');
    expect(report.status, report.stderr).toBe(0);
    const fromPrometheus = JSON.parse(report.stdout) as Summary;
    expect(fromPrometheus.straggler, fromPrometheus.headline).toMatchObject({ rank: 5, reason: 'data' });
    // Verdicts, not causes: a cause can read the host's load, which differs between the two runs.
    expect(fromPrometheus.verdict).toBe(reference.verdict);
    expect(fromPrometheus.ranks.map((r) => [r.rank, r.verdict, r.straggler])).toEqual(reference.ranks.map((r) => [r.rank, r.verdict, r.straggler]));
    // The job's verdict is its straggler's, however many ranks hold another.
    expect(fromPrometheus.verdict).toBe(fromPrometheus.ranks.find((r) => r.straggler)!.verdict);
    const page = path.join(scratch, 'split.html');
    const html = cli('report', '--prometheus', prometheus.url, '--job', 'split', '--from', String(started - 5), '--to', String(ended), '--window', '5', '--html', '-o', page);
    expect(html.status, html.stderr).toBe(0);
    expect(readFileSync(page, 'utf8')).toContain('The job across 3 pods, from Prometheus (pod-1: ranks 0, 1; pod-2: ranks 2, 3; pod-3: ranks 4, 5). None missing.');
    expect(fromPrometheus).toMatchObject({ steps: 6 * STEPS, world_size: 6 });
    expect(fromPrometheus.job_wide).toMatchObject({ from: 'prometheus', missing_ranks: [], missing_pods: [] });
    expect(fromPrometheus.job_wide!.pods).toEqual([
      { pod: 'pod-1', ranks: [0, 1] },
      { pod: 'pod-2', ranks: [2, 3] },
      { pod: 'pod-3', ranks: [4, 5] },
    ]);

    // merge: the same from the pods' summary files.
    const merged = cli('merge', ...outs.slice(0, 3), '--format', 'json');
    expect(merged.status, merged.stderr).toBe(0);
    const fromFiles = JSON.parse(merged.stdout) as Summary;
    expect(fromFiles.straggler).toMatchObject({ rank: 5, reason: 'data' });
    expect(fromFiles.verdict).toBe(reference.verdict);
    expect(fromFiles.ranks.map((r) => [r.rank, r.verdict, r.straggler])).toEqual(reference.ranks.map((r) => [r.rank, r.verdict, r.straggler]));

    // What goes wrong is said: a bad address, an empty range, a job Prometheus never saw.
    const refused = cli('report', '--prometheus', `http://127.0.0.1:${await freePort()}`, '--job', 'split');
    expect([refused.status, refused.stderr]).toEqual([1, expect.stringContaining('cannot reach Prometheus at http://127.0.0.1:')]);
    const empty = cli('report', '--prometheus', prometheus.url, '--job', 'split', '--from', String(ended), '--to', String(started));
    expect([empty.status, empty.stderr]).toEqual([1, expect.stringContaining('an empty range')]);
    const unknown = cli('report', '--prometheus', prometheus.url, '--job', 'never-ran', '--from', String(started - 5), '--to', String(ended));
    expect([unknown.status, unknown.stderr]).toEqual([1, expect.stringContaining('has no steps of job "never-ran"')]);
    expect(unknown.stderr).toContain('split');
  }, 600_000);
});
