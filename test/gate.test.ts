import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Summary } from '../src/protocol/summary.js';
import { gate, steadyOf } from '../src/gate.js';
import { junitXml } from '../src/gate-report.js';
import { runGate } from '../src/gate-command.js';
import { runRecord } from '../src/outputs/past-runs.js';
import { PastRunsStore } from '../src/outputs/runs-store.js';
import { CLI, ROOT } from './support/sidecar.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * `stepscope gate` on real recorded runs (test/fixtures/journals, each recorded by a real sidecar
 * from a real hook): the same 30 ms loop recorded three times (healthy, and twice with stand-in
 * GPU clocks that do not slow it) is "equal"; the loop whose data takes 30 ms is the regressed canary.
 */

const JOURNALS = path.join(ROOT, 'test', 'fixtures', 'journals');
const HEALTHY = path.join(JOURNALS, 'compute-bound-a-healthy-loop');
const EQUAL = path.join(JOURNALS, 'throttled-thermal-sm-clock-1100-of-1980-mhz-hwthermalslowdown');
const EQUAL_2 = path.join(JOURNALS, 'throttled-power-sm-clock-1300-of-1980-mhz-swpowercap');
const REGRESSED = path.join(JOURNALS, 'input-bound-few-workers-data-loaded-in-the-training-process');
const SHORT = path.join(JOURNALS, '100-ms-steps-losing-half-their-time-to-loading-input-bound');
/** Recorded on the same machine as SHORT (no GPU), so the two are comparable. */
const SHORT_BASE = path.join(JOURNALS, '10-ms-steps-losing-about-15-to-loading-compute-bound-with');
const load = (dir: string) => JSON.parse(readFileSync(path.join(dir, 'summary.json'), 'utf8')) as Summary;
const temp = useTempDirs('stepscope-gate-');

