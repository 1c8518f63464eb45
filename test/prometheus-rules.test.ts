import { spawnSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parse, parseDocument, stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { exposed, GOLDEN, groupingLabels, matchers, metricNames, PROMTOOL, WITHOUT_PROMTOOL } from './support/promql.js';
import { ROOT } from './support/sidecar.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * The Prometheus rules (deploy/prometheus/stepscope-rules.yml, the one source) and the
 * PrometheusRule written from them (deploy/kubernetes/prometheus-rules.yaml): every expression
 * refers to metrics, labels and label values the sidecar exposes, every alert says what to do, and
 * promtool, where installed, checks them and runs their unit tests (stepscope-rules.test.yml).
 */

const RULES = path.join(ROOT, 'deploy', 'prometheus', 'stepscope-rules.yml');
const UNIT_TESTS = path.join(ROOT, 'deploy', 'prometheus', 'stepscope-rules.test.yml');
const OPERATOR = path.join(ROOT, 'deploy', 'kubernetes', 'prometheus-rules.yaml');

interface Rule {
  record?: string;
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface Group {
  name: string;
  interval?: string;
  rules: Rule[];
}

const source = readFileSync(RULES, 'utf8');
const groups = (parse(source) as { groups: Group[] }).groups;
const rules = groups.flatMap((group) => group.rules);

/** Labels every scraped series gets from Prometheus and a PodMonitor, beside the sidecar's own. */
const TARGET_LABELS = new Set(['instance', 'job', 'namespace', 'pod', 'container', 'endpoint']);
/** Series Prometheus makes itself for each target. */
const PROMETHEUS_SERIES = new Map([['up', TARGET_LABELS]]);

const OPERATOR_HEADER = `# Generated from deploy/prometheus/stepscope-rules.yml (the one source; see its comments), by
#   STEPSCOPE_WRITE_RULES=1 npx vitest run test/prometheus-rules.test.ts
# Edit that file, not this one. The Prometheus Operator loads a PrometheusRule whose labels its
# Prometheus's ruleSelector matches (kube-prometheus-stack: release: <its Helm release>): add that
# label below, or set ruleSelector to match stepscope/rules: "true".
`;

/** The PrometheusRule: the source's groups, as they are, in the operator's wrapping. */
function operatorManifest(): string {
  const manifest = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: { name: 'stepscope', labels: { 'stepscope/rules': 'true' } },
    spec: { groups },
  };
  return OPERATOR_HEADER + stringify(manifest, { lineWidth: 0 });
}

/** What each recording rule produces, with the labels its outer aggregation keeps. */
function recordedLabels(): Map<string, Set<string>> {
  const recorded = new Map<string, Set<string>>();
  for (const rule of rules.filter((r) => r.record)) {
    // A level:metric:operations name says its labels in the level (training_job_cause: training_job, cause).
    const level = rule.record!.split(':')[0]!;
    const labels = new Set<string>();
    for (const known of ['training_job', 'rank', 'verdict', 'cause', 'phase']) if (level.includes(known)) labels.add(known);
    recorded.set(rule.record!, labels);
  }
  return recorded;
}

describe('the Prometheus rules', () => {
  it('come as a PrometheusRule holding exactly the groups of the plain rules file', () => {
    const written = operatorManifest();
    if (process.env.STEPSCOPE_WRITE_RULES === '1') writeFileSync(OPERATOR, written);
    const doc = parseDocument(readFileSync(OPERATOR, 'utf8'));
    expect(doc.errors).toEqual([]);
    expect(doc.toJS()).toMatchObject({ apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule', metadata: { name: 'stepscope' } });
    expect(doc.toJS().spec.groups, 'run with STEPSCOPE_WRITE_RULES=1 to write it').toEqual(groups);
    expect(readFileSync(OPERATOR, 'utf8'), 'run with STEPSCOPE_WRITE_RULES=1 to write it').toBe(written);
  });

  it('select only metrics, labels and label values that /metrics exposes, or that a rule before records', async () => {
    const { names, labels, values } = await exposed();
    const recorded = recordedLabels();
    const defined = new Map<string, Set<string>>(PROMETHEUS_SERIES);
    for (const rule of rules) {
      const where = rule.record ?? rule.alert!;
      const selected = metricNames(rule.expr);
      expect(selected.length, where).toBeGreaterThan(0);
      const known = new Set<string>(TARGET_LABELS);
      for (const name of selected) {
        const own = defined.get(name) ?? (names.has(name) ? labels.get(name) : undefined);
        expect(own, `${where}: ${name} is neither exposed nor recorded by an earlier rule`).toBeDefined();
        for (const label of own!) known.add(label);
      }
      for (const label of groupingLabels(rule.expr)) if (label !== 'le' || /_bucket\b/.test(rule.expr)) expect(known.has(label), `${where}: label ${label}`).toBe(true);
      for (const m of matchers(rule.expr)) {
        expect(defined.get(m.metric) ?? labels.get(m.metric), `${where}: ${m.metric}`).toBeDefined();
        if (TARGET_LABELS.has(m.label)) continue;
        expect((defined.get(m.metric) ?? labels.get(m.metric))!.has(m.label), `${where}: ${m.metric} has no label ${m.label}`).toBe(true);
        // Equality and simple alternations name values the sidecar really gives that label.
        const wanted = m.op === '=' ? [m.value] : m.op === '=~' && /^[\w-]+(\|[\w-]+)*$/.test(m.value) ? m.value.split('|') : [];
        for (const value of wanted) expect(values.get(m.label)?.has(value), `${where}: ${m.label}="${value}"`).toBe(true);
      }
      if (rule.record) defined.set(rule.record, recorded.get(rule.record)!);
    }
    // Every job-level figure the issue asks for is recorded.
    const records = rules.flatMap((r) => (r.record ? [r.record] : []));
    for (const base of ['verdict_code', 'step_seconds', 'straggler_excess_seconds', 'samples', 'slowdown_ratio', 'regression', 'wasted_gpus']) {
      expect(records.some((record) => record.split(':')[1] === `stepscope_${base}`), base).toBe(true);
    }
  });

  it('name recordings level:metric:operations and give every alert a wait, a severity and what to do', () => {
    for (const rule of rules) {
      expect(Boolean(rule.record) !== Boolean(rule.alert), rule.expr).toBe(true);
      if (rule.record) {
        expect(rule.record).toMatch(/^[a-z_]+:stepscope_[a-z_]+:[a-z0-9_]+$/);
        continue;
      }
      expect(rule.alert).toMatch(/^Stepscope[A-Z]\w+$/);
      expect(rule.for, rule.alert).toMatch(/^\d+m$/);
      expect(['warning', 'critical'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
      expect(rule.annotations?.description?.length ?? 0, `${rule.alert}: says what to do`).toBeGreaterThan(120);
    }
    const alerts = rules.flatMap((r) => (r.alert ? [r.alert] : []));
    expect(new Set(alerts).size).toBe(alerts.length);
    for (const alert of ['StepscopeJobRegressed', 'StepscopeJobInputBound', 'StepscopeGpuThrottled', 'StepscopeStraggler', 'StepscopeJournalNotWriting', 'StepscopeSidecarDown']) {
      expect(alerts).toContain(alert);
    }
  });

  it('know the sidecars’ scrape job by the name the PodMonitor gives it (namespace/name)', () => {
    const monitor = parse(readFileSync(path.join(ROOT, 'deploy', 'kubernetes', 'podmonitor.yaml'), 'utf8')) as { metadata: { name: string } };
    const down = rules.find((rule) => rule.alert === 'StepscopeSidecarDown')!;
    const job = matchers(down.expr).find((m) => m.metric === 'up' && m.label === 'job')!;
    const pattern = new RegExp(`^(?:${job.value})$`);
    expect(`default/${monitor.metadata.name}`).toMatch(pattern);
    expect(monitor.metadata.name).toMatch(pattern);
    expect('default/node-exporter').not.toMatch(pattern);
  });

  it('have unit tests for every recording rule and every alert', () => {
    const tests = parse(readFileSync(UNIT_TESTS, 'utf8')) as {
      rule_files: string[];
      tests: Array<{ promql_expr_test?: Array<{ expr: string }>; alert_rule_test?: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
    };
    expect(tests.rule_files).toEqual([path.basename(RULES)]);
    const exprs = tests.tests.flatMap((t) => (t.promql_expr_test ?? []).map((e) => e.expr));
    const alertTests = tests.tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const rule of rules) {
      if (rule.record) expect(exprs.some((expr) => metricNames(expr).includes(rule.record!)), rule.record).toBe(true);
      else {
        // Firing at some time, and not firing (still pending, or for other series) at another.
        const own = alertTests.filter((t) => t.alertname === rule.alert);
        expect(own.some((t) => t.exp_alerts.length > 0), `${rule.alert} fires`).toBe(true);
      }
    }
  });
});


describe('promtool', () => {
  const promtool = (...args: string[]) => spawnSync(PROMTOOL!, args, { cwd: path.dirname(RULES), encoding: 'utf8', timeout: 60_000 });

  it('checks the rules file and the PrometheusRule’s groups', (context) => {
    if (!PROMTOOL) return context.skip(WITHOUT_PROMTOOL);
    const checked = promtool('check', 'rules', path.basename(RULES));
    expect(checked.status, checked.stdout + checked.stderr).toBe(0);
    expect(checked.stdout).toContain(`SUCCESS: ${rules.length} rules found`);
  });

  it('passes the rules’ unit tests: each recording rule and alert, firing and not', (context) => {
    if (!PROMTOOL) return context.skip(WITHOUT_PROMTOOL);
    const tested = promtool('test', 'rules', path.basename(UNIT_TESTS));
    expect(tested.status, tested.stdout + tested.stderr).toBe(0);
    expect(tested.stdout).toContain('SUCCESS');
  });

  /**
   * A real sidecar's series as Prometheus would hold them after ten scrapes a minute apart: its
   * gauges as they are, its counters grown by their value each minute; the golden exposition's
   * figures that vary from run to run left out.
   */
  function goldenSeries(): Array<{ series: string; values: string }> {
    const types = new Map([...GOLDEN.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
    const series: Array<{ series: string; values: string }> = [];
    for (const [, name, labels, value] of GOLDEN.matchAll(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/gm)) {
      if (!Number.isFinite(Number(value))) continue;
      const family = types.has(name!) ? name! : name!.replace(/_(bucket|sum|count)$/, '');
      const grows = types.get(family) === 'counter' || types.get(family) === 'histogram';
      const all = [labels, 'instance="a"', 'job="default/stepscope"'].filter(Boolean).join(',');
      series.push({ series: `${name}{${all}}`, values: grows ? `0+${value}x10` : `${value}x10` });
    }
    return series;
  }

  const tempDir = useTempDirs('stepscope-rules-');
  it('give on a real sidecar’s exposition what that sidecar says of its job (golden file, promtool)', (context) => {
    if (!PROMTOOL) return context.skip(WITHOUT_PROMTOOL);
    // The golden job: rank 0 compute-bound, rank 1 input-bound and the sidecar's straggler (its job
    // verdict input-bound); 40 steps of 10 ms a minute each, rank 1 waiting 4 ms of them for data.
    const at = (expr: string, samples: Array<[string, number]>) => ({ expr, eval_time: '9m', exp_samples: samples.map(([labels, value]) => ({ labels, value })) });
    const tests = {
      rule_files: [path.basename(RULES)],
      evaluation_interval: '30s',
      tests: [
        {
          interval: '1m',
          input_series: goldenSeries(),
          promql_expr_test: [
            at('training_job_verdict:stepscope_ranks:count', [
              ['training_job_verdict:stepscope_ranks:count{training_job="golden",verdict="compute-bound"}', 1],
              ['training_job_verdict:stepscope_ranks:count{training_job="golden",verdict="input-bound"}', 1],
            ]),
            // The tie goes to input-bound, the verdict the sidecar gives the job.
            at('training_job:stepscope_verdict_code:most_ranks == on (training_job) stepscope_job_verdict_code', [['{training_job="golden"}', 1]]),
            at('round(training_job_rank:stepscope_step_seconds:mean5m * 1000)', [
              ['{training_job="golden",rank="0"}', 10],
              ['{training_job="golden",rank="1"}', 10],
            ]),
            at('round(training_job_rank:stepscope_own_delay_seconds:mean5m * 1000)', [
              ['{training_job="golden",rank="0"}', 1],
              ['{training_job="golden",rank="1"}', 4],
            ]),
            // The rank with the most excess is the one the sidecar calls the straggler.
            // Its excess, in tenths of a ms, is the sidecar's: 4 ms against the other rank's 1 ms.
            at('round(1e4 * topk by (training_job) (1, training_job_rank:stepscope_straggler_excess_seconds:mean5m)) and on (training_job, rank) stepscope_rank_straggler == 1', [
              ['{training_job="golden",rank="1"}', 30],
            ]),
            at('round(1e4 * training_job_rank:stepscope_straggler_excess_seconds:named5m)', [['{training_job="golden",rank="1"}', 30]]),
            // The job's verdict across pods is the sidecar's: its straggler's.
            at('training_job:stepscope_verdict_code:job == on (training_job) stepscope_job_verdict_code', [['{training_job="golden"}', 1]]),
            at('round(training_job:stepscope_samples:rate5m)', [['{training_job="golden"}', 43]]),
          ],
        },
      ],
    };
    const dir = tempDir();
    copyFileSync(RULES, path.join(dir, path.basename(RULES)));
    writeFileSync(path.join(dir, 'golden.test.yml'), stringify(tests));
    const tested = spawnSync(PROMTOOL!, ['test', 'rules', 'golden.test.yml'], { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    expect(tested.status, tested.stdout + tested.stderr).toBe(0);
  });
});
