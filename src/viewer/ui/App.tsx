import { Box, useApp, useInput, useStdin } from 'ink';
import { useEffect, useState } from 'react';
import { layout } from '../layout.js';
import type { WatchStore } from '../model/watch-store.js';
import { Banner, ComparisonLine, RegressionLine } from './Banner.js';
import { RunsPanel } from './RunsPanel.js';
import { GpuTable } from './GpuTable.js';
import { Footer, Header } from './Header.js';
import { Advice } from './Advice.js';
import { HistoryPanel, regressionStripShown } from './HistoryPanel.js';
import { Notes, notesLines } from './Notes.js';
import { RankTable } from './RankTable.js';
import { ColourContext } from './theme.js';
import { useTerminalSize } from './use-terminal-size.js';

/** Redraws at most this often, however many sidecars send updates. */
const MIN_REDRAW_MS = 100;

function useStoreClock(store: WatchStore): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    let pending: NodeJS.Timeout | null = null;
    const unsubscribe = store.subscribe(() => {
      pending ??= setTimeout(() => {
        pending = null;
        setNow(Date.now());
      }, MIN_REDRAW_MS);
    });
    // Clocks and countdowns move even when no frame comes.
    const tick = setInterval(() => setNow(Date.now()), 1000);
    return () => {
      unsubscribe();
      clearInterval(tick);
      if (pending) clearTimeout(pending);
    };
  }, [store]);
  return now;
}

export function App({ store, colour, onCapture }: { store: WatchStore; colour: boolean; onCapture?: (job: string) => Promise<string> }) {
  const { exit } = useApp();
  const { isRawModeSupported } = useStdin();
  const now = useStoreClock(store);
  const { columns, rows } = useTerminalSize();
  const [showRuns, setShowRuns] = useState(false);
  const [said, setSaid] = useState<string | null>(null);
  useInput(
    (input, key) => {
      // A deep capture of the job shown: the answer stays on the footer line until the next.
      const shown = store.view(Date.now()).job;
      if ((input === 'c' || input === 'C') && onCapture && shown && !shown.ended) void onCapture(shown.id).then(setSaid, (error: Error) => setSaid(`no capture: ${error.message}`));
      if (input === 'q' || input === 'Q' || key.escape) exit();
      if (key.tab || input === 'n') store.nextJob(Date.now());
      if (input === 'r' || input === 'R') setShowRuns((shown) => !shown);
    },
    { isActive: isRawModeSupported === true },
  );
  const view = store.view(now);
  const job = view.job;
  const sparksWanted = job?.history ? job.history.stepMs.length + 2 * job.history.gpuUtil.length : 0;
  const extraTimelines = Math.max(0, (job?.timelines.length ?? 1) - 1);
  const advice = job?.banner?.recommendations.slice(1) ?? [];
  // The comparison line takes a line of its own, when the sidecar compares the run with something.
  const comparisonLines = job?.comparison ? 1 : 0;
  // So do a regression holding, and the row that marks it under the verdict strip.
  const regressionLines = (job?.regression ? 1 : 0) + (job?.history && !showRuns && regressionStripShown(job.history) ? 1 : 0);
  const fit = layout(rows - comparisonLines - regressionLines - notesLines(job?.notes), { ranks: job?.ranks.length ?? 0, gpus: Math.max(1, job?.gpus.length ?? 0), sparks: sparksWanted, events: job?.events.length ?? 0, advice: advice.length });
  const multiNode = (job?.nodes.length ?? 0) > 1 || view.sources.length > 1;
  return (
    <ColourContext.Provider value={colour}>
      <Box flexDirection="column" width={columns} height={rows - 1}>
        {/* Sections keep their height and the bottom is cut off if need be: squeezed, they would lose lines anywhere. */}
        <Box flexDirection="column" flexGrow={1} flexShrink={1} overflow="hidden">
          <Box flexShrink={0} flexDirection="column">
            <Header view={view} now={now} />
          </Box>
          <Box flexShrink={0} flexDirection="column">
            <Banner view={view} width={columns} />
            {job?.regression ? <RegressionLine regression={job.regression} runEnded={job.ended} /> : null}
            {job?.comparison ? <ComparisonLine comparison={job.comparison} /> : null}
          </Box>
          {job ? (
            <>
              <Box flexShrink={0} flexDirection="column">
                <RankTable ranks={job.ranks} shown={fit.ranks} columns={columns} />
              </Box>
              <Box flexShrink={0} flexDirection="column" marginTop={1}>
                <GpuTable gpus={job.gpus} shown={fit.gpus} columns={columns} showNode={multiNode} />
              </Box>
              <Box flexShrink={0} flexDirection="column">
                <Notes notes={job.notes} />
              </Box>
              <Box flexShrink={0} flexDirection="column" marginTop={1}>
                {showRuns ? (
                  <RunsPanel job={job.id} runs={view.runs} lines={fit.sparks + fit.events + 3} />
                ) : (
                  <HistoryPanel job={job} columns={columns} sparks={fit.sparks} events={Math.max(0, fit.events - extraTimelines)} />
                )}
              </Box>
              {fit.advice > 0 ? <Advice items={advice.slice(0, fit.advice)} /> : null}
            </>
          ) : null}
        </Box>
        <Box flexShrink={0} flexDirection="column">
          <Footer view={view} said={said} capture={onCapture !== undefined} />
        </Box>
      </Box>
    </ColourContext.Provider>
  );
}