function cli(...args: string[]) {
  const run = spawnSync(process.execPath, [CLI, 'gate', ...args], { encoding: 'utf8' });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** The command in this process (its output kept): cheaper than a process for the cases that need no exit. */
const inProcess = async (...args: Parameters<typeof runGate>) => {
  let stdout = '';
  let stderr = '';
  const status = await runGate(args[0], args[1], { write: (text: string) => (stdout += text) } as unknown as NodeJS.WritableStream, { write: (text: string) => (stderr += text) } as unknown as NodeJS.WritableStream);
  return { status, stdout, stderr };
};
const defaults = { sigma: 3, minChange: 5, minSteps: 20 };

/** JUnit XML read by a real XML parser (Python's), its structure checked as CI systems read it: the counts must match the cases. */
function checkJunit(file: string): { tests: number; failures: number; skipped: number; cases: Array<{ name: string; failure: string | null; skipped: string | null }> } {
  const script = `
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == 'testsuites', root.tag
suites = root.findall('testsuite')
assert len(suites) == 1
s = suites[0]
cases = s.findall('testcase')
for c in cases:
    assert c.get('classname') and c.get('name'), 'testcase needs classname and name'
    assert float(c.get('time')) >= 0
failures = sum(1 for c in cases if c.find('failure') is not None)
skipped = sum(1 for c in cases if c.find('skipped') is not None)
for el in (root, s):
    assert int(el.get('tests')) == len(cases) and int(el.get('failures')) == failures and int(el.get('skipped')) == skipped and int(el.get('errors')) == 0
out = [{'name': c.get('name'), 'failure': c.find('failure').get('message') if c.find('failure') is not None else None,
        'skipped': c.find('skipped').get('message') if c.find('skipped') is not None else None} for c in cases]
print(json.dumps({'tests': len(cases), 'failures': failures, 'skipped': skipped, 'cases': out}))
`;
  const run = spawnSync('python3', ['-c', script, file], { encoding: 'utf8' });
  expect(run.stderr).toBe('');
  return JSON.parse(run.stdout);
}

describe('stepscope gate', () => {
  it('measures the steady state after warm-up: the median time per sample of the slices, and their spread', () => {
    const healthy = steadyOf(load(HEALTHY), true);
    expect(healthy.basis).toBe('series');
    expect(healthy.warmup_end_s).toBeCloseTo(1.78, 2);
    // The 30 ms compute + 1 ms data + 1 ms copy loop: about 32 ms a step, one sample a step.
    expect(healthy.ms).toBeGreaterThan(31);
    expect(healthy.ms).toBeLessThan(35);
    expect(healthy.spread_ms).not.toBeNull();
    expect(healthy.steps).toBeLessThan(load(HEALTHY).steps);
  });

  it('fails a regressed canary (exit 1), naming its cause, the phase that grew and the drift, with JUnit and Markdown', () => {
    const dir = temp();
    const junit = path.join(dir, 'gate.xml');
    const markdown = path.join(dir, 'gate.md');
    const run = cli(REGRESSED, '--baseline', HEALTHY, '--junit', junit, '--markdown', markdown);
    expect(run.status).toBe(1);
    expect(run.stdout).toMatch(/^REGRESSION: input-bound-few-workers is 2\d\.\d% slower a sample than baseline/);
    expect(run.stdout).toContain('verdict now: input-bound (few-workers); it was compute-bound');
    expect(run.stdout).toMatch(/phase that grew most: data \(\+2\d\.\d ms a step\)/);
    expect(run.stdout).toContain('environment drift:');
    const report = checkJunit(junit);
    expect(report).toMatchObject({ tests: 1, failures: 1, skipped: 0 });
    expect(report.cases[0]!.failure).toMatch(/^REGRESSION: /);
    expect(readFileSync(markdown, 'utf8')).toMatch(/\| input-bound-few-workers \| ❌ regression \|/);
  });

  it('passes an equal run (exit 0), and writes a JUnit case without a failure', () => {
    const dir = temp();
    const junit = path.join(dir, 'gate.xml');
    const run = cli(EQUAL, '--baseline', HEALTHY, '--junit', junit);
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/^pass: throttled-thermal is within bounds of baseline/);
    expect(checkJunit(junit)).toMatchObject({ tests: 1, failures: 0, skipped: 0 });
  });

  it("judges against the job's history (the runs before it, on the same GPU model): the bound is the runs' spread", async () => {
    const out = temp();
    const history = path.join(out, 'history');
    const store = new PastRunsStore(history, 20);
    const earlier = [HEALTHY, EQUAL_2].map(load);
    // The recorded runs named as one job's runs, as its history would hold them.
    for (const [i, summary] of earlier.entries()) await store.add({ ...summary, job: 'canary' }, runRecord({ ...summary, job: 'canary' }, i + 1, null, null));
    const write = (dir: string, summary: Summary) => {
      mkdirSync(dir, { recursive: true });
      writeFileSync(path.join(dir, 'summary.json'), JSON.stringify({ ...summary, job: 'canary' }));
    };
    write(path.join(out, 'equal'), load(EQUAL));
    write(path.join(out, 'regressed'), load(REGRESSED));
    const pass = await inProcess(path.join(out, 'equal'), { ...defaults, history, json: true });
    expect(pass.status).toBe(0);
    const judged = JSON.parse(pass.stdout) as { reference: { runs: number; label: string; spread_ms: number }; limit_pct: number };
    expect(judged.reference).toMatchObject({ runs: 2, label: 'the median of the last 2 runs (newest 2026-12-04)' });
    // Two runs' medians differ more than one run's slices: the bound is the larger spread's, at least 5%.
    expect(judged.limit_pct).toBeCloseTo(Math.max(5, (300 * judged.reference.spread_ms) / JSON.parse(pass.stdout).reference.ms), 0);
    expect((await inProcess(path.join(out, 'regressed'), { ...defaults, history })).status).toBe(1);
    // The folder's own history is the default, as the sidecar keeps it under --out.
    copyFileSync(path.join(out, 'regressed', 'summary.json'), path.join(out, 'summary.json'));
    expect(cli(out).status).toBe(1);
  });

  it('cannot judge (exit 2) too few steady steps, no reference, another GPU model, an unreadable file or bad usage', async () => {
    // Its 100 ms steps over 12 s against a reference of 10 ms steps: asked for 200 steady steps, it has too few.
    const tooShort = { ...defaults, minSteps: 200, baseline: SHORT_BASE };
    const short = await inProcess(SHORT, tooShort);
    expect(short.status).toBe(2);
    expect(short.stdout).toMatch(/cannot judge slow-steps: this run has \d+ steady steps .*fewer than the 200 needed/);
    expect((await inProcess(HEALTHY, defaults)).stdout).toMatch(/no reference/);
    const other = load(HEALTHY);
    const h100 = gate({ ...load(EQUAL), env: { ...load(EQUAL).env, gpu_name: 'NVIDIA A10' } }, { label: 'x', runs: [other], reference: { kind: 'baseline', label: 'x', runs: 1, summary: other, env: other.env } });
    expect(h100.outcome).toBe('cannot-judge');
    expect(h100.reason).toMatch(/not comparable/);
    const missing = await inProcess(path.join(temp(), 'nothing'), defaults);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/cannot judge: .*ENOENT/);
    expect(cli(HEALTHY, '--sigma', 'x').status).toBe(2);
    const dir = temp();
    const junit = path.join(dir, 'gate.xml');
    expect((await inProcess(SHORT, { ...tooShort, junit })).status).toBe(2);
    expect(checkJunit(junit)).toMatchObject({ tests: 1, failures: 0, skipped: 1 });
    // A report it cannot write is not a regression: a regressed run still exits 2 then, saying why.
    const unwritable = await inProcess(REGRESSED, { ...defaults, baseline: HEALTHY, junit: path.join(dir, 'no-such-dir', 'gate.xml') });
    expect(unwritable.status).toBe(2);
    expect(unwritable.stderr).toMatch(/cannot write its report: .*ENOENT/);
  });

  it('keeps JUnit well-formed whatever the job is called', () => {
    const dir = temp();
    const file = path.join(dir, 'hostile.xml');
    const hostile = { ...load(HEALTHY), job: 'a<b>&"c\']]>\u0001\u001b[31m' };
    const result = gate(hostile, { label: 'baseline <x>', runs: [load(EQUAL)], reference: { kind: 'baseline', label: 'baseline <x>', runs: 1, summary: load(EQUAL), env: load(EQUAL).env } });
    writeFileSync(file, junitXml([result]));
    expect(checkJunit(file).cases[0]!.name).toContain('a<b>&"c\']]>');
  });
});
