import { Writable } from 'node:stream';
import { render } from 'ink';
import { createElement, type ReactElement } from 'react';
import { describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import type { JournalEntry } from '../src/engine/entries.js';
import { REFERENCE_ENTRY_VERSION } from '../src/engine/entries.js';
import type { RegressionChange } from '../src/engine/runs.js';
import { regressionFrame } from '../src/outputs/stream-events.js';
import type { RegressionFrame } from '../src/protocol/stream.js';
import { connectUrl, StreamClient } from '../src/viewer/client.js';
import { fmtClock } from '../src/viewer/format.js';
import { FrameError, parseFrame } from '../src/viewer/model/frames.js';
import { buildView } from '../src/viewer/model/job-view.js';
import { applyFrame, initialSource, type SourceState } from '../src/viewer/model/source.js';
import { WatchStore } from '../src/viewer/model/watch-store.js';
import { plainLine, plainRegression } from '../src/viewer/plain.js';
import { App } from '../src/viewer/ui/App.js';
import { RegressionLine } from '../src/viewer/ui/Banner.js';
import { HistoryPanel } from '../src/viewer/ui/HistoryPanel.js';
import { ColourContext } from '../src/viewer/ui/theme.js';
import { startWatch } from '../src/viewer/watch.js';
import { cleanupList } from './support/cleanup-list.js';
import { hello, run, T0 } from './support/entries.js';
import { inProcess } from './support/in-process.js';
import { listen } from './support/listening.js';
import { waitFor } from './support/sidecar.js';
import { EngineStream } from './support/viewer-stream.js';

/**
 * Regressions in `stepscope watch`: the stream's opt-in `regression` frames (`?events=regression`)
 * kept per job and run, shown under the banner while one holds, marked under the verdict strip and
 * among the changes, one plain line each; an ended run keeps the one it ended with. First on a real
 * Engine's frames with regression frames made by the sidecar's own encoder, then from a sidecar
 * assembled in this process, its engine deciding the regression, to the real viewer.
 */

const cleanups = cleanupList();

const URL_A = 'ws://node-a:9477/v1/stream';
const TEXT = '14% slower per sample than the median of the last 5 runs: 11 of 14 points from data wait';

/** A regression frame as the sidecar encodes it, parsed as the viewer parses it. */
function regression(status: RegressionFrame['status'], atMs: number, over: Partial<RegressionChange> = {}, changePct: number | null = 14): RegressionFrame {
  const change: RegressionChange = {
    job: 'train',
    run: 1,
    at: T0 + atMs,
    regressed: status !== 'ended',
    changePct,
    text: TEXT,
    startedAt: T0 + 10_000,
    endedAt: null,
    reference: { kind: 'history', label: 'the median of the last 5 runs (newest 2026-11-30)' },
    thresholdPct: 10,
    ...over,
  };
  const frame = parseFrame(JSON.stringify(regressionFrame(change, status, T0 + atMs, changePct)));
  if (frame.type !== 'regression') throw new Error(`parsed as ${frame.type}`);
  return frame;
}

/** A job `train` seen from 250 ms, input-bound, run up to `seconds`. */
function startedJob(stream: EngineStream, seconds: number): SourceState {
  stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }]);
  const source = applyFrame(initialSource(URL_A), stream.frame('snapshot', T0 + 250), T0 + 250);
  return stream.follow(source, run('s0', 0, seconds, { data: 9, compute: 3 }).entries.filter((e) => e.at > T0 + 250));
}

/** Entries from `fromS` to `toS` of a job whose steps began at 0 (its earlier steps left out). */
const between = (entries: JournalEntry[], fromS: number, toS: number) => entries.filter((e) => e.at > T0 + fromS * 1000 && e.at <= T0 + toS * 1000);

/** What ink draws of `element`, without colour, on a terminal of `columns` x `rows`. */
function draw(element: ReactElement, columns = 160, rows = 48): string {
  let out = '';
  const stdout = Object.assign(new Writable({ write: (chunk, _encoding, done) => ((out += String(chunk)), done()) }), { columns, rows, isTTY: false });
  const app = render(createElement(ColourContext.Provider, { value: false }, element), { stdout: stdout as unknown as NodeJS.WriteStream, debug: true, patchConsole: false });
  app.unmount();
  return out;
}

