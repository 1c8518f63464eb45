import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { VERDICT_CODES } from '../src/outputs/metrics-verdicts.js';
import { parse, stringify } from 'yaml';
import { exposed, GOLDEN as golden, metricNames, PROMTOOL, WITHOUT_PROMTOOL } from './support/promql.js';
import { ROOT } from './support/sidecar.js';
import { useTempDirs } from './support/temp-dirs.js';

/**
 * The Grafana dashboards and docs/metrics.md against what /metrics exposes (test/support/promql.ts):
 * every query selects metrics that are there.
 */

const dashboard = JSON.parse(readFileSync(path.join(ROOT, 'deploy', 'grafana', 'stepscope.json'), 'utf8'));
const docs = readFileSync(path.join(ROOT, 'docs', 'metrics.md'), 'utf8');
const exposedNames = async () => (await exposed()).names;

interface Panel {
  id: number;
  type: string;
  title: string;
  targets?: Array<{ expr: string; datasource?: { uid: string } }>;
  panels?: Panel[];
  fieldConfig?: { defaults?: { mappings?: Array<{ type: string; options: Record<string, { text: string }> }> } };
}

const panels = (list: Panel[]): Panel[] => list.flatMap((panel) => [panel, ...panels(panel.panels ?? [])]);
const allPanels = panels(dashboard.panels);
const queries: Array<{ where: string; expr: string }> = [
  ...allPanels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ where: panel.title, expr: target.expr }))),
  ...dashboard.templating.list.filter((v: any) => v.type === 'query').map((v: any) => ({ where: `$${v.name}`, expr: v.query.query as string })),
];

describe('the Grafana dashboard', () => {
  it('finds the metric names in PromQL', () => {
    expect(metricNames('sum by (rank) (rate(stepscope_phase_seconds_total{training_job="$job", rank=~"a|b"}[$__rate_interval])) / 1e3')).toEqual(['stepscope_phase_seconds_total']);
    expect(metricNames('histogram_quantile(0.9, sum without (pod) (rate(x_bucket[5m]))) > 0 and on(instance, gpu) group_left() y{a="on(z)"} offset 5m')).toEqual(['x_bucket', 'y']);
    expect(metricNames('label_values(stepscope_rank_verdict{training_job="$training_job"}, rank)')).toEqual(['stepscope_rank_verdict', 'rank']);
  });

  it('is a dashboard whose every query selects only metrics that /metrics exposes', async () => {
    expect(dashboard).toMatchObject({ uid: expect.any(String), title: expect.any(String), schemaVersion: expect.any(Number) });
    const ids = allPanels.map((panel) => panel.id);
    expect(new Set(ids).size).toBe(ids.length);
    const exposed = await exposedNames();
    expect(queries.length).toBeGreaterThan(15);
    for (const { where, expr } of queries) {
      // label_values(METRIC, LABEL) names a label after the metric.
      const names = metricNames(expr.replace(/^label_values\((.*),\s*\w+\)$/, '$1'));
      expect(names.length, `${where}: ${expr}`).toBeGreaterThan(0);
      for (const name of names) expect(exposed.has(name), `${where}: ${name} in ${expr}`).toBe(true);
    }
    for (const panel of allPanels.filter((p) => p.targets)) {
      for (const target of panel.targets!) expect(target.datasource?.uid, panel.title).toBe('${datasource}');
    }
  });

  it('shows verdict codes by the names /metrics gives them', () => {
    const timelines = allPanels.filter((panel) => panel.targets?.some((t) => /verdict_code/.test(t.expr)));
    expect(timelines.length).toBeGreaterThan(0);
    for (const panel of timelines) {
      const [mapping] = panel.fieldConfig!.defaults!.mappings!;
      const shown = Object.fromEntries(Object.entries(mapping!.options).map(([code, { text }]) => [text, Number(code)]));
      expect(shown, panel.title).toEqual(VERDICT_CODES);
    }
  });

  it('covers what a job needs: verdicts over time, phase shares, step time, stragglers, GPU clocks and throttling, drops', () => {
    const used = new Set(queries.flatMap(({ expr }) => metricNames(expr)));
    for (const name of [
      'stepscope_rank_verdict_code',
      'stepscope_phase_seconds_total',
      'stepscope_step_duration_seconds_bucket',
      'stepscope_rank_straggler',
      'stepscope_gpu_sm_clock_hertz',
      'stepscope_gpu_sm_clock_max_hertz',
      'stepscope_gpu_throttle_reason_active_ratio',
      'stepscope_hook_dropped_records_total',
    ]) {
      expect(used.has(name), name).toBe(true);
    }
    expect(allPanels.find((panel) => panel.targets?.some((t) => t.expr.includes('stepscope_rank_verdict_code')))?.type).toBe('state-timeline');
  });
});

