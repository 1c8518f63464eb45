import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { PROMTOOL } from './promql.js';

/**
 * A Prometheus TSDB made beforehand from series given as functions of time (promtool tsdb
 * create-blocks-from openmetrics), for a real Prometheus server to answer queries over a known past
 * without scraping anything: cheap enough for npm test, and exact.
 */

export interface Backfilled {
  name: string;
  labels: Record<string, string>;
  /** Its value at t (Unix s); null: no sample then. */
  at(t: number): number | null;
}

export function backfill(dir: string, series: readonly Backfilled[], times: readonly number[]): string {
  const lines: string[] = [];
  const families = new Map<string, Backfilled[]>();
  for (const s of series) families.set(s.name, [...(families.get(s.name) ?? []), s]);
  // Every family a gauge: its samples named exactly as the family, whatever its suffix.
  for (const [name, members] of families) {
    lines.push(`# TYPE ${name} gauge`);
    for (const s of members) {
      const labels = Object.entries(s.labels).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(',');
      for (const t of times) {
        const v = s.at(t);
        if (v !== null) lines.push(`${name}{${labels}} ${v} ${t}`);
      }
    }
  }
  lines.push('# EOF');
  const input = path.join(dir, 'series.om');
  writeFileSync(input, lines.join('\n') + '\n');
  const out = path.join(dir, 'tsdb');
  const made = spawnSync(PROMTOOL!, ['tsdb', 'create-blocks-from', 'openmetrics', input, out], { encoding: 'utf8', timeout: 60_000 });
  if (made.status !== 0) throw new Error(`promtool tsdb create-blocks-from: ${made.stderr}`);
  return out;
}
