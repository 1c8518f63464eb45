import type { Summary } from '../protocol/summary.js';
import type { SummarySeries } from '../protocol/summary.js';

/**
 * What the report's charts draw, made from a summary's series: plain data for the page's script
 * (report-html-page.ts), which only draws. Pure.
 */

export interface ChartLine {
  label: string;
  values: Array<number | null>;
  colour: string;
  width: number;
  dash: number[] | null;
  /** Stacked charts: the line's own values (the drawn ones are cumulative). */
  raw: Array<number | null> | null;
  /** Filled down to zero (stacked charts). */
  fill: boolean;
  axis: 'left' | 'right';
}

export interface ChartSpec {
  id: string;
  title: string;
  note: string | null;
  unit: string;
  rightUnit: string | null;
  /** Unix seconds: the start of each slice. */
  x: number[];
  lines: ChartLine[];
  /** Shaded stretches (throttling), unix seconds. */
  spans: Array<{ from: number; to: number; label: string }>;
  /** Vertical marks (the regression's start), unix seconds. */
  markers: Array<{ at: number; label: string }>;
  min: number | null;
  max: number | null;
  /** Values drawn (not null): a chart with none is not made. */
  points: number;
}

export const PHASE_COLOUR = { data: '#d4a017', h2d: '#b03fb5', compute: '#2e9e4f', other: '#2a9fb0' } as const;
const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#393b79'];
const STRAGGLER = '#d62728';
/** A GPU counts as throttled in a slice where half its samples had a slowdown reason. */
const THROTTLED_SHARE = 0.5;

const line = (label: string, values: Array<number | null>, colour: string, more: Partial<ChartLine> = {}): ChartLine => ({
  label,
  values,
  colour,
  width: 1.5,
  dash: null,
  raw: null,
  fill: false,
  axis: 'left',
  ...more,
});

const count = (lines: ChartLine[]) => lines.reduce((sum, l) => sum + l.values.filter((v) => v !== null).length, 0);

function chart(spec: Omit<ChartSpec, 'points' | 'rightUnit' | 'spans' | 'markers' | 'note' | 'min' | 'max'> & Partial<ChartSpec>): ChartSpec {
  return { note: null, rightUnit: null, spans: [], markers: [], min: null, max: null, ...spec, points: count(spec.lines) };
}

/** Cumulative sums, so that filled lines drawn largest first stack; null where every part is. */
function stack(parts: Array<Array<number | null>>): Array<Array<number | null>> {
  let running: Array<number | null> = parts[0]!.map(() => null);
  return parts.map((values) => {
    running = values.map((v, i) => (v === null && running[i] === null ? null : (running[i] ?? 0) + (v ?? 0)));
    return running;
  });
}

/** Stretches where any of the GPUs was throttled, merged per GPU. */
function throttleSpans(series: SummarySeries, start: number): ChartSpec['spans'] {
  const spans: ChartSpec['spans'] = [];
  for (const gpu of series.gpus) {
    let open: number | null = null;
    gpu.throttled.forEach((share, i) => {
      const hot = share !== null && share >= THROTTLED_SHARE;
      if (hot && open === null) open = i;
      if (!hot && open !== null) {
        spans.push({ from: start + open * series.slice_s, to: start + i * series.slice_s, label: `gpu ${gpu.index} throttled` });
        open = null;
      }
    });
    if (open !== null) spans.push({ from: start + open * series.slice_s, to: start + gpu.throttled.length * series.slice_s, label: `gpu ${gpu.index} throttled` });
  }
  return spans;
}