describe('the job view', () => {
  const row = dashboard.panels.findIndex((panel: Panel) => panel.type === 'row' && /job across its pods/.test(panel.title));
  const next = dashboard.panels.findIndex((panel: Panel, i: number) => i > row && panel.type === 'row');
  const view: Panel[] = dashboard.panels.slice(row + 1, next);
  const exprs = view.flatMap((panel) => (panel.targets ?? []).map((t) => t.expr));

  it('comes first and shows the job as one: its verdict, the straggler across nodes, the run history, the waste, GPUs per node', () => {
    expect(row).toBe(0);
    const used = new Set(exprs.flatMap(metricNames));
    for (const name of [
      'stepscope_rank_verdict',
      'stepscope_rank_verdict_code',
      'stepscope_step_duration_seconds_sum',
      'stepscope_phase_seconds_total',
      'stepscope_job_slowdown_ratio',
      'stepscope_job_regression',
      'stepscope_wasted_gpu_seconds_total',
      'stepscope_gpu_utilization_ratio',
      'stepscope_gpu_sm_clock_hertz',
    ]) {
      expect(used.has(name), name).toBe(true);
    }
    // Across pods: every query is for the chosen job, and none keeps to one rank or one pod.
    for (const expr of exprs) {
      expect(expr).toContain('training_job="$training_job"');
      expect(expr).not.toMatch(/\$rank|instance=/);
    }
    expect(view.find((panel) => panel.targets?.some((t) => t.expr.includes('stepscope_rank_verdict_code')))?.type).toBe('state-timeline');
  });

  const tempDir = useTempDirs('stepscope-dashboard-');
  const variables = (expr: string, job = 'train') => expr.replaceAll('$training_job', job).replaceAll('$rank', '.*').replaceAll('$__rate_interval', '1m');

  it('finds the job verdict and the straggler across pods as the recording rules do, on their unit tests\' series (promtool)', (context) => {
    if (!PROMTOOL) return context.skip(WITHOUT_PROMTOOL);
    const unit = parse(readFileSync(path.join(ROOT, 'deploy', 'prometheus', 'stepscope-rules.test.yml'), 'utf8')) as { tests: Array<{ input_series: unknown[] }> };
    const query = (title: RegExp) => view.find((panel) => title.test(panel.title))!.targets![0]!.expr;
    const verdict = query(/^Job verdict/);
    const straggler = query(/^Straggler across nodes/);
    // The same figures as training_job:stepscope_verdict_code:most_ranks and
    // training_job_rank:stepscope_straggler_excess_seconds:mean5m in stepscope-rules.test.yml.
    const tests = {
      tests: [
        {
          interval: '1m',
          input_series: unit.tests[0]!.input_series,
          promql_expr_test: [
            { expr: variables(verdict), eval_time: '10m', exp_samples: [{ labels: '{}', value: 1 }] },
            { expr: variables(verdict, 'tie'), eval_time: '10m', exp_samples: [{ labels: '{}', value: 4 }] },
            {
              expr: `round((${variables(straggler)}) * 1000)`,
              eval_time: '10m',
              exp_samples: [0, 0, 125, 0].map((value, rank) => ({ labels: `{rank="${rank}"}`, value })),
            },
          ],
        },
      ],
    };
    const file = `${tempDir()}/dashboard.test.yml`;
    writeFileSync(file, stringify(tests));
    const tested = spawnSync(PROMTOOL, ['test', 'rules', file], { encoding: 'utf8', timeout: 60_000 });
    expect(tested.status, tested.stdout + tested.stderr).toBe(0);
  });

  it('has queries Prometheus parses, the variables put in (promtool)', (context) => {
    if (!PROMTOOL) return context.skip(WITHOUT_PROMTOOL);
    const rules = queries.filter(({ expr }) => !expr.startsWith('label_values(')).map(({ expr }, i) => ({ record: `dashboard:query:q${i}`, expr: variables(expr) }));
    const file = `${tempDir()}/dashboard.yml`;
    writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules }] }));
    const checked = spawnSync(PROMTOOL, ['check', 'rules', file], { encoding: 'utf8', timeout: 60_000 });
    expect(checked.status, checked.stdout + checked.stderr).toBe(0);
    expect(checked.stdout).toContain(`SUCCESS: ${rules.length} rules found`);
  });
});

describe('docs/metrics.md', () => {
  it('documents every metric family /metrics exposes, the default process metrics as a group', async () => {
    for (const [, name] of golden.matchAll(/^# TYPE (\S+) \S+$/gm)) expect(docs, name).toContain(`\`${name}\``);
    expect(docs).toContain('stepscope_process_');
    expect(docs).toContain('stepscope_nodejs_');
  });
});
