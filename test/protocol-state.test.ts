import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { FormatRegistry, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { compare } from '../src/analysis/compare.js';
import type { Summary } from '../src/protocol/summary.js';
import { emptyGpuSample, ThrottleReason } from '../src/counters/types.js';
import { type HostSample } from '../src/counters/host.js';
import type { Env, Hello, StepRecord } from '../src/protocol/messages.js';
import { InputError, MAX_INPUT_ERROR_LENGTH, parseInput } from '../src/protocol/parse.js';
import { ComparisonSchema, SidecarStateSchema, STATE_SCHEMA, type SidecarState } from '../src/protocol/state.js';
import { SnapshotFrameSchema, StreamFrameSchema, type SnapshotFrame } from '../src/protocol/stream.js';
import { FrameError, parseFrame } from '../src/viewer/model/frames.js';
import { startWatch } from '../src/viewer/watch.js';
import { cleanupList } from './support/cleanup-list.js';
import { rankHello } from './support/entries.js';
import { inProcess, type InProcess } from './support/in-process.js';
import { BEGIN, END, protocolTables } from './support/protocol-doc.js';
import { ROOT, waitFor } from './support/sidecar.js';
import { emptyHostSample } from './support/counters.js';

/**
 * The state and stream schemas (src/protocol/) against what the sidecar really sends: its own state
 * and frames validate, and every field it sends is declared; what does not validate is refused with
 * where and why; the viewer refuses such a frame, says so once and keeps going.
 */

const T0 = Date.parse('2026-12-02T15:00:00Z');

const cleanups = cleanupList();

// TypeBox's own checker (used by Value.Clean below) needs the format the schemas use.
FormatRegistry.Set('date-time', (text) => !Number.isNaN(Date.parse(text)));

/** What `value` holds beyond what `schema` declares, as the differences Value.Clean makes. */
function undeclared(schema: TSchema, value: unknown): string[] {
  const cleaned = Value.Clean(schema, structuredClone(value));
  return [...Value.Diff(cleaned, value)].map((edit) => `${edit.type} ${edit.path}`);
}

const hello = (job: string, rank: number, env: Env = {}): Hello => rankHello(job, rank, T0, { env });

/** `count` steps of `durMs`, `dataMs` of it waiting for data, ending one after another from T0. */
const records = (count: number, durMs: number, dataMs: number): StepRecord[] =>
  Array.from({ length: count }, (_, i) => ({
    seq: i + 1,
    step: i,
    endNs: (i + 1) * durMs * 1e6,
    durNs: durMs * 1e6,
    dataNs: dataMs * 1e6,
    h2dNs: 1e6,
    computeNs: (durMs - dataMs - 2) * 1e6,
    samples: 32,
    gpuH2dNs: null,
    gpuComputeNs: null,
    gpuIdleNs: null, commNs: null, commWaitNs: null, commBytes: null, evalNs: null,
  }));

const hostSample = (at: number): HostSample => ({
  ...emptyHostSample(at),
  at,
  cpuPct: 35.5,
  cpuPerCorePct: [30, 41],
  iowaitPct: 1.5,
  stealPct: 0,
  load1: 2.5,
  load5: 2,
  load15: 1.5,
  memUsedBytes: 8e9,
  memTotalBytes: 64e9,
  memAvailableBytes: 50e9,
  diskReadBps: 1e6,
  diskWriteBps: 2e5,
  netRxBps: 3e5,
  netTxBps: 1e5,
});

/** A viewer of the in-process sidecar's stream: every text frame it received, parsed as JSON. */
async function streamViewer(s: InProcess): Promise<{ texts: string[]; socket: WebSocket }> {
  if (!s.app.server.listening) await s.app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = s.app.server.address() as { port: number };
  const texts: string[] = [];
  const socket = new WebSocket(`ws://127.0.0.1:${port}/v1/stream`);
  socket.on('message', (data: Buffer) => texts.push(data.toString()));
  cleanups.push(() => socket.terminate());
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  await waitFor(() => texts.length > 0, 5_000);
  return { texts, socket };
}

/**
 * A job of two ranks on two GPUs, rank 1 starved of data (input-bound, the straggler), a second job
 * warming up, host and process counters: a state with something in every part of it.
 */
async function busySidecar() {
  const s = await inProcess({ at: T0 });
  cleanups.push(() => s.app.close());
  await s.ingest.hello(hello('train', 0, { loader: { num_workers: 2, pin_memory: false } }));
  await s.ingest.hello(hello('train', 1, { loader: { num_workers: 2 } }));
  const viewer = await streamViewer(s);
  await s.ingest.steps('train-0', { type: 'steps', records: records(30, 20, 1), dropped: 0 });
  await s.ingest.steps('train-1', { type: 'steps', records: records(30, 20, 12), dropped: 2 });
  await s.ingest.hello({ ...hello('eval', 0), world_size: 1 });
  await s.ingest.steps('eval-0', { type: 'steps', records: records(3, 50, 5), dropped: 0 });
  for (const at of [T0 + 300, T0 + 800]) {
    s.setTime(at);
    await s.ingest.gpuSamples(
      [0, 1].map((index) => ({
        ...emptyGpuSample(at, index),
        uuid: `GPU-${index}`,
        name: 'NVIDIA H100 80GB HBM3',
        utilGpu: index ? 61 : 93,
        utilMem: 40,
        smClockMHz: index ? 1400 : 1980,
        smClockMaxMHz: 1980,
        memClockMHz: 2619,
        tempC: index ? 86 : 64,
        powerW: 500,
        powerLimitW: 700,
        memUsedMiB: 40_000,
        memTotalMiB: 81_559,
        pstate: 'P0',
        throttleReasons: index ? ThrottleReason.SwThermalSlowdown | ThrottleReason.SwPowerCap : 0,
        smActive: 0.8,
        tensorActive: 0.4,
      })),
    );
    await s.ingest.hostSample(hostSample(at));
    const ns = (at - T0) * 1e6;
    await s.ingest.counters('train-1', {
      source: 'process',
      samples: [{ at_ns: ns, cpu_main_s: ns / 1e9, cpu_workers_s: (2 * ns) / 1e9, workers: 2, rss_bytes: 3e9, cgroup_nr_periods: ns / 1e8, cgroup_nr_throttled: ns / 1e9, cgroup_throttled_usec: ns / 1e4, cgroup_quota_cores: 4, cgroup_usage_usec: (3 * ns) / 1e3, train_cpu_s: null, train_wait_s: null }],
    });
  }
  s.setTime(T0 + 1000);
  await s.tick();
  return { s, viewer };
}

async function stateOf(s: InProcess): Promise<unknown> {
  const response = await s.readState();
  expect(response.statusCode).toBe(200);
  return response.json();
}

describe('the state schema against the sidecar', () => {
  it("validates the sidecar's own state, with jobs, ranks, GPUs, host, verdicts and a straggler, and declares every field in it", async () => {
    const { s } = await busySidecar();
    const body = await stateOf(s);
    const state: SidecarState = parseInput(SidecarStateSchema, body, 'state');

    // The state holds what the test means it to: otherwise it would validate little.
    expect(state.schema).toBe(STATE_SCHEMA);
    const train = state.jobs.find((job) => job.job === 'train')!;
    expect(train.ranks).toHaveLength(2);
    expect(train.verdict).toMatchObject({ verdict: 'input-bound' });
    expect(train.straggler).toMatchObject({ rank: 1, reason: 'data' });
    expect(train.timeline.length).toBeGreaterThan(0);
    const starved = train.ranks[1]!;
    expect(starved.verdict).toMatchObject({ verdict: 'input-bound' });
    expect(starved.verdict!.recommendations.length).toBeGreaterThan(0);
    expect(starved.window.gpu).toMatchObject({ index: 1, matched_by: 'local-rank', throttle_share: { SwThermalSlowdown: 1, SwPowerCap: 1 } });
    expect(starved.window.host).not.toBeNull();
    expect(starved.window.process).toMatchObject({ workers: 2 });
    expect(state.jobs.find((job) => job.job === 'eval')!.verdict).toMatchObject({ verdict: 'warming-up', cause: null });
    expect(state.counters.gpus.map((gpu) => gpu.throttle_reasons)).toEqual([[], ['SwPowerCap', 'SwThermalSlowdown']]);
    expect(state.counters.host).toMatchObject({ cpu_per_core_pct: [30, 41] });

    expect(undeclared(SidecarStateSchema, body)).toEqual([]);
  });

  it('validates a fresh sidecar, with nothing in it yet', async () => {
    const s = await inProcess({ at: T0 });
    cleanups.push(() => s.app.close());
    const body = await stateOf(s);
    expect(parseInput(SidecarStateSchema, body, 'state').jobs).toEqual([]);
    expect(undeclared(SidecarStateSchema, body)).toEqual([]);
  });

  it('finds a field the schema does not declare', async () => {
    // The check above is only worth something if it sees an undeclared field, deep down and inside a nullable object.
    const { s } = await busySidecar();
    const body = (await stateOf(s)) as SidecarState;
    const rank = body.jobs[0]!.ranks[1]!;
    Object.assign(rank.window.gpu!, { fan_pct: 40 });
    Object.assign(rank.verdict!, { confidence: 0.9 });
    expect(parseInput(SidecarStateSchema, body, 'state')).toBe(body);
    expect(undeclared(SidecarStateSchema, body)).toEqual(['insert /jobs/0/ranks/1/window/gpu/fan_pct', 'insert /jobs/0/ranks/1/verdict/confidence']);
  });

  it('validates a comparison with a baseline', () => {
    const summary = (name: string) => JSON.parse(readFileSync(path.join(ROOT, 'test/fixtures/summaries', name), 'utf8')) as Summary;
    const comparison = JSON.parse(JSON.stringify(compare(summary('a10-baseline.json'), summary('a10-augmented.json')))) as unknown;
    expect(parseInput(ComparisonSchema, comparison, 'baseline')).toMatchObject({ text: expect.any(String) });
    expect(undeclared(ComparisonSchema, comparison)).toEqual([]);
  });
});

describe('the stream schema against the sidecar', () => {
  it('validates every frame the sidecar sends: the snapshot, updates and verdict changes', async () => {
    const { viewer } = await busySidecar();
    await waitFor(() => viewer.texts.some((text) => text.includes('"type":"update"')), 5_000);
    const frames = viewer.texts.map((text) => parseFrame(text));
    const types = new Set(frames.map((frame) => frame.type));
    expect(types).toEqual(new Set(['snapshot', 'verdict', 'update']));
    expect(frames.filter((frame) => frame.type === 'verdict')).toContainEqual(expect.objectContaining({ job: 'train', rank: null, to: 'input-bound' }));
    for (const text of viewer.texts) expect(undeclared(StreamFrameSchema, JSON.parse(text))).toEqual([]);
  });
});

/** A real snapshot frame of the busy sidecar, with its verdicts: a value to spoil. */
async function realSnapshot(): Promise<{ frame: SnapshotFrame }> {
  const { viewer } = await busySidecar();
  // An update read after the tick holds the verdicts; it is made the snapshot a viewer gets on connecting now.
  const judged = (text: string) => text.includes('"type":"update"') && text.includes('"input-bound"');
  const update = JSON.parse(await waitFor(() => viewer.texts.findLast(judged), 5_000)) as Record<string, unknown>;
  return { frame: parseInput(SnapshotFrameSchema, { ...update, type: 'snapshot', rate_hz: 4 }, 'snapshot') };
}

const spoilt = (frame: SnapshotFrame, spoil: (copy: SnapshotFrame) => void): string => {
  const copy = structuredClone(frame);
  spoil(copy);
  return JSON.stringify(copy);
};

function refusal(text: string): FrameError {
  try {
    parseFrame(text);
  } catch (error) {
    if (error instanceof FrameError) return error;
    throw error;
  }
  throw new Error('the frame was taken');
}

describe('refusing what does not validate', () => {
  it('names the path and the reason: a wrong type, a missing field, a wrong name, a bad time, a bad nullable', async () => {
    const { frame } = await realSnapshot();
    const cases: Array<[(copy: SnapshotFrame) => void, string]> = [
      [(c) => void (c.state.jobs[0]!.ranks[1]!.window.steps = 1.5), 'snapshot.state.jobs.0.ranks.1.window.steps: must be integer (got 1.5)'],
      [(c) => void delete (c.state.counters.gpus[0] as Partial<SnapshotFrame['state']['counters']['gpus'][number]>).util_gpu, 'snapshot.state.counters.gpus.0.util_gpu: missing'],
      [(c) => void delete (c as Partial<SnapshotFrame>).history, 'snapshot.history: missing'],
      [(c) => void Object.assign(c.state.jobs[0]!.ranks[0]!.window, { step_ms_p50: 'fast' }), 'snapshot.state.jobs.0.ranks.0.window.step_ms_p50: must be number or null (got "fast")'],
      [(c) => void Object.assign(c.state.jobs[0]!.verdict!, { since: 'yesterday' }), 'snapshot.state.jobs.0.verdict.since: must match format "date-time" (got "yesterday")'],
      [(c) => void Object.assign(c.state.jobs[0]!.ranks[1]!.verdict!, { verdict: 'slow' }), 'snapshot.state.jobs.0.ranks.1.verdict.verdict: must be one of "input-bound", "transfer-bound", "host-bound", "communication-bound", "memory-bound", "throttled", "compute-bound" or … (got "slow")'],
      [(c) => void Object.assign(c.state.jobs[0]!.ranks[1]!.window.gpu!, { matched_by: null }), 'snapshot.state.jobs.0.ranks.1.window.gpu.matched_by: must be one of "uuid", "cuda-visible-devices" or "local-rank" (got null)'],
      [(c) => void Object.assign(c.state.ingest.rejected, { 1007: -1 }), 'snapshot.state.ingest.rejected.1007: must be >= 0 (got -1)'],
      [(c) => void Object.assign(c.state, { jobs: {} }), 'snapshot.state.jobs: must be array (got an object)'],
    ];
    for (const [spoil, message] of cases) {
      const error = refusal(spoilt(frame, spoil));
      expect(error.message).toBe(message);
      expect(error.frame).toBe('snapshot');
    }
  });

  it('keeps the message short whatever the frame holds', async () => {
    const { frame } = await realSnapshot();
    const long = 'x'.repeat(5_000);
    const error = refusal(spoilt(frame, (c) => void Object.assign(c.state.ingest.limited, { [long]: long })));
    expect(error.message.length).toBeLessThanOrEqual(MAX_INPUT_ERROR_LENGTH);
    expect(error.message).toMatch(/^snapshot\.state\.ingest\.limited\.x+…: must be integer \(got "x+…\)$/);
    // Fields it does not know are no reason to refuse a frame: a sidecar may add some within a version.
    const more = { ...structuredClone(frame), state: { ...frame.state, [long]: 1 } };
    expect(parseFrame(JSON.stringify(more)).type).toBe('snapshot');
  });

  it('throws an InputError with the path and the reason apart', () => {
    expect(() => parseInput(SidecarStateSchema, { schema: STATE_SCHEMA }, 'state')).toThrow(InputError);
    try {
      parseInput(SidecarStateSchema, null, 'state');
    } catch (error) {
      expect(error).toMatchObject({ path: 'state', reason: 'must be object (got null)', message: 'state: must be object (got null)' });
    }
  });

  it('refuses what is not a frame of this stream before looking further', () => {
    expect(refusal('{')).toMatchObject({ frame: null, message: expect.stringMatching(/^not JSON/) });
    expect(refusal('{"v":2,"type":"update"}')).toMatchObject({ frame: null, message: 'stream version 2; this viewer reads version 1' });
    expect(refusal('{"v":1,"type":"summary"}')).toMatchObject({ frame: null, message: 'unknown frame type "summary"' });
    expect(refusal('{"v":1,"type":"verdict","job":"j"}')).toMatchObject({ frame: 'verdict', message: 'verdict.at: missing' });
  });
});

const CLOSE = '(close)';

/** A stand-in sidecar that sends each connection the frames `script` gives for it (CLOSE: closes it). */
async function scriptedSidecar(script: (connection: number) => string[]): Promise<{ url: string; connections: () => number }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  cleanups.push(() => new Promise((resolve) => server.close(resolve)));
  await new Promise((resolve) => server.once('listening', resolve));
  let connections = 0;
  server.on('connection', (socket) => {
    const frames = script(connections++);
    const sendNext = () => {
      const next = frames.shift();
      if (next === undefined || socket.readyState !== WebSocket.OPEN) return;
      if (next === CLOSE) socket.close(1000, 'stand-in done');
      else socket.send(next, () => setTimeout(sendNext, 20));
    };
    sendNext();
  });
  return { url: `ws://127.0.0.1:${(server.address() as { port: number }).port}`, connections: () => connections };
}

function watchPlain(url: string) {
  const lines: string[] = [];
  const out = new Writable({ write: (chunk: Buffer, _encoding, done) => (lines.push(...chunk.toString().split('\n').filter(Boolean)), done()) });
  let stop: () => void = () => undefined;
  const watching = startWatch({ targets: [url], plain: true, out, stop: new Promise<void>((resolve) => (stop = resolve)) });
  cleanups.push(async () => {
    stop();
    await watching.done;
  });
  return { store: watching.store, lines };
}

describe('the viewer and a frame it refuses', () => {
  it('drops a bad update, says so once, keeps what it showed and takes the next good frames', async () => {
    const { frame } = await realSnapshot();
    const at = (seq: number) => new Date(Date.parse(frame.at) + seq * 250).toISOString();
    const update = (seq: number) => ({ ...frame, type: 'update', seq, at: at(seq), state: { ...frame.state, now: at(seq) } });
    const bad = (seq: number) => JSON.stringify({ ...update(seq), state: { ...update(seq).state, jobs: [{ ...frame.state.jobs[0]!, steps: -seq }] } });
    const sidecar = await scriptedSidecar(() => [
      JSON.stringify({ ...frame, seq: 1 }),
      bad(2),
      JSON.stringify(update(3)),
      bad(4),
      JSON.stringify({ v: 1, type: 'verdict', job: 'train', to: 'compute-bound' }),
      JSON.stringify(update(5)),
    ]);
    const { store, lines } = watchPlain(sidecar.url);
    const source = () => store.sourceStates[0]!;
    await waitFor(() => source().seq === 5, 5_000);

    expect(source()).toMatchObject({ status: 'live', error: null, refused: { count: 3, reason: 'bad frame: verdict.at: missing' } });
    expect(source().state!.now).toBe(at(5));
    expect(source().events).toEqual([]);
    expect(sidecar.connections()).toBe(1);
    const view = store.view(Date.parse(at(5)));
    expect(view.job).toMatchObject({ id: 'train' });
    expect(view.sources[0]!.refused).toMatchObject({ count: 3 });
    await waitFor(() => lines.some((line) => line.includes('job=train')), 2_000);
    const refusedLines = lines.filter((line) => line.includes('event=refused'));
    expect(refusedLines).toHaveLength(1);
    expect(refusedLines[0]).toMatch(/ event=refused source=ws:\/\/127\.0\.0\.1:\d+\/v1\/stream reason=bad_frame:_update\.state\.jobs\.0\.steps:_must_be_>=_0_\(got_-2\)$/);
  });

  it('leaves a connection whose snapshot is bad, keeps the last good state and shows why, then takes a good snapshot', async () => {
    const { frame } = await realSnapshot();
    const badSnapshot = JSON.stringify({ ...frame, state: { ...frame.state, counters: { ...frame.state.counters, gpus: [{}] } } });
    const sidecar = await scriptedSidecar((connection) => (connection === 1 ? [badSnapshot] : [JSON.stringify({ ...frame, seq: connection }), ...(connection === 0 ? [CLOSE] : [])]));
    const { store, lines } = watchPlain(sidecar.url);
    const source = () => store.sourceStates[0]!;
    await waitFor(() => source().error?.startsWith('bad frame:'), 10_000);
    expect(source()).toMatchObject({ status: 'reconnecting', error: 'bad frame: snapshot.state.counters.gpus.0.index: missing' });
    expect(source().state).toEqual(frame.state);
    await waitFor(() => lines.some((line) => line.includes('source_error=bad_frame:_snapshot.state.counters.gpus.0.index:_missing')), 2_000);
    await waitFor(() => source().seq === 2 && source().status === 'live', 10_000);
  });
});

describe('docs/protocol.md', () => {
  it('holds the field tables of the state and the frames as the schemas describe them', () => {
    const file = path.join(ROOT, 'docs/protocol.md');
    const doc = readFileSync(file, 'utf8');
    const begin = doc.indexOf(BEGIN);
    const end = doc.indexOf(END);
    expect(begin, 'docs/protocol.md has no generated tables').toBeGreaterThanOrEqual(0);
    const tables = protocolTables();
    if (process.env.STEPSCOPE_WRITE_DOCS === '1') writeFileSync(file, doc.slice(0, begin) + tables + doc.slice(end + END.length));
    else expect(doc.slice(begin, end + END.length), 'run with STEPSCOPE_WRITE_DOCS=1 to write them').toBe(tables);
  });
});
