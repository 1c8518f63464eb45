import { Box, Text } from 'ink';
import { fmtClock, fmtDuration, withCause } from '../format.js';
import type { RegressionView, SourceLine, StopView, WatchView } from '../model/job-view.js';
import { framesText } from '../../protocol/capture.js';
import { rankList } from '../../model/stall.js';
import { regressionHeadline } from '../model/regressions.js';
import { Paint, useColour, VERDICT_COLOUR } from './theme.js';

function waiting(sources: SourceLine[]): [string, string] {
  const down = sources.find((s) => s.status !== 'live');
  if (down && sources.every((s) => s.status !== 'live')) {
    return [down.status === 'connecting' ? `Connecting to ${down.url}…` : `Sidecar unreachable: reconnecting… (${down.error ?? 'no answer'})`, 'The viewer keeps trying; start the sidecar with `stepscope serve`.'];
  }
  return ['Waiting for a training job.', 'In the loop: scope = stepscope.init() with STEPSCOPE_URL=ws://HOST:PORT/v1/ingest (see README).'];
}

/** The job's verdict, why, and what to do first, in a box the colour of the verdict. */
export function Banner({ view, width }: { view: WatchView; width: number }) {
  const colourOn = useColour();
  const banner = view.job?.banner ?? null;
  const stale = view.sources.some((s) => s.status !== 'live');
  const colour = banner ? VERDICT_COLOUR[banner.verdict] : 'gray';
  let lines: React.ReactNode[];
  const job = view.job;
  const stop = job?.stop ?? null;
  if (stop) {
    lines = stopLines(stop, banner?.recommendation ?? null, job?.ended ?? false, stale);
  } else if (!banner) {
    const [first, second] = job?.ended
      ? [`Job ended (${job.endReason ?? 'ended'})${job.finalVerdict ? `: last verdict ${withCause(job.finalVerdict.verdict, job.finalVerdict.cause)}` : ''}.`, 'Its timeline is below; its summary and report are in the sidecar\'s --out.']
      : job
        ? ['Waiting for the first verdict…', 'Verdicts start after 20 steps (warm-up).']
        : waiting(view.sources);
    lines = [<Text key="a" bold>{first}</Text>, <Text key="b">{second}</Text>, <Text key="c"> </Text>, <Text key="d"> </Text>];
  } else {
    const pending = banner.pending ? `   next? ${withCause(banner.pending.verdict, banner.pending.cause)} (holding ${banner.pending.forS.toFixed(1)} s)` : '';
    const whose = banner.rank !== null ? `   (rank ${banner.rank}${job?.straggler?.rank === banner.rank ? ', the straggler' : ''})` : '';
    // An ended job's verdict is its last: it held until the job's last step.
    const when = job?.ended ? `final verdict, held ${fmtDuration(banner.heldS)} until the job ended at ${fmtClock(banner.since + banner.heldS * 1000)}` : `since ${fmtClock(banner.since)} (${fmtDuration(banner.heldS)})`;
    lines = [
      <Text key="a" wrap="truncate-end">
        <Paint colour={colour} bold>
          {banner.verdict.toUpperCase()}
        </Paint>
        {banner.cause ? <Paint bold> {banner.cause}</Paint> : null}
        <Text>
          {'   '}
          {when}
          {whose}
        </Text>
        <Paint dim>{pending}</Paint>
        {stale ? <Paint colour="red"> · stale: reconnecting…</Paint> : null}
      </Text>,
      <Text key="b" wrap="truncate-end">
        {banner.rule}
      </Text>,
      <Text key="c" wrap="truncate-end">
        {banner.costs ? <Paint colour="yellow">{banner.costs} </Paint> : null}
        <Paint dim>{banner.figures}</Paint>
      </Text>,
      <Text key="d" wrap="truncate-end">
        {banner.recommendation ? `→ ${banner.recommendation}` : ' '}
      </Text>,
    ];
  }
  const border = stop ? VERDICT_COLOUR[stop.verdict] : colour;
  return (
    <Box flexDirection="column" borderStyle="round" borderColor={colourOn ? border : undefined} paddingX={1} width={width}>
      {lines}
    </Box>
  );
}

/** A job that stopped: for how long, who the others wait for, where in its own code, what they wait in, what to do. */
function stopLines(stop: StopView, recommendation: string | null, ended: boolean, stale: boolean): React.ReactNode[] {
  const who = `rank${stop.culprits.length === 1 ? '' : 's'} ${rankList(stop.culprits)}`;
  const head = stop.verdict === 'gone' ? `${who} gone after step ${stop.step}` : `${ended ? 'for ' : ''}${fmtDuration(stop.seconds)} without a step, after step ${stop.step}${stop.culprits.length ? ` · ${who} ${stop.cause === 'busy' ? 'busy outside its steps' : 'stopped'}` : ''}`;
  const where = stop.where.length ? `${who}: ${framesText(stop.where, 3)}` : stop.text;
  const waits = stop.waiting.length
    ? `rank${stop.waiting.length === 1 ? '' : 's'} ${rankList(stop.waiting)} ${stop.waiting.length === 1 ? 'waits' : 'wait'}${stop.waitsIn ? ` in ${stop.waitsIn}` : ' for it'}`
    : stop.text;
  return [
    <Text key="a" wrap="truncate-end">
      <Paint colour={VERDICT_COLOUR[stop.verdict]} bold>
        {stop.verdict.toUpperCase()}
      </Paint>
      {stop.cause ? <Paint bold> {stop.cause}</Paint> : null}
      <Text>
        {'   '}
        {head}
        {ended ? ' (as the job ended)' : ''}
      </Text>
      {stale ? <Paint colour="red"> · stale: reconnecting…</Paint> : null}
    </Text>,
    <Text key="b" wrap="truncate-end">
      <Paint bold>{where}</Paint>
    </Text>,
    <Text key="c" wrap="truncate-end">
      {waits === where ? ' ' : waits}
    </Text>,
    <Text key="d" wrap="truncate-end">
      {recommendation ? `→ ${recommendation}` : ' '}
    </Text>,
  ];
}

/** Slower than this many percent per sample shows red; the sidecar's own threshold decides its regression events. */
const SLOWER_PCT = 10;

/** One line under the banner: this run against its reference, as the sidecar compares them. */
export function ComparisonLine({ comparison }: { comparison: { headline: string; changePct: number | null } }) {
  const slower = comparison.changePct !== null && comparison.changePct >= SLOWER_PCT;
  const faster = comparison.changePct !== null && comparison.changePct <= -2;
  return (
    <Text wrap="truncate-end">
      <Paint bold>{' compared: '}</Paint>
      <Paint colour={slower ? 'red' : faster ? 'green' : null} bold={slower}>
        {comparison.headline}
      </Paint>
    </Text>
  );
}

/** One line under the banner while a regression holds (for an ended run: the one it ended with). */
export function RegressionLine({ regression, runEnded }: { regression: RegressionView; runEnded: boolean }) {
  const where = regression.node === null ? '' : ` (${regression.node})`;
  return (
    <Text wrap="truncate-end">
      <Paint colour="red" bold>
        {` ${regressionHeadline(regression, runEnded, fmtClock)}${where}`}
      </Paint>
    </Text>
  );
}
