import { leadingStop } from '../analysis/summary.js';
import type { Summary } from '../protocol/summary.js';
import { jobWideLine, stopLines } from './summary-text.js';
import type { Verdict } from '../model/verdict.js';
import { reportCharts, PHASE_COLOUR, type ChartSpec } from './report-html-charts.js';
import { HEAD_SCRIPT, PAGE_CSS, PAGE_SCRIPT } from './report-html-page.js';
import { advice, captures, costs, environment, gpus, history, ranks } from './report-html-tables.js';
import { duration, h, num, pct, scriptJson, scriptText, table, withCause } from './report-html-text.js';

/**
 * The end-of-job report as one self-contained HTML page: the summary's text, tables and the
 * timeline made here, the charts drawn in the page by uPlot (inlined, with the chart data), so
 * that it opens offline and can be mailed or attached to a ticket. Pure: the uPlot files come in.
 */

export interface ReportAssets {
  uplotJs: string;
  uplotCss: string;
}

const VERDICT_COLOUR: Record<Verdict, string> = {
  'compute-bound': '#2e9e4f',
  'input-bound': '#d4a017',
  'transfer-bound': '#b03fb5',
  'host-bound': '#2a9fb0',
  'communication-bound': '#3f6fd8',
  'memory-bound': '#e8590c',
  throttled: '#d62728',
  'warming-up': '#7aa6d6',
  idle: '#b0b7bf',
  stalled: '#a61e4d',
  hung: '#5c0011',
  gone: '#343a40',
};

function header(s: Summary): string {
  const facts = [
    `${h(s.started_at.replace('T', ' ').slice(0, 19))} → ${h(s.ended_at.replace('T', ' ').slice(0, 19))} UTC`,
    duration(s.duration_s),
    `${s.steps} steps`,
    `${s.world_size} rank${s.world_size === 1 ? '' : 's'}`,
    s.samples_per_s !== null ? `${num(s.samples_per_s)} samples/s` : null,
    s.end_reason ? `ended: ${h(s.end_reason)}` : null,
  ].filter((x): x is string => x !== null);
  return `<header><h1>stepscope: ${h(s.job)}</h1><div class="meta">${facts.join(' · ')}</div>
<p class="headline" style="--verdict:${VERDICT_COLOUR[s.verdict]}">${h(s.headline)}</p>${wide(s)}</header>`;
}

/** A job-wide summary's pods and what is missing, under the headline. */
function wide(s: Summary): string {
  const line = jobWideLine(s);
  return line ? `<p class="meta" id="job-wide">${h(line)}</p>` : '';
}

/** Where the run stopped stepping, first thing under the headline: the stop, the culprit's own code, the cost. */
function stops(s: Summary): string {
  if (!s.stops?.length) return '';
  const lead = leadingStop(s.stops)!;
  const ordered = [lead, ...s.stops.filter((stop) => stop !== lead)];
  const items = ordered.map((stop) => `<div class="stop" style="--verdict:${VERDICT_COLOUR[stop.verdict]}">${stopLines(stop).map((line) => `<p>${h(line)}</p>`).join('')}</div>`);
  return `<section id="stops" class="stops"><h2>Where it stopped</h2>${items.join('\n')}</section>`;
}

function regression(s: Summary): string {
  if (!s.regression) return '';
  const since = s.regression.since_s !== null ? ` From ${duration(s.regression.since_s)} into the run.` : '';
  return `<section class="regression"><p>Regression: ${h(s.regression.text)}${h(since)}</p></section>`;
}

function figures(s: Summary): string {
  const b = s.breakdown;
  const util = s.gpus.map((g) => g.util_mean).filter((u): u is number => u !== null);
  const items: Array<[string, string]> = [
    ['step p50 / p90', `${num(s.step_ms.p50, 2)} / ${num(s.step_ms.p90, 2)} ms`],
    ['samples/s', s.samples_per_s === null ? 'n/a' : num(s.samples_per_s)],
    ['data · h2d', `${pct(b.data)} · ${pct(b.h2d)}`],
    ['compute · other', `${pct(b.compute)} · ${pct(b.other)}`],
    ['GPU utilization', util.length ? `${Math.round(util.reduce((a, x) => a + x, 0) / util.length)}%` : 'n/a'],
    ['verdict held', s.verdict_share === null ? 'n/a' : pct(s.verdict_share)],
  ];
  return `<section><div class="grid">${items.map(([k, v]) => `<div class="figure"><span class="meta">${h(k)}</span><b>${h(v)}</b></div>`).join('')}</div></section>`;
}

