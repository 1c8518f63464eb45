import { Box, Text } from 'ink';
import { type ReactNode } from 'react';
import { fit, fmtMs, fmtRate, fmtShare, PARTS, withCause } from '../format.js';
import { fitColumns } from '../layout.js';
import { TableRow } from './TableRow.js';
import type { RankRow } from '../model/job-view.js';
import { StackedBar } from './StackedBar.js';
import { Paint, PART_COLOUR, VERDICT_COLOUR } from './theme.js';

const BAR_MIN = 10;
const BAR_MAX = 40;

type Key = 'rank' | 'host' | 'steps' | 'p50' | 'p90' | 'rate' | 'bar' | 'shares' | 'verdict' | 'mark';

const COLUMNS: Array<{ key: Key; width: number; keep: number; header: string; align?: 'right' }> = [
  { key: 'rank', width: 5, keep: 10, header: 'rank', align: 'right' },
  { key: 'host', width: 14, keep: 1, header: 'host' },
  { key: 'steps', width: 8, keep: 3, header: 'steps', align: 'right' },
  { key: 'p50', width: 8, keep: 9, header: 'p50 ms', align: 'right' },
  { key: 'p90', width: 8, keep: 4, header: 'p90 ms', align: 'right' },
  { key: 'rate', width: 9, keep: 2, header: 'samples/s', align: 'right' },
  { key: 'bar', width: BAR_MIN, keep: 7, header: 'step time' },
  { key: 'shares', width: 20, keep: 5, header: ' data  h2d comp othr' },
  { key: 'verdict', width: 30, keep: 10, header: 'verdict' },
  { key: 'mark', width: 11, keep: 8, header: '' },
];

/** The columns that fit, and how wide the bar can be with them. */
export function rankColumns(columns: number): { keys: Key[]; bar: number } {
  const keys = fitColumns(COLUMNS, columns);
  const used = COLUMNS.filter((c) => keys.includes(c.key)).reduce((sum, c) => sum + c.width + 1, 0);
  return { keys, bar: Math.min(BAR_MAX, BAR_MIN + Math.max(0, columns - used)) };
}

function cells(r: RankRow, bar: number): Record<Key, ReactNode> {
  return {
    rank: fit(String(r.rank), 5, 'right'),
    host: fit(r.host, 14),
    steps: fit(String(r.steps), 8, 'right'),
    p50: fit(fmtMs(r.p50), 8, 'right'),
    p90: fit(fmtMs(r.p90), 8, 'right'),
    rate: fit(fmtRate(r.samplesPerS), 9, 'right'),
    bar: <StackedBar shares={r.breakdown} width={bar} />,
    shares: PARTS.map((part) => (
      <Paint key={part} colour={PART_COLOUR[part]}>
        {fit(fmtShare(r.breakdown?.[part]), 5, 'right')}
      </Paint>
    )),
    verdict: <Paint colour={r.verdict ? VERDICT_COLOUR[r.verdict] : null}>{fit(r.verdict ? withCause(r.verdict, r.cause) : 'no verdict yet', 30)}</Paint>,
    mark: r.straggler ? (
      <Paint colour="red" bold>
        ◀ straggler
      </Paint>
    ) : (
      fit(r.state === 'running' ? '' : r.state, 11)
    ),
  };
}

/** The first `count` ranks, the straggler always among them. */
function withStraggler(ranks: RankRow[], count: number): RankRow[] {
  const first = ranks.slice(0, count);
  const straggler = ranks.find((r) => r.straggler);
  if (!straggler || count === 0 || first.includes(straggler)) return first;
  return [...first.slice(0, count - 1), straggler];
}

/** Per rank: step time p50/p90, throughput, where the step goes, the rank's verdict, and the straggler. */
export function RankTable({ ranks, shown, columns }: { ranks: RankRow[]; shown: number; columns: number }) {
  const { keys, bar } = rankColumns(columns);
  const hidden = ranks.length - shown;
  const visible = hidden > 0 ? withStraggler(ranks, Math.max(0, shown - 1)) : ranks;
  const headers = Object.fromEntries(
    COLUMNS.map((c) => [c.key, fit(c.header, c.key === 'bar' ? bar : c.width, c.align)]),
  ) as Record<Key, ReactNode>;
  return (
    <Box flexDirection="column">
      <Text bold wrap="truncate-end">
        <TableRow keys={keys} content={headers} />
      </Text>
      {visible.map((r) => (
        <Text key={r.key} wrap="truncate-end" dimColor={r.stale || r.state !== 'running'}>
          <TableRow keys={keys} content={cells(r, bar)} />
        </Text>
      ))}
      {hidden > 0 && shown > 0 ? <Text dimColor>{`      … ${ranks.length - visible.length} more ranks`}</Text> : null}
    </Box>
  );
}
