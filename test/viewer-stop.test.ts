import { Writable } from 'node:stream';
import { render } from 'ink';
import { createElement } from 'react';
import { describe, expect, it } from 'vitest';
import { Engine } from '../src/engine/engine.js';
import type { JournalEntry } from '../src/engine/entries.js';
import { buildView } from '../src/viewer/model/job-view.js';
import { applyFrame, initialSource, type SourceState } from '../src/viewer/model/source.js';
import { plainLine } from '../src/viewer/plain.js';
import { T0 } from './support/entries.js';
import { hangScript } from './support/hang-script.js';
import { streamFrame } from './support/viewer-stream.js';
import { WatchStore } from '../src/viewer/model/watch-store.js';
import { App } from '../src/viewer/ui/App.js';
import { ColourContext } from '../src/viewer/ui/theme.js';

/**
 * A hung job in the viewer's data layer, from the sidecar's own state: the stop at the top (how long,
 * who, where in their code, what the others wait in), the same put together from two sidecars that
 * each see one rank, and the plain line.
 */

/** The state of an engine fed `entries` up to `untilMs`, as the viewer receives it. */
function sourceOf(url: string, entries: JournalEntry[], untilMs: number): SourceState {
  const engine = new Engine();
  for (const entry of entries) if (entry.at <= T0 + untilMs) engine.apply(entry);
  const frame = streamFrame(engine.snapshot(), { type: 'snapshot', seq: 1, gpuSource: 'none', windowMs: 4000 });
  return applyFrame(initialSource(url), frame, T0 + untilMs);
}

describe('the viewer, on a job that hangs', () => {
  it('shows the hang at the top: how long, the rank, its own code, what the others wait in', () => {
    const view = buildView([sourceOf('ws://a/v1/stream', hangScript([0, 1]), 20_000)], null, T0 + 20_000);
    expect(view.job!.stop).toMatchObject({ verdict: 'hung', cause: 'code', step: 299, culprits: [1], waiting: [0], waitsIn: 'gloo:all_reduce (collective #301 of default_pg)' });
    expect(view.job!.stop!.seconds).toBeCloseTo(17, 0);
    expect(view.job!.stop!.where.map((f) => f.function)).toEqual(['wait_for_it', 'main']);
    const line = plainLine(view, T0 + 20_000);
    expect(line).toContain('verdict=hung cause=code');
    expect(line).toContain('stop=hung stop_cause=code stopped_s=17.0 stop_step=299 stop_ranks=1 stop_where=wait_for_it_(train.py:48) waiting=0 waits_in=gloo:all_reduce_(collective_#301_of_default_pg)');
  });

  it('puts the hang together from two sidecars that each see one rank', () => {
    const script = hangScript([0, 1]);
    const part = (rank: number) => script.filter((e) => (e.t === 'hello' ? e.hello.session === `s${rank}` : !('session' in e) || e.session === `s${rank}`));
    const view = buildView([sourceOf('ws://a/v1/stream', part(0), 20_000), sourceOf('ws://b/v1/stream', part(1), 20_000)], null, T0 + 20_000);
    // Each sidecar alone: rank 0's says every rank it sees waits in the collective; rank 1's names rank 1.
    expect(view.job!.stop).toMatchObject({ verdict: 'hung', cause: 'code', culprits: [1], waiting: [0], waitsIn: 'gloo:all_reduce (collective #301 of default_pg)' });
    expect(view.job!.stop!.where[0]!.function).toBe('wait_for_it');
  });

  it('draws the hang in the banner at the top of the screen', () => {
    const engine = new Engine();
    for (const entry of hangScript([0, 1])) if (entry.at <= T0 + 20_000) engine.apply(entry);
    const store = new WatchStore(['ws://a/v1/stream']);
    store.frame(0, streamFrame(engine.snapshot(), { type: 'snapshot', seq: 1, gpuSource: 'none', windowMs: 4000 }), T0 + 20_000);
    let out = '';
    const stdout = Object.assign(new Writable({ write: (chunk, _encoding, done) => ((out += String(chunk)), done()) }), { columns: 160, rows: 40, isTTY: false });
    const app = render(createElement(ColourContext.Provider, { value: false }, createElement(App, { store, colour: false })), { stdout: stdout as unknown as NodeJS.WriteStream, debug: true, patchConsole: false });
    app.unmount();
    const lines = out.split('\n');
    const top = lines.findIndex((l) => l.includes('HUNG code'));
    expect(lines[top]).toMatch(/│ HUNG code {3}17 s without a step, after step 299 · rank 1 stopped/);
    expect(lines[top + 1]).toContain('rank 1: wait_for_it (train.py:48) ← main (train.py:87)');
    expect(lines[top + 2]).toContain('rank 0 waits in gloo:all_reduce (collective #301 of default_pg)');
    expect(lines[top + 3]).toContain('→ Look at what rank 1 does at /job/train.py:48 (wait_for_it)');
  });

  it('shows no stop while the job steps', () => {
    const view = buildView([sourceOf('ws://a/v1/stream', hangScript([0, 1]), 2_500)], null, T0 + 2_500);
    expect(view.job!.stop).toBeNull();
    expect(plainLine(view, T0 + 2_500)).not.toContain('stop=');
  });
});