function timeline(s: Summary): string {
  const total = Math.max(1e-9, s.timeline.reduce((a, seg) => Math.max(a, seg.end_s), 0));
  const strip = s.timeline
    .map((seg) => `<div style="flex-grow:${Math.max(0, seg.end_s - seg.start_s) / total};background:${VERDICT_COLOUR[seg.verdict]}" title="${h(`${num(seg.start_s, 0)}–${num(seg.end_s, 0)} s: ${withCause(seg.verdict, seg.cause)}`)}"></div>`)
    .join('');
  const verdicts = [...new Set(s.timeline.map((seg) => seg.verdict))];
  const legend = verdicts.map((v) => `<span style="--c:${VERDICT_COLOUR[v]}">${h(v)}</span>`).join('');
  const rows = s.timeline.map((seg) => [num(seg.start_s), num(seg.end_s), h(withCause(seg.verdict, seg.cause))]);
  const since = s.regression?.since_s ?? null;
  if (since !== null) rows.push([num(since), '', `<b>regression: ${h(`${s.regression!.change_pct}% slower per sample than ${s.regression!.against}`)}</b>`]);
  rows.sort((a, b) => Number(a[0]) - Number(b[0]));
  return `<section id="timeline"><h2>Verdict timeline</h2>${strip ? `<div class="timeline">${strip}</div><div class="legend">${legend}</div>` : '<p class="note">No verdict was reached.</p>'}
${rows.length ? `<details><summary class="meta">Every change</summary>${table(['from (s)', 'to (s)', 'verdict'], rows, [0, 1])}</details>` : ''}</section>`;
}

function comparison(s: Summary): string {
  const c = s.baseline;
  if (!c) return '';
  const [first, ...rest] = c.text.split('\n');
  const phases = (['data', 'h2d', 'compute', 'other'] as const).map((p) => [
    `<span style="color:${PHASE_COLOUR[p]}">■</span> ${p}`,
    num(c.phase_ms.baseline[p], 2),
    num(c.phase_ms.current[p], 2),
    c.delta_ms[p] === null ? 'n/a' : `${c.delta_ms[p]! >= 0 ? '+' : ''}${c.delta_ms[p]!.toFixed(2)}`,
  ]);
  phases.push(['<b>step</b>', num(c.step_ms.baseline, 2), num(c.step_ms.current, 2), c.change_pct === null ? 'n/a' : `${c.change_pct >= 0 ? '+' : ''}${c.change_pct}%`]);
  const env = c.env_changes.length
    ? table(['changed', 'then', 'now'], c.env_changes.map((e) => [h(e.key), h(JSON.stringify(e.baseline)), h(JSON.stringify(e.current))]))
    : '<p class="note">No change in the environment fingerprint.</p>';
  return `<section id="comparison"><h2>Against the reference</h2><p><b>${h(first ?? '')}</b></p>
${table(['ms a step', 'reference', 'this run', 'change'], phases, [1, 2, 3])}
<h3 style="margin-top:12px">What changed</h3>${env}
<details><summary class="meta">In words</summary><pre>${h(rest.join('\n'))}</pre></details></section>`;
}

function charts(specs: ChartSpec[]): string {
  if (specs.length === 0) return '<section><p class="note">No charts: this summary has no series (the run had no steps, or an older stepscope wrote it).</p></section>';
  return specs
    .map((spec) => `<div class="chart" id="chart-${h(spec.id)}" data-points="0"><h3>${h(spec.title)}</h3>${spec.note ? `<p class="note">${h(spec.note)}</p>` : ''}<div class="plot"></div></div>`)
    .join('\n');
}

export function renderReport(summary: Summary, assets: ReportAssets): string {
  const specs = reportCharts(summary);
  return `<!doctype html>
<html lang="en" data-errors="0">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>stepscope: ${h(summary.job)}</title>
<script>${HEAD_SCRIPT}</script>
<style>${assets.uplotCss}
${PAGE_CSS}</style>
</head>
<body>
<main>
${header(summary)}
${stops(summary)}
${regression(summary)}
${figures(summary)}
${costs(summary)}
${captures(summary)}
${timeline(summary)}
${comparison(summary)}
${charts(specs)}
${ranks(summary)}
${gpus(summary)}
${history(summary)}
${advice(summary)}
${environment(summary)}
<footer>Made by stepscope from ${h(summary.schema)}; charts by uPlot (MIT). Every figure is in the summary.json beside this file.</footer>
</main>
<script type="application/json" id="stepscope-charts">${scriptJson(specs)}</script>
<script>${scriptText(assets.uplotJs)}</script>
<script>${PAGE_SCRIPT}</script>
</body>
</html>
`;
}
