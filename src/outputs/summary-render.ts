import { leadingStop, wasteSentence } from '../analysis/summary.js';
import type { Summary } from '../protocol/summary.js';

/** The end-of-job summary for a person: verdict first, then timeline, ranks, GPUs, what to do. */

export type SummaryFormat = 'text' | 'md';

import { fixText } from '../model/costs.js';
import { fixValue, fixValueText } from '../model/fix-value.js';
import { mdProse, mdText } from './markdown.js';
import { jobWideLine, limitersLine, nodeLine, num, otherProcessesLine, pct, RANK_COLUMNS, rankCells, stopLines, withCause } from './summary-text.js';

function table(format: SummaryFormat, header: string[], rows: string[][]): string[] {
  if (format === 'md') {
    // Every cell is text from the run (hosts, GPU and process names): inert, and no `|` ends a cell early.
    return [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`, ...rows.map((row) => `| ${row.map(mdText).join(' | ')} |`)];
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((cell, i) => cell.padEnd(widths[i]!)).join('  ').trimEnd();
  return [line(header), ...rows.map(line)];
}

export function renderSummary(summary: Summary, format: SummaryFormat = 'text'): string {
  const md = format === 'md';
  // In Markdown, what the run named (job, hosts, GPUs, env) is escaped: `name` plain text, `prose` ours quoting it.
  const name = md ? mdText : (text: string) => text;
  const prose = md ? mdProse : (text: string) => text;
  const heading = (text: string) => (md ? `## ${text}` : `${text}\n${'-'.repeat(text.length)}`);
  const out: string[] = [];
  out.push(md ? `# stepscope: ${name(summary.job)}` : `stepscope summary: ${summary.job}`);
  out.push('');
  // A regression against the job's own history comes before anything else.
  if (summary.regression) {
    out.push(md ? `**Regression:** ${prose(summary.regression.text)}` : `REGRESSION: ${summary.regression.text}`);
    out.push('');
  }
  // What the job's bottlenecks cost comes first: the number a person acts on.
  const lost = summary.waste ? wasteSentence(summary.waste) : null;
  if (lost) out.push(md ? `**${prose(lost)}**` : lost);
  out.push(md ? `**${prose(summary.headline)}**` : summary.headline);
  // Pod names come from folders and Prometheus labels: inert in Markdown.
  const wide = jobWideLine(summary);
  if (wide) out.push(prose(wide));
  out.push('');
  const b = summary.breakdown;
  out.push(
    `${summary.steps} steps in ${num(summary.duration_s)} s` +
      ` · step p50 ${num(summary.step_ms.p50, 2)} ms, p90 ${num(summary.step_ms.p90, 2)} ms, p99 ${num(summary.step_ms.p99, 2)} ms` +
      (summary.samples_per_s !== null ? ` · ${num(summary.samples_per_s)} samples/s` : ''),
  );
  out.push(`Step time: data ${pct(b.data)}, h2d ${pct(b.h2d)}, compute ${pct(b.compute)}, other ${pct(b.other)}.`);
  const costs = limitersLine(summary);
  if (costs) out.push(costs);
  if (summary.mfu) {
    const perRank = summary.mfu.ranks.length > 1 ? ` (${summary.mfu.ranks.map((r) => `rank ${r.rank}: ${r.mfu === null ? 'n/a' : pct(r.mfu)}`).join(', ')})` : '';
    const first = summary.mfu.ranks[0]!;
    const flops = first.flops_per_step >= 1e12 ? `${num(first.flops_per_step / 1e12, 2)} TFLOPs` : `${num(first.flops_per_step / 1e9, 2)} GFLOPs`;
    const from = first.flops_from === 'flop_counter' ? 'counted by torch.utils.flop_counter' : first.flops_from === 'user' ? 'given by scope.set_flops_per_step' : 'from the hook';
    const mfu = `MFU: ${summary.mfu.text.replace(/^MFU not measured: /, 'not measured: ').replace(/% MFU /, '% ')}${perRank}; ${flops} a step (${from}).`;
    out.push(md ? prose(mfu) : mfu);
  }
  for (const capture of summary.captures ?? []) {
    const what = `Deep capture ${capture.id} (rank ${capture.rank}, ${capture.steps} steps, ${capture.reason === 'verdict' ? `on ${capture.verdict ?? 'a verdict'}` : capture.reason === 'regression' ? 'on a regression' : 'on demand'}): `;
    const line = what + (capture.file ? `${capture.file} (open it in https://ui.perfetto.dev)` : capture.error ? `no trace: ${capture.error}` : 'no answer');
    out.push(md ? prose(line) : line);
  }
  if (summary.gpu_breakdown) {
    const g = summary.gpu_breakdown;
    out.push(`On the GPU (CUDA events): h2d ${pct(g.h2d)}, compute ${pct(g.compute)}, idle between steps ${pct(g.idle)} of step time.`);
  }
  if (summary.lost > 0) out.push(`The hooks dropped ${summary.lost} step records (buffer full); figures above leave them out.`);
  if (summary.stops?.length) {
    out.push('');
    out.push(heading(summary.stops.length === 1 ? 'Where it stopped' : `Where it stopped (${summary.stops.length} times)`));
    const lead = leadingStop(summary.stops)!;
    for (const stop of [lead, ...summary.stops.filter((s) => s !== lead)]) {
      if (stop !== lead) out.push('');
      // Function and file names come from the run: inert in Markdown like every name it sent.
      out.push(...stopLines(stop).map(prose));
    }
  }
  if (summary.straggler) out.push(`Straggler: ${prose(summary.straggler.text)} (for ${num(summary.straggler.seconds, 0)} s).`);
  if (summary.baseline) {
    out.push('');
    out.push(heading('Against the reference'));
    out.push(prose(summary.baseline.text));
  }

  out.push('');
  out.push(heading('Timeline'));
  const rows = summary.timeline.map((s) => [num(s.start_s), num(s.end_s), withCause(s.verdict, s.cause)]);
  const since = summary.regression?.since_s ?? null;
  if (since !== null) {
    const at = rows.findIndex((row) => Number(row[0]) > since);
    rows.splice(at === -1 ? rows.length : at, 0, [num(since), '', `regression: ${summary.regression!.change_pct}% slower per sample`]);
  }
  out.push(...table(format, ['from (s)', 'to (s)', 'verdict'], rows));

  out.push('');
  out.push(heading('Ranks'));
  out.push(
    ...table(
      format,
      [...RANK_COLUMNS],
      summary.ranks.map((r) => rankCells(r, 'yes')),
    ),
  );

  out.push('');
  out.push(heading('GPUs'));
  if (summary.gpus.length === 0) {
    out.push('No GPU counters were matched to this job (see the sidecar\'s --gpu-source).');
  } else {
    out.push(
      ...table(
        format,
        ['gpu', 'name', 'ranks', 'util', 'SM clock', 'throttle reasons', 'temp max', 'power', 'memory peak'],
        summary.gpus.map((g) => [
          String(g.index),
          g.name ?? 'n/a',
          g.ranks.join(','),
          g.util_mean === null ? 'n/a' : `${num(g.util_mean, 0)}%`,
          `${pct(g.sm_clock_frac_mean)} of ${g.sm_clock_max_mhz ?? 'n/a'} MHz`,
          Object.entries(g.throttle_share).map(([name, share]) => `${name} ${pct(share)}`).join(', ') || 'none',
          g.temp_c_max === null ? 'n/a' : `${g.temp_c_max} °C`,
          `${pct(g.power_frac_mean)} of ${g.power_limit_w ?? 'n/a'} W`,
          g.mem_peak_mib === null ? 'n/a' : `${g.mem_peak_mib} / ${g.mem_total_mib ?? 'n/a'} MiB`,
        ]),
      ),
    );
    const shared = summary.gpus.flatMap((g) => otherProcessesLine(g) ?? []).map(name);
    if (shared.length) out.push('', ...shared);
  }

  if (summary.history?.length) {
    out.push('');
    out.push(heading('Earlier runs of this job'));
    out.push(
      ...table(
        format,
        ['ended', 'run', 'samples/s', 'ms a sample', 'verdict', 'vs its reference'],
        summary.history.map((r) => [
          r.ended_at.replace('T', ' ').slice(0, 16),
          String(r.run),
          num(r.samples_per_s),
          r.ms_per_sample === null ? 'n/a' : r.ms_per_sample.toFixed(3),
          withCause(r.verdict, r.cause),
          r.change_pct === null ? '' : `${r.change_pct >= 0 ? '+' : ''}${r.change_pct}%${r.regression ? ' regression' : ''}`,
        ]),
      ),
    );
  }

  if (summary.causes?.length) {
    out.push('');
    out.push(heading('What fixing each cause buys'));
    // Each folded over the time its verdict held: a line for each verdict (summaries before the fold have none).
    summary.causes.forEach((c, i) => {
      if (c.verdict && c.verdict !== summary.causes![i - 1]?.verdict) out.push(`While ${c.verdict} (${c.seconds} s):`);
      const value = fixValueText(fixValue(c, summary.waste ?? null, summary.world_size));
      out.push(`${i + 1}. ${fixText(c)}${value ? ` ${value}` : ''}.`);
    });
  }

  out.push('');
  out.push(heading('What to do'));
  if (summary.recommendations.length === 0) out.push('Nothing to recommend.');
  summary.recommendations.forEach((r, i) => out.push(`${i + 1}. ${prose(r.text)}${r.because ? (md ? ` _(${prose(r.because)})_` : ` (${r.because})`) : ''}`));
  if (summary.evidence) {
    out.push('');
    out.push(heading('Evidence'));
    out.push(prose(summary.evidence.rule) + '.');
    const figures = Object.entries(summary.evidence.figures).filter(([, v]) => v !== null);
    out.push(name(figures.map(([k, v]) => `${k}=${typeof v === 'number' ? Number(v.toFixed(4)) : v}`).join(' ')));
  }
  const env = Object.entries(summary.env)
    .filter(([k]) => ['python', 'torch', 'cuda', 'cudnn', 'gpu_name', 'driver'].includes(k))
    .map(([k, v]) => `${k} ${String(v)}`);
  if (env.length) {
    out.push('');
    out.push(`Environment: ${name(env.join(', '))}.`);
  }
  if (summary.node) {
    if (!env.length) out.push('');
    out.push(name(nodeLine(summary.node)));
  }
  return out.join('\n') + '\n';
}
