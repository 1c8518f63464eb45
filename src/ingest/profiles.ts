import { mkdir, rename, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import type { EngineSnapshot, SnapshotJob } from '../engine/snapshot.js';
import type { Logger } from '../log/log.js';
import { fileSafeName } from '../model/names.js';
import { isStop } from '../model/verdict.js';
import type { Hello } from '../protocol/messages.js';
import type { Static } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { parseInput } from '../protocol/parse.js';
import { CaptureBodySchema, PROFILE_LIMITS, type CaptureAnswer, type CaptureRecord, type ProfileFrame } from '../protocol/profile.js';
import type { Ingest } from './ingest.js';
import type { SessionTable } from '../store/session-table.js';

/**
 * Deep capture on a verdict (src/protocol/profile.ts): asks one rank's hook for a torch.profiler
 * window when a non-healthy verdict has held `afterMs`, or on demand; at most one a job each
 * `everyMs`; stores the gzipped trace under <out>/captures/<job>/ once it is whole and reads as
 * JSON; lists each job's captures for the state and the summary. Requests and traces are not
 * journaled: a replay has no hooks to ask, and the trace is a file beside the journal.
 */

/** How much of the unzipped trace is looked at for its opening: torch's export puts a few fields (devices, distributed info) before traceEvents. */
const TRACE_HEAD_BYTES = 1024 * 1024;

/**
 * Whether gzipped `gz` opens as Chrome trace JSON (an object whose traceEvents come near its start, or
 * an array of events) and unzips whole within the bound. Streamed, never held whole: a real CUDA trace
 * can be hundreds of MB of JSON, which parsed on the event loop would stall every rank's acks and could
 * take the sidecar's heap.
 */
async function checkTrace(gz: Buffer): Promise<void> {
  const head: Buffer[] = [];
  let headBytes = 0;
  let total = 0;
  for await (const chunk of Readable.from([gz]).pipe(createGunzip()) as AsyncIterable<Buffer>) {
    total += chunk.length;
    if (total > PROFILE_LIMITS.maxJsonBytes) throw new Error(`over ${PROFILE_LIMITS.maxJsonBytes} bytes unzipped`);
    if (headBytes < TRACE_HEAD_BYTES) {
      head.push(chunk);
      headBytes += chunk.length;
    }
  }
  const opening = Buffer.concat(head).subarray(0, TRACE_HEAD_BYTES).toString('utf8').trimStart();
  if (opening.startsWith('[')) return;
  if (!opening.startsWith('{')) throw new Error('not JSON: a Chrome trace is an object or an array');
  if (!/"traceEvents"\s*:\s*\[/.test(opening)) throw new Error('no traceEvents: not a Chrome trace');
}

export interface CaptureOptions {
  /** Where traces go (the sidecar's --out); null: captures cannot be stored, so none is asked for. */
  out: string | null;
  enabled: boolean;
  afterMs: number;
  everyMs: number;
  steps: number;
  maxBytes: number;
  /** A chunk's data, within the sidecar's --max-frame-bytes. */
  chunkBytes: number;
  now: () => number;
  log: Logger;
}

export const CAPTURE_DEFAULTS = { afterS: 60, everyS: 600, steps: PROFILE_LIMITS.defaultSteps } as const;

/** Captures kept per job (the newest). */
const KEEP = 16;
const HEALTHY = new Set(['compute-bound', 'warming-up', 'idle']);

export type CaptureResult = { ok: true; capture: CaptureRecord } | { ok: false; status: 400 | 404 | 409 | 429 | 503; reason: string };

interface Incoming {
  job: string;
  rank: number;
  chunks: Buffer[];
  bytes: number;
}

export class ProfileCaptures {
  private readonly byJob = new Map<string, CaptureRecord[]>();
  private readonly lastAsked = new Map<string, number>();
  /** The verdict episode (verdict@since) each job was last captured for on its own, and the jobs captured for their current regression. */
  private readonly episodeCaptured = new Map<string, string>();
  private readonly regressionCaptured = new Set<string>();
  private readonly incoming = new Map<number, Incoming>();
  private nextId = 1;

  constructor(
    private readonly ingest: Ingest,
    /** The engine's sessions: which is each rank's latest, to ask its hook. */
    private readonly sessions: Pick<SessionTable, 'sessionOf'>,
    private readonly options: CaptureOptions,
  ) {
    ingest.onProfile = (hello, frame) => void this.onFrame(hello, frame);
  }

  /** The job's captures, oldest first. */
  of(job: string): readonly CaptureRecord[] {
    return this.byJob.get(job) ?? [];
  }

  /** Asks for a window of `steps` steps of `rank` (default: the straggler, else the lowest connected rank). */
  request(snapshot: EngineSnapshot, job: string, rank: number | null, steps: number, reason: CaptureRecord['reason']): CaptureResult {
    const { options } = this;
    if (!options.enabled) return { ok: false, status: 503, reason: 'deep captures are off (--no-capture)' };
    if (options.out === null) return { ok: false, status: 503, reason: 'the sidecar has no --out to store traces in' };
    if (!Number.isInteger(steps) || steps < 1 || steps > PROFILE_LIMITS.maxSteps) return { ok: false, status: 400, reason: `steps=${steps}: a window holds 1 to ${PROFILE_LIMITS.maxSteps} steps` };
    const state = snapshot.jobs.find((j) => j.job === job && !j.ended);
    if (!state) return { ok: false, status: 404, reason: `no running job named ${JSON.stringify(job.slice(0, 128))}` };
    const chosen = rank ?? pickRank(state);
    const rankState = state.ranks.find((r) => r.rank === chosen);
    if (chosen === null || !rankState) return { ok: false, status: 404, reason: `job ${job} has no rank ${rank ?? ''} reporting to this sidecar (ranks ${state.ranks.map((r) => r.rank).join(', ')})`.replace('rank  ', 'rank ') };
    const now = options.now();
    const last = this.lastAsked.get(job);
    if (last !== undefined && now - last < options.everyMs) {
      return { ok: false, status: 429, reason: `job ${job} was captured ${Math.round((now - last) / 1000)} s ago: at most one capture every ${Math.round(options.everyMs / 1000)} s` };
    }
    const session = this.sessions.sessionOf(job, chosen);
    const id = this.nextId++;
    const sent = session ? this.ingest.requestProfile(session.id, { type: 'profile', id, steps, max_bytes: options.maxBytes, chunk_bytes: options.chunkBytes }) : 'not-connected';
    if (sent === 'not-connected') return { ok: false, status: 409, reason: `rank ${chosen} of ${job} is not connected` };
    if (sent === 'not-offered') return { ok: false, status: 409, reason: `rank ${chosen}'s hook cannot take profiler windows (an older hook)` };
    this.lastAsked.set(job, now);
    const verdict = state.verdict ? `${state.verdict.verdict}${state.verdict.cause ? ` (${state.verdict.cause})` : ''}` : null;
    const capture: CaptureRecord = { id, rank: chosen, steps, reason, verdict, requested_at: new Date(now).toISOString(), status: 'requested', file: null, bytes: null, error: null };
    this.incoming.set(id, { job, rank: chosen, chunks: [], bytes: 0 });
    const all = [...this.of(job), capture];
    // The oldest listed goes, and its trace with it: --out holds no more traces than the list.
    for (const dropped of all.slice(0, -KEEP)) this.forget(dropped);
    this.byJob.set(job, all.slice(-KEEP));
    options.log.info({ job, rank: chosen, id, steps, reason }, 'deep capture asked for');
    return { ok: true, capture };
  }

  /** POST /v1/capture {job, rank?, steps?}: 202 with the capture asked for, else the status and why not. */
  route(app: FastifyInstance, snapshot: () => EngineSnapshot): void {
    app.post('/v1/capture', async (request, reply) => {
      let body: Static<typeof CaptureBodySchema>;
      try {
        body = parseInput(CaptureBodySchema, request.body ?? {}, 'capture request');
      } catch (error) {
        return reply.code(400).send({ ok: false, capture: null, reason: (error as Error).message } satisfies CaptureAnswer);
      }
      const result = this.request(snapshot(), body.job, body.rank ?? null, body.steps ?? this.options.steps, 'demand');
      return result.ok ? reply.code(202).send({ ok: true, capture: result.capture, reason: null } satisfies CaptureAnswer) : reply.code(result.status).send({ ok: false, capture: null, reason: result.reason } satisfies CaptureAnswer);
    });
  }

  /** With every published snapshot: a non-healthy verdict held `afterMs`, or a regression (held already), asks for a window. */
  onSnapshot(snapshot: EngineSnapshot): void {
    if (!this.options.enabled || this.options.out === null) return;
    const now = this.options.now();
    for (const job of snapshot.jobs) {
      if (job.ended) continue;
      const verdict = job.verdict;
      const held = verdict !== null && !HEALTHY.has(verdict.verdict) && !isStop(verdict.verdict) && now - verdict.since >= this.options.afterMs;
      const regressed = snapshot.regressions?.some((r) => r.job === job.job && r.regressed) === true;
      if (!regressed) this.regressionCaptured.delete(job.job);
      if (!held && !regressed) continue;
      // Once per episode: a verdict that holds for a week gets one window, not one every --capture-every.
      const episode = held ? `${verdict!.verdict}@${verdict!.since}` : null;
      if (held ? this.episodeCaptured.get(job.job) === episode : this.regressionCaptured.has(job.job)) continue;
      const last = this.lastAsked.get(job.job);
      if (last !== undefined && now - last < this.options.everyMs) continue;
      const result = this.request(snapshot, job.job, null, this.options.steps, held ? 'verdict' : 'regression');
      if (!result.ok) this.lastAsked.set(job.job, now);
      else if (episode !== null) this.episodeCaptured.set(job.job, episode);
      else this.regressionCaptured.add(job.job);
    }
  }

  /** The state's jobs with their captures (only those that have any). */
  decorate(jobs: readonly SnapshotJob[]): SnapshotJob[] {
    return jobs.map((job) => (this.byJob.has(job.job) ? { ...job, captures: [...this.of(job.job)] } : job));
  }

  /** A capture no longer listed: its trace deleted, or, still coming, never stored. */
  private forget(capture: CaptureRecord): void {
    this.incoming.delete(capture.id);
    if (capture.file === null || this.options.out === null) return;
    const file = path.join(this.options.out, capture.file);
    unlink(file).catch((error: Error) => this.options.log.warn({ file, error: error.message }, 'deep capture: an old trace could not be deleted'));
  }

  private find(id: number): CaptureRecord | null {
    for (const list of this.byJob.values()) for (const capture of list) if (capture.id === id) return capture;
    return null;
  }

  private async onFrame(hello: Hello, frame: ProfileFrame): Promise<void> {
    const incoming = this.incoming.get(frame.id);
    const capture = this.find(frame.id);
    // An answer to nothing asked of this rank: ignored (a hook cannot make the sidecar write files).
    if (!incoming || !capture || incoming.job !== hello.job || incoming.rank !== hello.rank) return;
    const fail = (error: string) => {
      this.incoming.delete(frame.id);
      Object.assign(capture, { status: 'refused', error });
      this.options.log.warn({ job: incoming.job, rank: incoming.rank, id: frame.id, error }, 'deep capture: no trace');
    };
    if (frame.error !== undefined) return fail(frame.error);
    if (frame.seq !== incoming.chunks.length) return fail(`chunk ${frame.seq} came where ${incoming.chunks.length} was due`);
    const data = Buffer.from(frame.data ?? new Uint8Array());
    incoming.bytes += data.length;
    if (incoming.bytes > this.options.maxBytes) return fail(`the trace passed ${this.options.maxBytes} bytes`);
    incoming.chunks.push(data);
    if (!frame.last) return;
    this.incoming.delete(frame.id);
    const gz = Buffer.concat(incoming.chunks);
    try {
      await checkTrace(gz);
    } catch (error) {
      return fail(`the trace does not read as gzipped Chrome trace JSON: ${(error as Error).message.slice(0, 200)}`);
    }
    const stamp = capture.requested_at.replace(/[-:.]/g, '');
    const relative = path.join('captures', fileSafeName(incoming.job), `rank${incoming.rank}-${stamp}-${frame.id}.trace.json.gz`);
    const file = path.join(this.options.out!, relative);
    try {
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(`${file}.partial`, gz);
      await rename(`${file}.partial`, file);
    } catch (error) {
      return fail(`the trace could not be stored: ${(error as Error).message}`);
    }
    Object.assign(capture, { status: 'stored', file: relative, bytes: gz.length });
    this.options.log.info({ job: incoming.job, rank: incoming.rank, id: frame.id, file, bytes: gz.length }, 'deep capture stored');
  }
}

/** The rank to capture: the straggler's, else the lowest connected one. */
function pickRank(job: SnapshotJob): number | null {
  if (job.straggler && job.ranks.some((r) => r.rank === job.straggler!.rank && r.connected)) return job.straggler.rank;
  return job.ranks.find((r) => r.connected)?.rank ?? null;
}
