import { Box, Text } from 'ink';
import { fmtClock, fmtDuration, fmtMs, fmtRate } from '../format.js';
import type { JobView, SourceLine, WatchView } from '../model/job-view.js';
import { Paint } from './theme.js';

function jobSummary(job: JobView): string {
  const parts = [
    `job ${job.id}`,
    `${job.ranks.length}/${job.worldSize} ranks`,
    `${job.nodes.length} node${job.nodes.length === 1 ? '' : 's'}`,
    `${job.steps} steps`,
    job.ended ? `ended after ${fmtDuration(job.durationS)} (${job.endReason ?? 'ended'})` : `up ${fmtDuration(job.durationS)}`,
  ];
  if (job.stepP50 !== null) parts.push(`step p50 ${fmtMs(job.stepP50)} ms`);
  if (job.samplesPerS !== null) parts.push(`${fmtRate(job.samplesPerS)} samples/s`);
  return parts.join(' · ');
}

export function Header({ view, now }: { view: WatchView; now: number }) {
  return (
    <Box justifyContent="space-between" height={1}>
      <Text wrap="truncate-end">
        <Text bold>stepscope</Text> {view.job ? jobSummary(view.job) : 'no job yet'}
      </Text>
      <Text> {fmtClock(now)}</Text>
    </Box>
  );
}

function sourceText(source: SourceLine): { text: string; colour: string } {
  switch (source.status) {
    case 'live': {
      const live = `● live ${source.rateHz ?? '?'}/s${source.gpuSource ? ` · GPU counters: ${source.gpuSource}` : ''}`;
      if (!source.refused) return { text: live, colour: 'green' };
      const { count, reason } = source.refused;
      return { text: `${live} · refused ${count} frame${count === 1 ? '' : 's'}: ${reason}`, colour: 'yellow' };
    }
    case 'connecting':
      return { text: '○ connecting…', colour: 'yellow' };
    case 'reconnecting': {
      const retry = source.retryInMs === null ? 'now' : `in ${(source.retryInMs / 1000).toFixed(1)} s`;
      return { text: `○ reconnecting… (attempt ${source.attempt}, ${retry}${source.error ? `: ${source.error}` : ''})`, colour: 'red' };
    }
  }
}

export function Footer({ view, said = null, capture = false }: { view: WatchView; said?: string | null; capture?: boolean }) {
  const more = view.jobs.length > 1 ? `  tab next job (${view.jobs.length})` : '';
  return (
    <Text wrap="truncate-end">
      <Text inverse> q </Text> quit  <Text inverse> r </Text> runs{capture ? <Text>  <Text inverse> c </Text> capture</Text> : null}{more}
      {said ? `  │ ${said}` : ''}
      {view.sources.map((source) => {
        const { text, colour } = sourceText(source);
        return (
          <Text key={source.url}>
            {'  │ '}
            {source.url.replace(/\/v1\/stream$/, '')} <Paint colour={colour}>{text}</Paint>
          </Text>
        );
      })}
    </Text>
  );
}
