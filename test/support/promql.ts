import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { registerRegressionFamilies } from '../../src/outputs/metrics-regressions.js';
import { ROOT } from './sidecar.js';

/**
 * What the dashboard and the Prometheus rules may refer to: the golden exposition
 * (test/fixtures/metrics/sidecar.prom, checked against a real sidecar by metrics-sidecar.test.ts,
 * with a series in every family but the two a run history with a reference gives, registered here
 * with one) plus prom-client's default process metrics, which it leaves out;
 * and the PromQL reading that finds the metric and label names in an expression.
 */

export const GOLDEN = readFileSync(path.join(ROOT, 'test', 'fixtures', 'metrics', 'sidecar.prom'), 'utf8');

export interface Exposed {
  /** Every selectable name: families, and a histogram's _bucket, _sum and _count. */
  names: Set<string>;
  /** The label names of each selectable name's series. */
  labels: Map<string, Set<string>>;
  /** The values each label takes, over every series. */
  values: Map<string, Set<string>>;
}

export async function exposed(): Promise<Exposed> {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'stepscope_' });
  registerRegressionFamilies(registry, () => ({ regressions: [{ job: 'golden', run: 1, regressed: true, change_pct: 14, began: null }] }));
  const text = GOLDEN + (await registry.metrics());
  const names = new Set<string>();
  const labels = new Map<string, Set<string>>();
  const values = new Map<string, Set<string>>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(name! + suffix);
  }
  for (const name of names) labels.set(name, new Set());
  for (const [, name, list] of text.matchAll(/^([a-zA-Z_:][\w:]*)\{([^}]*)\}/gm)) {
    const own = labels.get(name!) ?? new Set<string>();
    labels.set(name!, own);
    for (const [, label, value] of list!.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      own.add(label!);
      values.set(label!, (values.get(label!) ?? new Set()).add(value!));
    }
  }
  return { names, labels, values };
}

const KEYWORDS = new Set(['and', 'or', 'unless', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset', 'inf', 'nan']);

/**
 * The metric names a PromQL expression selects: identifiers left once strings, label matchers,
 * range selectors and label lists are gone, other than keywords and function or aggregation calls.
 */
export function metricNames(expr: string): string[] {
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

export interface Matcher {
  metric: string;
  label: string;
  op: string;
  value: string;
}

/** The label matchers of each selector `name{...}` in an expression. */
export function matchers(expr: string): Matcher[] {
  const found: Matcher[] = [];
  for (const [, metric, list] of expr.matchAll(/([a-zA-Z_:][\w:]*)\{([^}]*)\}/g)) {
    for (const [, label, op, value] of list!.matchAll(/(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
      found.push({ metric: metric!, label: label!, op: op!, value: value! });
    }
  }
  return found;
}

/** The labels named in by, without, on, ignoring, group_left and group_right lists. */
export function groupingLabels(expr: string): string[] {
  const labels = new Set<string>();
  for (const [, list] of expr.matchAll(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)) {
    for (const label of list!.split(',').map((l) => l.trim()).filter(Boolean)) labels.add(label);
  }
  return [...labels];
}

/** promtool from the Debian package `prometheus` (.ci/run installs it), else null. */
export const PROMTOOL = (() => {
  const found = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.trim() : null;
})();
export const WITHOUT_PROMTOOL = 'promtool is not on PATH (Debian: apt-get install prometheus; .ci/run installs it)';
