import { Box, Text } from 'ink';
import type { RunsResponse } from '../../protocol/runs.js';
import { fit, fmtMs, fmtRate, withCause } from '../format.js';
import { Paint, VERDICT_COLOUR } from './theme.js';

const when = (iso: string) => iso.replace('T', ' ').slice(5, 16);
const change = (pct: number | null) => (pct === null ? '–' : `${pct >= 0 ? '+' : ''}${pct.toFixed(1)}%`);

/** The job's earlier runs, newest first: when, how fast per sample, their verdicts, against their references. */
export function RunsPanel({ job, runs, lines }: { job: string; runs: RunsResponse | null; lines: number }) {
  const heading = (
    <Text bold wrap="truncate-end">
      Runs of {job}{' '}
      <Text dimColor>
        {runs
          ? `newest first · ${runs.reference ? `compared with ${runs.reference.label}` : 'nothing to compare with yet'} · a regression is ${runs.threshold_pct}% slower per sample${runs.skipped ? ` · ${runs.skipped} unreadable history files` : ''}`
          : 'asking the sidecar…'}
      </Text>
    </Text>
  );
  if (!runs || runs.runs.length === 0) {
    return (
      <Box flexDirection="column">
        {heading}
        <Text dimColor>{runs ? '  No earlier run of this job in the sidecar\'s history (--out, or --history).' : ' '}</Text>
      </Box>
    );
  }
  const shown = runs.runs.slice(0, Math.max(1, lines - 2));
  return (
    <Box flexDirection="column">
      {heading}
      <Text bold wrap="truncate-end">
        {fit('ended (UTC)', 13)} {fit('run', 4, 'right')} {fit('samples/s', 9, 'right')} {fit('ms/sample', 9, 'right')} {fit('step ms', 8, 'right')} {fit('vs ref', 8, 'right')} verdict
      </Text>
      {shown.map((run) => (
        <Text key={`${run.ended_at}-${run.run}`} wrap="truncate-end">
          {fit(when(run.ended_at), 13)} {fit(String(run.run), 4, 'right')} {fit(fmtRate(run.samples_per_s), 9, 'right')} {fit(run.ms_per_sample === null ? '–' : run.ms_per_sample.toFixed(3), 9, 'right')} {fit(fmtMs(run.step_ms_mean), 8, 'right')}{' '}
          <Paint colour={run.regression ? 'red' : null} bold={run.regression}>
            {fit(change(run.change_pct), 8, 'right')}
          </Paint>{' '}
          <Paint colour={VERDICT_COLOUR[run.verdict]}>{withCause(run.verdict, run.cause)}</Paint>
          {run.regression ? <Paint colour="red"> regression</Paint> : null}
        </Text>
      ))}
    </Box>
  );
}