export function reportCharts(summary: Summary): ChartSpec[] {
  const series = summary.series;
  if (!series || series.steps.length === 0) return [];
  const start = Date.parse(series.from) / 1000;
  const x = series.steps.map((_, i) => start + i * series.slice_s);
  const since = summary.regression?.since_s ?? null;
  const markers = since !== null ? [{ at: Date.parse(summary.started_at) / 1000 + since, label: 'regression' }] : [];
  const spans = throttleSpans(series, start);
  const straggler = summary.straggler?.rank ?? null;
  const phases = (['data', 'h2d', 'compute', 'other'] as const).map((p) => ({ phase: p, values: series.phase_ms[p] }));
  const stacked = stack(phases.map((p) => p.values));
  const charts: ChartSpec[] = [
    chart({
      id: 'breakdown',
      title: 'Where each step’s time goes',
      note: 'Mean ms a step in each phase, stacked: data wait, host-to-device copies, compute, the rest.',
      unit: 'ms a step',
      x,
      // Largest first, so that each smaller fill is drawn over it.
      lines: phases.map((p, i) => line(p.phase, stacked[i]!, PHASE_COLOUR[p.phase], { raw: p.values, fill: true, width: 1 })).reverse(),
      markers,
      min: 0,
    }),
  ];
  const rate = series.samples_per_s.some((v) => v !== null);
  charts.push(
    chart({
      id: 'throughput',
      title: rate ? 'Throughput' : 'Steps',
      note: rate ? 'Samples a second, all ranks.' : 'Steps a second, all ranks (the loop does not count samples).',
      unit: rate ? 'samples/s' : 'steps/s',
      x,
      lines: [line(rate ? 'samples/s' : 'steps/s', rate ? series.samples_per_s : series.steps.map((n) => (n ? n / series.slice_s : null)), '#1f77b4', { width: 2 })],
      markers,
      min: 0,
    }),
  );
  if (series.ranks.length > 0) {
    const shown = series.ranks.length < series.ranks_total ? ` (${series.ranks.length} of ${series.ranks_total}: the straggler, the slowest and the fastest)` : '';
    charts.push(
      chart({
        id: 'ranks',
        title: 'Step time per rank',
        note: `Mean step time of each rank${shown}.${straggler !== null ? ` Rank ${straggler} is the straggler (red).` : ''}`,
        unit: 'ms',
        x,
        lines: series.ranks.map((r, i) =>
          r.rank === straggler ? line(`rank ${r.rank} · straggler`, r.step_ms, STRAGGLER, { width: 3 }) : line(`rank ${r.rank}`, r.step_ms, PALETTE[i % PALETTE.length]!),
        ),
        markers,
        min: 0,
      }),
    );
  }
  if (series.gpus.length > 0) {
    const colour = (i: number) => PALETTE[i % PALETTE.length]!;
    const throttleNote = spans.length ? ' Shaded: a GPU held back by temperature, power or a hardware slowdown.' : '';
    charts.push(
      chart({
        id: 'gpu-util',
        title: 'GPU utilization and SM clock',
        note: `Utilization (solid) and SM clock as a share of its maximum (dashed), percent.${throttleNote}`,
        unit: '%',
        x,
        lines: series.gpus.flatMap((g, i) => [line(`gpu ${g.index} util`, g.util_pct, colour(i)), line(`gpu ${g.index} SM clock`, g.sm_clock_pct, colour(i), { dash: [6, 4] })]),
        spans,
        markers,
        min: 0,
        max: 100,
      }),
      chart({
        id: 'gpu-power',
        title: 'GPU power and temperature',
        note: `Mean power draw (solid, left) and highest temperature (dashed, right).${throttleNote}`,
        unit: 'W',
        rightUnit: '°C',
        x,
        lines: series.gpus.flatMap((g, i) => [line(`gpu ${g.index} power`, g.power_w, colour(i)), line(`gpu ${g.index} temp`, g.temp_c_max, colour(i), { dash: [6, 4], axis: 'right' })]),
        spans,
        markers,
        min: 0,
      }),
      chart({
        id: 'gpu-memory',
        title: 'GPU memory',
        note: 'Most memory in use in each slice, MiB.',
        unit: 'MiB',
        x,
        lines: series.gpus.map((g, i) => line(`gpu ${g.index}`, g.mem_used_mib_max, colour(i))),
        min: 0,
        max: Math.max(0, ...summary.gpus.map((g) => g.mem_total_mib ?? 0)) || null,
      }),
    );
  }
  return charts.filter((c) => c.points > 0);
}
