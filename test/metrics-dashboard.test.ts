import { readFileSync } from 'node:fs';
import path from 'node:path';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { VERDICT_CODES } from '../src/outputs/metrics-verdicts.js';
import { ROOT } from './support/sidecar.js';

/**
 * The Grafana dashboard and docs/metrics.md against what /metrics exposes: the golden exposition
 * (test/fixtures/metrics/sidecar.prom, checked against a real sidecar by metrics-sidecar.test.ts,
 * with a series in every family) plus prom-client's default process metrics, which it leaves out.
 */

const golden = readFileSync(path.join(ROOT, 'test', 'fixtures', 'metrics', 'sidecar.prom'), 'utf8');
const dashboard = JSON.parse(readFileSync(path.join(ROOT, 'deploy', 'grafana', 'stepscope.json'), 'utf8'));
const docs = readFileSync(path.join(ROOT, 'docs', 'metrics.md'), 'utf8');

async function exposedNames(): Promise<Set<string>> {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'stepscope_' });
  const text = golden + (await registry.metrics());
  const names = new Set<string>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(name! + suffix);
  }
  return names;
}

const KEYWORDS = new Set(['and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset', 'inf', 'nan']);

/**
 * The metric names a PromQL expression selects: identifiers left once strings, label matchers,
 * range selectors and label lists are gone, other than keywords and function or aggregation calls.
 */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '$1');
  const names = new Set<string>();
  for (const match of bare.matchAll(/(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*(?:\(|\b(?:by|without)\b))/g)) {
    if (!KEYWORDS.has(match[1]!.toLowerCase())) names.add(match[1]!);
  }
  return [...names];
}

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

describe('docs/metrics.md', () => {
  it('documents every metric family /metrics exposes, the default process metrics as a group', async () => {
    for (const [, name] of golden.matchAll(/^# TYPE (\S+) \S+$/gm)) expect(docs, name).toContain(`\`${name}\``);
    expect(docs).toContain('stepscope_process_');
    expect(docs).toContain('stepscope_nodejs_');
  });
});
