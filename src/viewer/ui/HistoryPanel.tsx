import { Box, Text } from 'ink';
import type { Verdict } from '../../model/verdict.js';
import { fit, fmtClock, fmtDuration, fmtMs, fmtPct, resample, runs, sparkline, VERDICT_LETTER, withCause } from '../format.js';
import type { HistoryView, SparkRow } from '../model/history-view.js';
import type { JobView } from '../model/job-view.js';
import { regressionChange } from '../model/regressions.js';
import { Paint, useColour, VERDICT_COLOUR } from './theme.js';

const LABEL = 11;
const NAME = 14;
const VALUE = 9;

export function sparkWidth(columns: number): number {
  return Math.max(10, columns - 1 - LABEL - NAME - VALUE - 2);
}

interface Line {
  label: string;
  row: SparkRow;
  scale: { min?: number; max?: number };
  value: (x: number | null) => string;
  colour: string;
}

/** Where there is no room for every rank: the straggler first, then the slowest. */
function byInterest(rows: SparkRow[], straggler: number | null): SparkRow[] {
  return rows.slice().sort((a, b) => Number(b.rank === straggler) - Number(a.rank === straggler) || (b.latest ?? 0) - (a.latest ?? 0) || (a.rank ?? 0) - (b.rank ?? 0));
}

/** Rows of each kind taken in turn (step time, utilization, clock) until `count`, then shown grouped by kind. */
export function pickSparks(kinds: Line[][], count: number): Line[] {
  const picked = new Set<Line>();
  for (let i = 0; picked.size < count && kinds.some((k) => i < k.length); i++) for (const kind of kinds) if (i < kind.length && picked.size < count) picked.add(kind[i]!);
  return kinds.flat().filter((line) => picked.has(line));
}

function VerdictStrip({ verdicts, width }: { verdicts: Array<Verdict | null>; width: number }) {
  const colour = useColour();
  // One verdict per column: the last slice of each column's group, matching the resampled sparklines.
  const per = Math.max(1, Math.ceil(verdicts.length / width));
  const columns: Array<Verdict | null> = [];
  for (let end = verdicts.length; end > 0 && columns.length < width; end -= per) columns.unshift(verdicts[end - 1] ?? null);
  return (
    <Text>
      {' '.repeat(Math.max(0, width - columns.length))}
      {runs(columns).map((run, i) => (
        <Text key={i} color={colour && run.value ? VERDICT_COLOUR[run.value] : undefined}>
          {(run.value === null ? ' ' : colour ? '▀' : VERDICT_LETTER[run.value]).repeat(run.length)}
        </Text>
      ))}
    </Text>
  );
}

/** Whether the history has a regression row under the verdict: only where one held in its span. */
export const regressionStripShown = (history: HistoryView) => history.regressed.some((r) => r);

/** Where a regression held, under the verdict strip: a column is marked where any of its slices was. */
function RegressionStrip({ regressed, width }: { regressed: boolean[]; width: number }) {
  const colour = useColour();
  const per = Math.max(1, Math.ceil(regressed.length / width));
  const columns: boolean[] = [];
  for (let end = regressed.length; end > 0 && columns.length < width; end -= per) columns.unshift(regressed.slice(Math.max(0, end - per), end).some((r) => r));
  return (
    <Text>
      {' '.repeat(Math.max(0, width - columns.length))}
      {runs(columns).map((run, i) => (
        <Text key={i} color={colour && run.value ? 'red' : undefined}>
          {(run.value ? (colour ? '▀' : '!') : ' ').repeat(run.length)}
        </Text>
      ))}
    </Text>
  );
}

/** Sparklines of step time and GPU figures over the last minutes, the verdict under them, the timeline and recent changes. */
export function HistoryPanel({ job, columns, sparks, events }: { job: JobView; columns: number; sparks: number; events: number }) {
  const width = sparkWidth(columns);
  const history = job.history;
  const stepMax = Math.max(0, ...(history?.stepMs.flatMap((r) => r.values.filter((v): v is number => v !== null)) ?? []));
  const kinds: Line[][] = history
    ? [
        byInterest(history.stepMs, job.straggler?.rank ?? null).map((row) => ({ label: 'step ms', row, scale: { min: 0, max: stepMax }, value: fmtMs, colour: 'white' })),
        history.gpuUtil.map((row) => ({ label: 'GPU util', row, scale: { min: 0, max: 100 }, value: fmtPct, colour: 'green' })),
        history.gpuClockPct.map((row) => ({ label: 'SM clock', row, scale: { min: 0, max: 100 }, value: fmtPct, colour: 'cyan' })),
      ]
    : [];
  const lines = pickSparks(kinds, sparks);
  const stepLines = lines.filter((l) => l.label === 'step ms').sort((a, b) => (a.row.rank ?? 0) - (b.row.rank ?? 0));
  lines.splice(0, stepLines.length, ...stepLines);
  const span = history ? fmtDuration((history.slices * history.sliceMs) / 1000) : '–';
  const perColumn = history ? Math.max(1, Math.ceil(history.slices / width)) * (history.sliceMs / 1000) : 1;
  const timeline = job.timelines.map((t) => (t.label ? `${t.label}: ` : '') + t.segments.map((s) => `${Math.round(s.start_s)} s ${withCause(s.verdict, s.cause)}`).join(' › '));
  const shownEvents = events > 0 ? job.events.slice(-events) : [];
  return (
    <Box flexDirection="column">
      <Text bold wrap="truncate-end">
        History <Text dimColor>last {span}, {perColumn} s a column</Text>
      </Text>
      {lines.map((line, i) => (
        <Text key={`${line.label}-${line.row.key}`} wrap="truncate-end">
          {fit(i === 0 || lines[i - 1]!.label !== line.label ? line.label : '', LABEL)}
          {fit(line.row.label, NAME)}
          <Paint colour={line.colour}>{fit(sparkline(resample(line.row.values, width), line.scale), width, 'right')}</Paint>
          {fit(line.value(line.row.latest), VALUE, 'right')}
        </Text>
      ))}
      <Text wrap="truncate-end">
        {fit('verdict', LABEL + NAME)}
        {history ? <VerdictStrip verdicts={history.verdicts} width={width} /> : null}
      </Text>
      {history && regressionStripShown(history) ? (
        <Text wrap="truncate-end">
          {fit('regression', LABEL + NAME)}
          <RegressionStrip regressed={history.regressed} width={width} />
        </Text>
      ) : null}
      {timeline.map((text, i) => (
        <Box key={`timeline-${i}`}>
          <Text bold>{fit(i === 0 ? 'Timeline' : '', LABEL)}</Text>
          <Text wrap="truncate-start">{text || 'no verdict yet'}</Text>
        </Box>
      ))}
      {shownEvents.map((e, i) => (
        <Text key={`${e.at}-${e.who}-${e.kind}`} wrap="truncate-end">
          <Text bold>{fit(i === 0 ? 'Changes' : '', LABEL)}</Text>
          {fmtClock(e.at)} {fit(e.who, 8)}{' '}
          {e.kind === 'verdict' ? (
            <>
              {e.from ?? 'start'} → <Paint colour={VERDICT_COLOUR[e.to]}>{withCause(e.to, e.cause)}</Paint>
            </>
          ) : (
            <Paint colour={e.status === 'started' ? 'red' : 'green'}>{regressionChange(e.status, e.text, e.changePct, e.thresholdPct)}</Paint>
          )}
        </Text>
      ))}
    </Box>
  );
}
