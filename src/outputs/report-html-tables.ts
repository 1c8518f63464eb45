import type { Summary } from '../protocol/summary.js';
import { h, num, pct, table, withCause } from './report-html-text.js';
import { nodeLine, otherProcessesLine, RANK_COLUMNS, rankCells } from './summary-text.js';
import { LIMITER_WORDS } from '../model/costs.js';
import { fixValue, fixValueText } from '../model/fix-value.js';

/** The report's tables: what costs time, ranks, GPUs, the job's earlier runs, what to do, the environment. Pure. */

/** The limiters that cost the job at least 5% of its time, and what fixing each cause would buy. */
export function costs(s: Summary): string {
  const limiters = s.limiters ?? [];
  const causes = s.causes ?? [];
  if (!limiters.length && !causes.length) return '';
  const costRows = limiters.map((l) => [h(LIMITER_WORDS[l.limiter]), pct(l.share), h(l.level)]);
  const fixRows = causes.map((c) => [
    h(c.cause ?? LIMITER_WORDS[c.limiter]),
    c.verdict ? `${h(c.verdict)}, ${c.seconds} s` : '',
    c.gain === null ? `up to ${pct(c.upto)}: unknown, ${h(c.unknown ?? '')}` : pct(c.gain),
    h(fixValueText(fixValue(c, s.waste ?? null, s.world_size)).replace(/^→ /, '') || 'n/a'),
    h(c.basis),
  ]);
  return `<section id="costs"><h2>What costs time</h2>${costRows.length ? table(['limiter', 'share of step time', 'level'], costRows, [1]) : ''}${
    fixRows.length ? `<h3 style="margin-top:12px">What fixing each cause buys</h3>${table(['cause', 'while (folded over)', 'step time back', 'what it buys', 'rests on'], fixRows)}` : ''
  }</section>`;
}

/** The deep captures: each trace linked (relative to the report, both under --out), to open in Perfetto. */
export function captures(s: Summary): string {
  const list = s.captures ?? [];
  if (!list.length) return '';
  const rows = list.map((c) => [
    String(c.rank),
    String(c.steps),
    h(c.reason === 'verdict' ? `on ${c.verdict ?? 'a verdict'}` : c.reason === 'regression' ? 'on a regression' : 'on demand'),
    c.file ? `<a href="${h(c.file.split('/').map(encodeURIComponent).join('/'))}">${h(c.file)}</a>` : h(c.error ? `no trace: ${c.error}` : 'no answer'),
  ]);
  return `<section id="captures"><h2>Deep captures</h2><p class="note">torch.profiler windows, gzipped Chrome trace JSON: open them in https://ui.perfetto.dev.</p>${table(['rank', 'steps', 'why', 'trace'], rows, [0, 1])}</section>`;
}

export function ranks(s: Summary): string {
  const rows = s.ranks.map((r) => rankCells(r, 'straggler').map(h));
  const straggler = s.straggler ? `<p class="note">Straggler: ${h(s.straggler.text)} (for ${num(s.straggler.seconds, 0)} s).</p>` : '';
  return `<section id="ranks"><h2>Ranks</h2>${straggler}${table([...RANK_COLUMNS.slice(0, -1), ''], rows, [0, 2, 3, 4, 5, 6, 7, 8], (i) => (s.ranks[i]!.straggler ? 'straggler' : ''))}</section>`;
}

export function gpus(s: Summary): string {
  if (s.gpus.length === 0) return '<section id="gpus"><h2>GPUs</h2><p class="note">No GPU counters were matched to this job (see the sidecar\'s --gpu-source).</p></section>';
  const rows = s.gpus.map((g) => [
    String(g.index),
    h(g.name ?? 'n/a'),
    g.ranks.join(', '),
    g.util_mean === null ? 'n/a' : `${num(g.util_mean, 0)}%`,
    `${pct(g.sm_clock_frac_mean)} of ${g.sm_clock_max_mhz ?? 'n/a'} MHz`,
    h(Object.entries(g.throttle_share).map(([name, share]) => `${name} ${pct(share)}`).join(', ') || 'none'),
    g.temp_c_max === null ? 'n/a' : `${g.temp_c_max} °C`,
    `${pct(g.power_frac_mean)} of ${g.power_limit_w ?? 'n/a'} W`,
    g.mem_peak_mib === null ? 'n/a' : `${g.mem_peak_mib} / ${g.mem_total_mib ?? 'n/a'} MiB`,
  ]);
  const shared = s.gpus.flatMap((g) => otherProcessesLine(g) ?? []).map((line) => `<p class="note">${h(line)}</p>`);
  return `<section id="gpus"><h2>GPUs</h2>${table(['gpu', 'name', 'ranks', 'util', 'SM clock', 'throttle reasons', 'temp max', 'power', 'memory peak'], rows, [0])}${shared.join('')}</section>`;
}

export function history(s: Summary): string {
  if (!s.history || s.history.length === 0) return '';
  const rows = s.history.map((r) => [
    h(r.ended_at.replace('T', ' ').slice(0, 16)),
    String(r.run),
    h(r.gpu_name ?? 'n/a'),
    String(r.world_size),
    num(r.samples_per_s),
    r.ms_per_sample === null ? 'n/a' : r.ms_per_sample.toFixed(3),
    num(r.step_ms_mean, 2),
    h(withCause(r.verdict, r.cause)),
    r.change_pct === null ? '' : `${r.change_pct >= 0 ? '+' : ''}${r.change_pct}%${r.regression ? ' (regression)' : ''}`,
  ]);
  return `<section id="history"><h2>This job's earlier runs</h2>${table(['ended (UTC)', 'run', 'GPU', 'ranks', 'samples/s', 'ms a sample', 'step ms', 'verdict', 'vs its reference'], rows, [1, 3, 4, 5, 6])}</section>`;
}

export function advice(s: Summary): string {
  const items = s.recommendations.map((r) => `<li>${h(r.text)}${r.because ? ` <span class="because">(${h(r.because)})</span>` : ''}</li>`).join('');
  const evidence = s.evidence
    ? `<h3 style="margin-top:12px">Evidence</h3><p>${h(s.evidence.rule)}.</p><pre>${h(
        Object.entries(s.evidence.figures)
          .filter(([, v]) => v !== null)
          .map(([k, v]) => `${k}=${typeof v === 'number' ? Number(v.toFixed(4)) : v}`)
          .join(' '),
      )}</pre>`
    : '';
  return `<section id="advice"><h2>What to do</h2>${items ? `<ol>${items}</ol>` : '<p>Nothing to recommend.</p>'}${evidence}</section>`;
}

export function environment(s: Summary): string {
  const rows = Object.entries(s.env).map(([k, v]) => [h(k), h(typeof v === 'string' ? v : JSON.stringify(v))]);
  const node = s.node ? `<p class="note">${h(nodeLine(s.node))}</p>` : '';
  return rows.length || node ? `<section id="env"><h2>Environment</h2>${node}${rows.length ? table(['key', 'value'], rows) : ''}</section>` : '';
}