describe('regressions in the viewer model', () => {
  it('keeps a regression per job and run, and shows it while it holds: under the banner, under the verdict strip, among the changes', () => {
    const stream = new EngineStream();
    const steps = run('s0', 0, 40, { data: 9, compute: 3 }).entries;
    let source = startedJob(stream, 20);
    // Nothing told (a sidecar older than the frame): nothing shown, the plain line as before.
    const before = buildView([source], null, T0 + 20_000).job!;
    expect(before.regression).toBeNull();
    expect(before.history!.regressed.every((r) => !r)).toBe(true);
    expect(plainLine(buildView([source], null, T0 + 20_000), T0 + 20_000)).not.toContain('regression=');

    const started = regression('started', 20_000);
    source = applyFrame(source, started, T0 + 20_000);
    source = stream.follow(source, between(steps, 20, 40));
    const view = buildView([source], null, T0 + 40_000);
    const job = view.job!;
    expect(job.regression).toMatchObject({ job: 'train', run: 1, status: 'started', startedAt: T0 + 10_000, endedAt: null, changePct: 14, thresholdPct: 10, text: TEXT, node: null });
    // Marked from the slice it began in, up to now.
    expect(job.history!.regressed.indexOf(true)).toBe(10);
    expect(job.history!.regressed.slice(10).every((r) => r)).toBe(true);
    expect(job.events.filter((e) => e.kind === 'regression')).toEqual([
      { kind: 'regression', at: '2026-12-01T12:00:10.000Z', who: 'job', status: 'started', changePct: 14, thresholdPct: 10, text: TEXT },
    ]);

    expect(plainRegression(started)).toBe(
      '2026-12-01T12:00:20Z event=regression job=train run=1 status=started change=14% threshold=10% since=2026-12-01T12:00:10Z reference=history text=14%_slower_per_sample_than_the_median_of_the_last_5_runs:_11_of_14_points_from_data_wait',
    );
    expect(plainLine(view, T0 + 40_000)).toMatch(/ job=train verdict=input-bound .* regression=14%( |$)/);

    const panel = draw(createElement(HistoryPanel, { job, columns: 120, sparks: 1, events: 8 }));
    // Without colour, '!' where it held: the last 30 of 40 one-second slices.
    expect(panel).toMatch(/^regression {15}\s*!{30}$/m);
    expect(panel).toContain(`${fmtClock(T0 + 10_000)} job      regression: ${TEXT}`);
  });

  it('draws the regression on the line under the banner, the rest of the screen making room for it', () => {
    const stream = new EngineStream();
    const store = new WatchStore([URL_A]);
    stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }, ...run('s0', 0, 30, { data: 9, compute: 3 }).entries]);
    store.frame(0, stream.frame('snapshot', T0 + 30_000), T0 + 30_000);
    const without = draw(createElement(App, { store, colour: false }), 160, 40);
    expect(without).not.toContain('REGRESSION');
    store.frame(0, regression('started', 30_000, {}, 17), T0 + 30_000);
    const screen = draw(createElement(App, { store, colour: false }), 160, 40);
    const lines = screen.split('\n');
    const at = lines.findIndex((l) => l.includes('REGRESSION'));
    expect(lines[at]).toContain(` REGRESSION since ${fmtClock(T0 + 10_000)} — ${TEXT} (now 17% slower; threshold 10%)`);
    // Right under the banner's bottom border.
    expect(lines[at - 1]).toMatch(/^╰─+╯$/);
    expect(screen).toMatch(/^regression {15}\s*!+$/m);
    // Its two lines are taken from the other sections: on a crowded screen the timeline is not pushed off it.
    const small = draw(createElement(App, { store, colour: false }), 160, 22);
    expect(small).toContain('REGRESSION since');
    expect(small).toMatch(/^Timeline {3}0 s input-bound/m);
  });

  it('shows a regression as over once the sidecar says so: among the changes, no longer under the banner or in the plain line', () => {
    const stream = new EngineStream();
    let source = applyFrame(startedJob(stream, 30), regression('started', 20_000), T0 + 30_000);
    const ended = regression('ended', 30_000, { endedAt: T0 + 28_000 }, 3);
    source = applyFrame(source, ended, T0 + 30_000);
    const view = buildView([source], null, T0 + 30_000);
    const job = view.job!;
    expect(job.regression).toBeNull();
    expect(plainLine(view, T0 + 30_000)).not.toContain('regression=');
    // Marked where it held, from 10 s to 28 s.
    expect(job.history!.regressed.map((r, i) => (r ? i : -1)).filter((i) => i >= 0)).toEqual(Array.from({ length: 18 }, (_, i) => 10 + i));
    expect(job.events.filter((e) => e.kind === 'regression').map((e) => e.kind === 'regression' && [e.at, e.status])).toEqual([
      ['2026-12-01T12:00:10.000Z', 'started'],
      ['2026-12-01T12:00:28.000Z', 'ended'],
    ]);
    expect(plainRegression(ended)).toBe(
      `2026-12-01T12:00:30Z event=regression job=train run=1 status=ended change=3% threshold=10% since=2026-12-01T12:00:10Z until=2026-12-01T12:00:28Z reference=history text=${TEXT.replace(/ /g, '_')}`,
    );
    expect(draw(createElement(HistoryPanel, { job, columns: 120, sparks: 0, events: 8 }))).toContain(`${fmtClock(T0 + 28_000)} job      regression over: back within 10% (3% slower)`);
  });

  it('keeps the regression an ended run ended with, whatever comes after; a new run of the job starts without one', () => {
    const stream = new EngineStream();
    const store = new WatchStore([URL_A]);
    stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }, ...run('s0', 0, 20, { data: 9, compute: 3 }).entries]);
    store.frame(0, stream.frame('snapshot', T0 + 20_000), T0 + 20_000);
    store.frame(0, regression('started', 20_000), T0 + 20_000);
    // The run ends while regressed: the sidecar tells nothing more of it.
    stream.apply([{ t: 'end', at: T0 + 20_100, session: 's0', reason: 'done' }]);
    for (let at = T0 + 20_250; at <= T0 + 30_000; at += 250) store.frame(0, stream.frame('update', at), at);
    // A viewer that reconnects gets a snapshot, and no `ongoing` for a run that is over.
    store.frame(0, stream.frame('snapshot', T0 + 31_000), T0 + 31_000);
    const ended = store.view(T0 + 31_000).job!;
    expect(ended.ended).toBe(true);
    expect(ended.regression).toMatchObject({ run: 1, status: 'started', startedAt: T0 + 10_000 });
    expect(draw(createElement(App, { store, colour: false }), 220, 40)).toContain(`REGRESSION held from ${fmtClock(T0 + 10_000)} until the run ended — ${TEXT} (last 14% slower; threshold 10%)`);
    expect(plainLine(store.view(T0 + 31_000), T0 + 31_000)).toMatch(/ ended=\S+ regression=14%/);

    // The job runs again: its new run is compared afresh.
    stream.apply([hello('s1', {}, 32_000), { t: 'connect', at: T0 + 32_000, session: 's1' }, ...run('s1', 32_000, 10, { data: 9, compute: 3 }).entries]);
    store.frame(0, stream.frame('update', T0 + 42_000), T0 + 42_000);
    const next = store.view(T0 + 42_000).job!;
    expect(next.ended).toBe(false);
    expect(next.regression).toBeNull();
    expect(next.history!.regressed.slice(-10).every((r) => !r)).toBe(true);
    expect(next.events.filter((e) => e.kind === 'regression')).toEqual([]);
  });

  it('after a reconnect, shows a regression again only once the sidecar says it still holds (`ongoing`), as one episode', () => {
    const stream = new EngineStream();
    let source = applyFrame(startedJob(stream, 20), regression('started', 20_000), T0 + 20_000);
    source = applyFrame(source, stream.frame('snapshot', T0 + 21_000), T0 + 21_000);
    // It may have ended while the viewer was away: not shown as holding until the sidecar says so.
    expect(buildView([source], null, T0 + 21_000).job!.regression).toBeNull();
    source = applyFrame(source, regression('ongoing', 21_000, {}, 17), T0 + 21_000);
    const job = buildView([source], null, T0 + 21_000).job!;
    expect(job.regression).toMatchObject({ status: 'ongoing', startedAt: T0 + 10_000, changePct: 17 });
    expect(job.events.filter((e) => e.kind === 'regression')).toHaveLength(1);
  });

  it('shows a job across two sidecars with the regression one of them tells, saying which', () => {
    const nodeA = new EngineStream();
    const nodeB = new EngineStream();
    nodeA.apply([hello('a0', { world_size: 2 }), { t: 'connect', at: T0, session: 'a0' }, ...run('a0', 0, 20, { data: 1, compute: 9 }).entries]);
    nodeB.apply([hello('b1', { rank: 1, world_size: 2, host: 'node-b' }), { t: 'connect', at: T0, session: 'b1' }, ...run('b1', 0, 20, { data: 9, compute: 3 }).entries]);
    const a = applyFrame(initialSource(URL_A), nodeA.frame('snapshot', T0 + 20_000), T0 + 20_000);
    let b = applyFrame(initialSource('ws://node-b:9477/v1/stream'), nodeB.frame('snapshot', T0 + 20_000), T0 + 20_000);
    b = applyFrame(b, regression('started', 20_000, {}, 22), T0 + 20_000);
    const view = buildView([a, b], null, T0 + 20_000);
    const job = view.job!;
    expect(job.ranks.map((r) => r.rank)).toEqual([0, 1]);
    expect(job.regression).toMatchObject({ node: 'node-b', changePct: 22 });
    expect(job.events.filter((e) => e.kind === 'regression').map((e) => e.who)).toEqual(['node-b job']);
    expect(job.history!.regressed.slice(10).every((r) => r)).toBe(true);
    expect(draw(createElement(RegressionLine, { regression: job.regression!, runEnded: false }), 220)).toContain(`REGRESSION since ${fmtClock(T0 + 10_000)} — ${TEXT} (now 22% slower; threshold 10%) (node-b)`);
  });

  it('refuses a regression frame that does not hold what its type promises, as a dropped event', () => {
    const bad = JSON.stringify({ ...regression('started', 20_000), status: 'maybe' });
    expect(() => parseFrame(bad)).toThrow(FrameError);
    expect(() => parseFrame(bad)).toThrow(/^regression\.status: /);
    try {
      parseFrame(bad);
    } catch (error) {
      // The client drops a refused update or event and carries on; only what it cannot go on without ends the connection.
      expect((error as FrameError).frame).toBe('regression');
    }
  });

  it('asks for the regression frame in the URL it connects to, keeping what the address asked already', () => {
    expect(connectUrl('ws://h:9477/v1/stream')).toBe('ws://h:9477/v1/stream?events=regression');
    expect(connectUrl('ws://h:9477/v1/stream?events=future')).toBe('ws://h:9477/v1/stream?events=future%2Cregression');
    expect(connectUrl('wss://h/v1/stream?events=regression&x=1')).toBe('wss://h/v1/stream?events=regression&x=1');
  });
});

