import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { compare } from '../src/analysis/compare.js';
import type { Summary } from '../src/protocol/summary.js';
import { SERIES_MAX_SLICES } from '../src/analysis/summary-series.js';
import type { SummarySeries } from '../src/protocol/summary.js';
import { runRecord } from '../src/outputs/past-runs.js';
import { reportCharts } from '../src/outputs/report-html-charts.js';
import { htmlReport } from '../src/outputs/report-html-file.js';
import { CHROMIUM, dumpDom } from './support/chromium.js';
import { CLI, ROOT, tempDir } from './support/sidecar.js';

/**
 * The HTML report (src/outputs/report-html*.ts): one file, no request beyond itself, a few hundred
 * KB for a day-long job of many ranks and GPUs, and in a real browser (headless Chromium) it loads
 * without an error and draws every chart with data.
 */

const load = (name: string) => JSON.parse(readFileSync(path.join(ROOT, 'test/fixtures/summaries', name), 'utf8')) as Summary;
const baseline = load('a10-baseline.json');

/** Deterministic wobble, so that the charts have shape. */
const wave = (i: number, k: number) => Math.sin(i / 9 + k) * 0.5 + Math.sin(i / 37 + 2 * k) * 0.5;
const round = (x: number) => Number(x.toPrecision(3));

