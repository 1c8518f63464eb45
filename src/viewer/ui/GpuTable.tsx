import { Box, Text } from 'ink';
import { type ReactNode } from 'react';
import { fit, fmtNum, fmtPct } from '../format.js';
import { fitColumns } from '../layout.js';
import { TableRow } from './TableRow.js';
import type { GpuRow } from '../model/job-view.js';
import { HARMFUL_REASONS, levelColour, Paint, useColour } from './theme.js';

type Key = 'gpu' | 'name' | 'util' | 'clock' | 'reasons' | 'temp' | 'power' | 'mem' | 'ranks';

const COLUMNS: Array<{ key: Key; width: number; keep: number; header: string; align?: 'right' }> = [
  { key: 'gpu', width: 5, keep: 10, header: 'gpu', align: 'right' },
  { key: 'name', width: 24, keep: 3, header: 'name' },
  { key: 'util', width: 15, keep: 9, header: 'util' },
  { key: 'clock', width: 19, keep: 9, header: 'SM clock' },
  { key: 'reasons', width: 24, keep: 8, header: 'throttle reasons' },
  { key: 'temp', width: 6, keep: 8, header: 'temp' },
  { key: 'power', width: 15, keep: 6, header: 'power' },
  { key: 'mem', width: 22, keep: 4, header: 'memory' },
  { key: 'ranks', width: 6, keep: 5, header: 'ranks' },
];

/** A 10-cell gauge of a percent. */
function Gauge({ pct, colour }: { pct: number | null; colour: string | null }) {
  const on = useColour();
  const filled = pct === null ? 0 : Math.round(Math.min(100, Math.max(0, pct)) / 10);
  return (
    <Text>
      <Text color={on && colour ? colour : undefined}>{'█'.repeat(filled)}</Text>
      <Text dimColor>{(on ? '█' : '·').repeat(10 - filled)}</Text>
    </Text>
  );
}

const ratio = (a: number | null, b: number | null) => (a !== null && b ? (100 * a) / b : null);
const pair = (a: number | null, b: number | null, unit: string) => (a === null ? '–' : `${Math.round(a)}/${b === null ? '?' : Math.round(b)} ${unit}`);

function cells(g: GpuRow, showNode: boolean): Record<Key, ReactNode> {
  const smPct = ratio(g.smMHz, g.smMaxMHz);
  const harmful = g.throttle.some((n) => HARMFUL_REASONS.has(n));
  return {
    gpu: fit(String(g.index), 5, 'right'),
    name: fit(showNode ? `${g.node} ${g.name ?? ''}` : (g.name ?? '–'), 24),
    // Low utilization is the symptom worth seeing: red when mostly idle.
    util: (
      <>
        <Gauge pct={g.util} colour={levelColour(g.util === null ? null : 100 - g.util, 30, 60)} />
        {fit(fmtPct(g.util), 5, 'right')}
      </>
    ),
    clock: <Paint colour={smPct !== null && smPct < 85 ? 'red' : null}>{fit(`${pair(g.smMHz, g.smMaxMHz, 'MHz')} ${fmtPct(smPct)}`, 19)}</Paint>,
    reasons: (
      <Paint colour={harmful ? 'red' : null} dim={!harmful}>
        {fit(g.throttle.length ? g.throttle.join(',') : '–', 24)}
      </Paint>
    ),
    temp: <Paint colour={levelColour(g.tempC, 80, 87)}>{fit(g.tempC === null ? '–' : `${fmtNum(g.tempC)} °C`, 6)}</Paint>,
    power: fit(`${pair(g.powerW, g.powerLimitW, 'W')} ${fmtPct(ratio(g.powerW, g.powerLimitW))}`, 15),
    mem: fit(`${pair(g.memUsedMiB, g.memTotalMiB, 'MiB')} ${fmtPct(ratio(g.memUsedMiB, g.memTotalMiB))}`, 22),
    ranks: fit(g.ranks.join(',') || '–', 6),
  };
}

/** Per GPU: utilization, SM clock against its maximum, throttle reasons, temperature, power, memory. */
export function GpuTable({ gpus, shown, columns, showNode }: { gpus: GpuRow[]; shown: number; columns: number; showNode: boolean }) {
  const keys = fitColumns(COLUMNS, columns);
  const hidden = gpus.length - shown;
  const visible = hidden > 0 ? gpus.slice(0, Math.max(0, shown - 1)) : gpus;
  const headers = Object.fromEntries(COLUMNS.map((c) => [c.key, fit(c.key === 'name' && showNode ? 'node, name' : c.header, c.width, c.align)])) as Record<Key, ReactNode>;
  return (
    <Box flexDirection="column">
      <Text bold wrap="truncate-end">
        <TableRow keys={keys} content={headers} />
      </Text>
      {gpus.length === 0 ? <Text dimColor>{"      no GPU counters (see the sidecar's --gpu-source)"}</Text> : null}
      {visible.map((g) => (
        <Text key={g.key} wrap="truncate-end" dimColor={g.stale}>
          <TableRow keys={keys} content={cells(g, showNode)} />
        </Text>
      ))}
      {hidden > 0 && shown > 0 ? <Text dimColor>{`      … ${gpus.length - visible.length} more GPUs`}</Text> : null}
    </Box>
  );
}