describe('a regression from a sidecar assembled in this process, to the real viewer', () => {
  /** The sidecar, its engine comparing the job's run with a pinned `baseline` journaled for it, as serve-command.ts has it do. */
  async function sidecarComparing() {
    // The pinned baseline: the same job, twice as fast per sample.
    const base = new EngineStream();
    base.apply([hello('b0'), { t: 'connect', at: T0, session: 'b0' }, ...run('b0', 0, 30, { data: 2, compute: 8 }).entries]);
    const baseline = base.engine.analyst.summary('train', T0 + 30_000, { series: false })!;
    const side = await inProcess({ config: { windowMs: 4_000, holdMs: 0, endGraceMs: 10_000, regressionThresholdPct: 10, regressionHoldMs: 2_000 } });
    cleanups.push(() => side.app.close());
    const feed = async (entries: JournalEntry[]) => {
      for (const entry of entries) {
        side.setTime(entry.at);
        await side.record(entry);
        // As the sidecar does once the run shows in a snapshot (src/outputs/runs.ts).
        if (entry.t === 'hello') await side.record({ t: 'reference', at: entry.at, v: REFERENCE_ENTRY_VERSION, job: 'train', pinned: baseline, past: [] });
      }
    };
    return { side, feed, ...(await listen(side)) };
  }

  /** `stepscope watch --plain` on `url`, in this process, until the test ends. */
  function watchPlain(url: string) {
    const lines: string[] = [];
    const out = new Writable({ write: (chunk, _encoding, done) => (lines.push(...String(chunk).split('\n').filter((l) => l !== '')), done()) });
    let stop: () => void = () => undefined;
    const watching = startWatch({ targets: [url], plain: true, out, stop: new Promise<void>((resolve) => (stop = resolve)) });
    cleanups.push(() => (stop(), watching.done));
    return { lines, store: watching.store, line: (match: (line: string) => boolean) => waitFor(() => lines.find(match), 10_000, 20) };
  }

  it('streams the regression the sidecar decides: a line as it begins, `ongoing` to a viewer that comes later, a line as it ends', async () => {
    const { feed, streamUrl } = await sidecarComparing();
    const first = watchPlain(streamUrl);
    await first.line((l) => l.includes('status=waiting-for-a-job'));

    // Twice as slow per sample as the baseline, all of it from data wait.
    const slow = run('s0', 0, 12, { data: 12, compute: 8 });
    await feed([hello('s0'), { t: 'connect', at: T0, session: 's0' }, ...slow.entries]);
    const started = await first.line((l) => l.includes('event=regression'));
    expect(started).toMatch(/^\S+Z event=regression job=train run=1 status=started change=100% threshold=10% since=\S+Z reference=baseline text=100%_slower_per_sample_than_baseline_\S*data_wait/);
    await first.line((l) => / job=train verdict=input-bound .* regression=100%/.test(l));
    const held = first.store.view(Date.now()).job!.regression!;
    expect(held).toMatchObject({ job: 'train', run: 1, status: 'started', changePct: 100, thresholdPct: 10, reference: { kind: 'baseline' } });
    expect(started).toContain(` since=${new Date(held.startedAt).toISOString().replace(/\.\d{3}Z$/, 'Z')} `);

    // A viewer that connects while it holds is told so right after its snapshot.
    const late = watchPlain(streamUrl);
    const ongoing = await late.line((l) => l.includes('event=regression'));
    expect(ongoing).toMatch(/ job=train run=1 status=ongoing change=100% threshold=10% /);
    expect(late.store.view(Date.now()).job!.regression).toMatchObject({ status: 'ongoing', startedAt: held.startedAt });

    // Fast steps bring the run's time per sample back within 10% of the baseline's.
    await feed(run('s0', 12_000, 10, { data: 0, compute: 5 }, slow.nextSeq).entries);
    const ended = await first.line((l) => l.includes('event=regression') && l.includes('status=ended'));
    expect(ended).toMatch(/ job=train run=1 status=ended change=-?\d+% threshold=10% since=\S+ until=\S+Z reference=baseline /);
    await late.line((l) => l.includes('status=ended'));
    await first.line((l) => first.lines.indexOf(l) > first.lines.indexOf(ended) && l.includes(' job=train ') && !l.includes('regression='));
    const view = first.store.view(Date.now()).job!;
    expect(view.regression).toBeNull();
    expect(view.events.filter((e) => e.kind === 'regression').map((e) => e.kind === 'regression' && e.status)).toEqual(['started', 'ended']);
  });

  it('works as before against a sidecar that ignores the parameter: one older than the regression frame', async () => {
    const stream = new EngineStream();
    stream.apply([hello('s0'), { t: 'connect', at: T0, session: 's0' }, ...run('s0', 0, 5, { data: 9, compute: 3 }).entries]);
    const snapshot = JSON.stringify(stream.frame('snapshot', T0 + 5_000));
    const asked: string[] = [];
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    server.on('connection', (socket, request) => (asked.push(request.url ?? ''), socket.send(snapshot)));
    await new Promise((resolve) => server.once('listening', resolve));
    const url = `ws://127.0.0.1:${(server.address() as { port: number }).port}/v1/stream`;
    const store = new WatchStore([url]);
    const client = new StreamClient(url, { connecting: () => store.connecting(0), frame: (frame, at) => store.frame(0, frame, at), refused: (reason) => store.refused(0, reason), lost: (error, retryAt) => store.lost(0, error, retryAt) });
    cleanups.push(() => client.stop());
    client.start();
    const job = await waitFor(() => store.view(T0 + 5_000).job);
    expect(asked).toEqual(['/v1/stream?events=regression']);
    expect(store.sourceStates[0]).toMatchObject({ status: 'live', refused: null });
    expect(job.regression).toBeNull();
  });
});