/** A day-long, 64-rank, 8-GPU run as the sidecar would summarise it: its series at the bound. */
function dayLong(job = 'detector-week2'): Summary {
  const base = load('a10-augmented.json');
  const n = SERIES_MAX_SLICES;
  const slice = 240;
  const at = <T extends number | null>(f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
  const hot = (i: number) => i >= 200 && i < 260;
  const series: SummarySeries = {
    from: base.started_at,
    slice_s: slice,
    steps: at((i) => 64 * 500 + Math.round(wave(i, 0) * 500)),
    step_ms: at((i) => round(390 + 40 * wave(i, 1))),
    phase_ms: { data: at((i) => round(120 + 30 * wave(i, 2))), h2d: at(() => 8), compute: at((i) => round(245 + 10 * wave(i, 3))), other: at(() => 17) },
    samples_per_s: at((i) => round(2600 + 200 * wave(i, 4))),
    ranks: Array.from({ length: 16 }, (_, r) => ({ rank: r * 4 + 1, step_ms: at((i) => round(380 + (r === 1 ? 60 : r) + 20 * wave(i, r))) })),
    ranks_total: 64,
    gpus: Array.from({ length: 8 }, (_, g) => ({
      index: g,
      uuid: `GPU-${g}`,
      name: 'NVIDIA A10',
      util_pct: at((i) => round(60 + 20 * wave(i, g))),
      sm_clock_pct: at((i) => (g === 3 && hot(i) ? 63 : 100)),
      power_w: at((i) => round(130 + 15 * wave(i, g))),
      temp_c_max: at((i) => (g === 3 && hot(i) ? 90 : 66)),
      mem_used_mib_max: at(() => 14_000 + g * 100),
      throttled: at((i) => (g === 3 && hot(i) ? 1 : 0)),
    })),
  };
  const summary: Summary = {
    ...base,
    job,
    duration_s: n * slice,
    world_size: 64,
    samples_per_step: 16,
    series,
    straggler: { rank: 5, reason: 'data', excess_ms: 42, text: 'rank 5 waits 42 ms a step longer for data than the others', seconds: 3600 },
    ranks: Array.from({ length: 64 }, (_, r) => ({ ...base.ranks[0]!, rank: r, local_rank: r % 8, straggler: r === 5 })),
    gpus: Array.from({ length: 8 }, (_, g) => ({ ...base.gpus[0]!, index: g, uuid: `GPU-${g}`, ranks: Array.from({ length: 8 }, (_, k) => g * 8 + k) })),
  };
  summary.baseline = compare(baseline, summary);
  summary.regression = { change_pct: 39.3, threshold_pct: 10, against: 'baseline (run of 2026-11-30)', since_s: 1800, text: summary.baseline.text.split('\n')[0]! };
  summary.history = Array.from({ length: 10 }, (_, k) => runRecord({ ...baseline, ended_at: new Date(Date.parse(baseline.ended_at) - k * 86_400_000).toISOString() }, 10 - k, null, null));
  return summary;
}

describe('the HTML report', () => {
  it('is one file that asks for nothing beyond itself, and stays small for a day-long job', async () => {
    const html = await htmlReport(dayLong());
    expect(html.length).toBeLessThan(1_000_000);
    // Nothing loaded from anywhere: no src or href pointing out, no fetch.
    expect(html).not.toMatch(/\b(?:src|href)\s*=\s*["']?(?:https?:)?\/\//i);
    expect(html).not.toMatch(/<link\b|@import|\bfetch\(/);
    expect(html).toContain('var uPlot=');
    const charts = reportCharts(dayLong());
    expect(charts.map((c) => c.id)).toEqual(['breakdown', 'throughput', 'ranks', 'gpu-util', 'gpu-power', 'gpu-memory']);
    expect(charts.find((c) => c.id === 'gpu-util')!.spans).toEqual([{ from: expect.any(Number), to: expect.any(Number), label: 'gpu 3 throttled' }]);
    expect(charts.find((c) => c.id === 'ranks')!.lines.find((l) => l.label.includes('straggler'))!.label).toBe('rank 5 · straggler');
  });

  it('escapes what the job and its environment say', async () => {
    const evil = '</script><script>window.pwned=1</script><img src=x onerror=alert(1)>';
    const html = await htmlReport({ ...dayLong(evil), env: { torch: evil } });
    expect(html).not.toContain('<script>window.pwned');
    expect(html).not.toContain('<img');
    expect(html).toContain('&lt;/script&gt;&lt;script&gt;window.pwned=1');
  });

  it('has no charts, and says why, for a summary written before there were series', async () => {
    const html = await htmlReport(baseline);
    expect(reportCharts(baseline)).toEqual([]);
    expect(html).toContain('No charts: this summary has no series');
  });

  it.skipIf(!CHROMIUM)(`loads in headless Chromium without an error and draws every chart with data${CHROMIUM ? '' : ' (skipped: no chromium; apt-get install chromium)'}`, async () => {
    const dir = tempDir();
    const file = path.join(dir, 'report.html');
    writeFileSync(file, await htmlReport(dayLong()));
    const dom = dumpDom(file);
    expect(dom).toMatch(/<html[^>]*\sdata-ready="1"/);
    expect(/<html[^>]*\sdata-errors="(\d+)"/.exec(dom)?.[1]).toBe('0');
    const charts = [...dom.matchAll(/<div class="chart" id="chart-([\w-]+)"([^>]*)>/g)].map((m) => ({ id: m[1], drawn: /data-drawn="1"/.test(m[2]!), points: Number(/data-points="(\d+)"/.exec(m[2]!)?.[1]) }));
    expect(charts).toHaveLength(6);
    for (const chart of charts) {
      expect(chart.drawn, chart.id).toBe(true);
      expect(chart.points, chart.id).toBeGreaterThan(0);
    }
    // uPlot made a canvas for each.
    expect(dom.match(/<canvas/g)?.length).toBe(6);
  });

  it('stepscope report --html writes it beside the summary, given the summary\'s folder', () => {
    const dir = tempDir();
    writeFileSync(path.join(dir, 'summary.json'), JSON.stringify(dayLong()));
    const printed = execFileSync(process.execPath, [CLI, 'report', '--html', dir], { encoding: 'utf8' }).trim();
    expect(printed).toBe(path.join(dir, 'report.html'));
    expect(readFileSync(printed, 'utf8')).toMatch(/^<!doctype html>[\s\S]*stepscope: detector-week2/);
  });
});
