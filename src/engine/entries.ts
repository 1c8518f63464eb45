import type { ErrorObject } from 'ajv';
import type { ComputeApp } from '../counters/compute-apps.js';
import type { HostSample } from '../counters/host.js';
import type { GpuSample } from '../counters/types.js';
import type { CounterBatch } from '../protocol/counters.js';
import { CaptureSchema, ProcReadingSchema, type Capture, type ProcReading } from '../protocol/capture.js';
import { EnvSchema, HelloSchema, MAX_ROWS_PER_FRAME, ResumeSecret } from '../protocol/hook-schema.js';
import { Type, type Static } from '@sinclair/typebox';
import { InputError, parseInput, shortly, validatorOf } from '../protocol/parse.js';
import { Nullable } from '../protocol/schema.js';
import { NodeInventorySchema, type NodeInventory } from '../protocol/state.js';
import { SummarySchema } from '../protocol/summary.js';
import { recordProblem, type Env, type Hello, type StepRecord } from '../protocol/messages.js';
import { readUsualSteps } from '../protocol/steps-bytes.js';
import { Base64Text } from '../io/json-parts.js';

/**
 * What the engine is fed, one entry at a time, live or from the journal: every input that shapes its
 * state, including the decisions of the live sidecar (the GPU source, connections, the times of the
 * analysis ticks), so that replaying the journal rebuilds exactly the state the live sidecar had.
 */

/** The settings that change what the engine computes; journaled so a replay computes the same. */
export interface EngineConfig {
  windowMs: number;
  holdMs: number;
  endGraceMs: number;
  /** What a GPU-hour costs (--gpu-hour-price), to price the waste ledger; absent: not priced. */
  gpuHourPrice?: number | null;
  /** A rank is stalled after this many of its median steps without one (--stall-steps; absent: the default) ... */
  stallSteps?: number;
  /** ... and not before this, ms (--stall-floor). */
  stallFloorMs?: number;
  /** --stack-dumps: every rank's stacks are written under --out when a job is declared hung. */
  stackDumps?: boolean;
  /** A run this many percent slower per sample than its reference is a regression (--regression-threshold; absent: the default) ... */
  regressionThresholdPct?: number;
  /** ... once it has stayed past it this long, ms (absent: the default). */
  regressionHoldMs?: number;
}

export type JournalEntry =
  /** The sidecar started (again): nobody is connected yet; these are its settings. */
  | { t: 'start'; at: number; config: EngineConfig }
  /** The GPU counter source the sidecar chose: hook-forwarded GPU readings count only when it is `hook`. */
  | { t: 'source'; at: number; gpu: string; reason: string }
  /** `secret`: the session's resume secret (minted for a new session, the held one when resumed). */
  | { t: 'hello'; at: number; hello: Hello; secret?: string }
  | { t: 'connect'; at: number; session: string }
  /**
   * `reason`: `silent` when the sidecar closed the connection because nothing came from it (no frame,
   * no pong) for the idle timeout; absent when it closed from the hook's side or the sidecar's for
   * another reason (journals before it have none).
   */
  | { t: 'disconnect'; at: number; session: string; reason?: DisconnectReason }
  /** A hook's heartbeat: its process is alive and its sender thread runs. */
  | { t: 'beat'; at: number; session: string }
  /** Where a stalled rank was, as its hook answered a `capture` request. */
  | { t: 'stack'; at: number; session: string; capture: Capture }
  /** The rank's process as the sidecar read it in /proc (while it is stalled or silent). */
  | { t: 'proc'; at: number; session: string; reading: ProcReading }
  | { t: 'env'; at: number; session: string; env: Env }
  | StepsEntry
  | { t: 'end'; at: number; session: string; reason: string }
  | { t: 'counters'; at: number; session: string; batch: CounterBatch }
  /** `fill`: readings of a second source that only fill the throttle signals the GPU source lacks (nvidia-smi beside DCGM). */
  | { t: 'gpu'; at: number; samples: GpuSample[]; fill?: 'nvidia-smi' }
  | { t: 'host'; at: number; sample: HostSample }
  /** The node's static inventory, read once at start: the summaries of runs carry it. */
  | { t: 'node'; at: number; node: NodeInventory }
  /** The compute processes on every GPU, as the sidecar's nvidia-smi listed them. */
  | { t: 'apps'; at: number; apps: ComputeApp[] }
  /** Run the analysis as of `at`: verdicts, job ends, a new snapshot. */
  | { t: 'tick'; at: number }
  /** The sidecar stopped: every running job ends (a hook that comes back resumes its run). */
  | { t: 'stop'; at: number }
  /** A run's summary files are written: a restart does not write them again. */
  | { t: 'summarized'; at: number; job: string; run: number }
  | ReferenceEntry;

/** Where a live steps entry carries its checked records (liveSteps, recordsOf). */
export const CHECKED: unique symbol = Symbol('checked records');

/**
 * The records are held one of two ways. `frame`: the hook's steps frame as it came (its msgpack
 * bytes in base64), where every record of it was kept; `rows`: the records one array each, where
 * some were left out (and in journals written before frames were kept). Exactly one is present.
 * `duplicates`: records of the frame left out as already held (counted, not stored); `refused`:
 * records left out for implausible times, counted, and acknowledged up to seq `through`.
 * `[CHECKED]`: the live frame's records, already checked by the frame's parse; JSON never holds a
 * symbol key, so the journal never writes it and a replay never has it.
 */
export interface StepsEntry {
  t: 'steps';
  at: number;
  session: string;
  dropped: number;
  rows?: StepRow[];
  frame?: string;
  duplicates?: number;
  refused?: { count: number; through: number };
  [CHECKED]?: readonly StepRecord[];
}

/** The `reference` entry's version: a journal holding another is refused entry by entry, with the reason. */
export const REFERENCE_ENTRY_VERSION = 1;
/** Past runs a `reference` entry holds at most (REFERENCE_RUNS of each fingerprint the job ran on). */
const MAX_PAST_RUNS = 64;

/**
 * What the job's runs are compared with from now on, as the sidecar read it when it first held the
 * job and each time it kept one of its runs: the pinned --baseline, or the job's past runs
 * (src/engine/runs.ts). The schema is the type.
 */
export const ReferenceEntrySchema = Type.Object({
  t: Type.Literal('reference'),
  at: Type.Number({ minimum: 0, maximum: 1e15 }),
  v: Type.Literal(REFERENCE_ENTRY_VERSION, { description: "the entry's version" }),
  job: Type.String({ minLength: 1, maxLength: 256 }),
  pinned: Nullable(SummarySchema, { description: '--baseline: every run is compared with it rather than with its past runs' }),
  past: Type.Array(SummarySchema, { maxItems: MAX_PAST_RUNS, description: "the job's past runs that ended with steps, oldest first" }),
});
export type ReferenceEntry = Static<typeof ReferenceEntrySchema>;

export type EntryType = JournalEntry['t'];

export const DISCONNECT_REASONS = ['silent'] as const;
export type DisconnectReason = (typeof DISCONNECT_REASONS)[number];

/** A step record as stored: the protocol's `fields` order. */
export type StepRow = (number | null)[];

export function toRow(r: StepRecord): StepRow {
  const row = [r.seq, r.step, r.endNs, r.durNs, r.dataNs, r.h2dNs, r.computeNs, r.samples, r.gpuH2dNs, r.gpuComputeNs, r.gpuIdleNs];
  // Communication and evaluation columns only when measured, so rows of jobs without them stay as short as before.
  if (r.evalNs !== null) return [...row, r.commNs, r.commWaitNs, r.commBytes, r.evalNs];
  return r.commNs === null && r.commWaitNs === null && r.commBytes === null ? row : [...row, r.commNs, r.commWaitNs, r.commBytes];
}

export function fromRow(row: StepRow): StepRecord {
  const at = (i: number) => row[i] ?? null;
  return {
    seq: at(0) ?? 0,
    step: at(1) ?? 0,
    endNs: at(2) ?? 0,
    durNs: at(3) ?? 0,
    dataNs: at(4) ?? 0,
    h2dNs: at(5) ?? 0,
    computeNs: at(6) ?? 0,
    samples: at(7),
    gpuH2dNs: at(8),
    gpuComputeNs: at(9),
    gpuIdleNs: at(10),
    commNs: at(11),
    commWaitNs: at(12),
    commBytes: at(13),
    evalNs: at(14),
  };
}

/**
 * Frames of fewer records are journaled as rows: below this, the frame's own header (its column
 * names, ~140 bytes) makes it about as large as the rows or larger, and their JSON costs little.
 */
const FRAME_MIN_RECORDS = 8;

/**
 * A live frame's steps entry, made from the records the frame's parse checked, which the engine
 * applies as they are instead of reading them back and checking them again. `frame`: the bytes the
 * records were read from; when every record of it is kept (none already held, none refused), and
 * there are enough of them, the journal writes those bytes rather than a row per record (no array
 * and no number text per value).
 */
export function liveSteps(
  at: number,
  session: string,
  dropped: number,
  records: readonly StepRecord[],
  duplicates: number,
  refused: { count: number; through: number } | null,
  frame: Uint8Array | null = null,
): StepsEntry {
  const whole = frame !== null && records.length >= FRAME_MIN_RECORDS && duplicates === 0 && refused === null;
  return new LiveSteps(at, session, dropped, records, duplicates, refused, whole ? frame : null);
}

/**
 * A live steps entry. What the journal writes of it, the frame's base64 or the rows, is made as it
 * serializes the entry (the journal's writer calls toJSON), not held while the write is in flight. A
 * method on the class, not a getter on each entry: a `rows` getter in the entry's literal cost the
 * ingest 0.4 µs a record even where nothing read it (BENCHMARKS.md, "The journal keeps the frame").
 * A frame's bytes are copied: they are a view of the socket's whole read, which holding them until
 * the write is done would keep.
 */
class LiveSteps implements StepsEntry {
  readonly t = 'steps';
  readonly [CHECKED]: readonly StepRecord[];
  readonly refused?: { count: number; through: number };
  private readonly bytes: Buffer | null;

  constructor(
    readonly at: number,
    readonly session: string,
    readonly dropped: number,
    records: readonly StepRecord[],
    readonly duplicates: number,
    refused: { count: number; through: number } | null,
    frame: Uint8Array | null,
  ) {
    this[CHECKED] = records;
    if (refused) this.refused = refused;
    this.bytes = frame && Buffer.from(frame);
  }

  /**
   * The entry as the journal writes it, its keys in the order every steps entry has had: rows lines
   * stay byte for byte what they were. The frame's base64 is written in slices (src/io/json-parts.ts).
   */
  toJSON(): Omit<StepsEntry, typeof CHECKED | 'frame'> & { frame?: Base64Text } {
    const { t, at, session, dropped, duplicates, refused, bytes } = this;
    const records = bytes ? { frame: new Base64Text(bytes) } : { rows: this[CHECKED].map(toRow) };
    return { t, at, session, dropped, ...records, duplicates, ...(refused ? { refused } : {}) };
  }
}

/**
 * A steps entry's records: a live one's as checked, else read back (a kept frame by the hook
 * frame's own reader, rows one by one); one that fails the frame's checks throws, with the reason
 * the entry is skipped for (`steps: bad row`, `steps: bad frame`: one reason each, a metric label).
 */
export function recordsOf(entry: StepsEntry): readonly StepRecord[] {
  const checked = entry[CHECKED];
  if (checked) return checked;
  if (entry.frame !== undefined) return framedRecords(entry.frame);
  const records = (entry.rows ?? []).map(fromRow);
  if (records.some((record, i) => recordProblem(record, i === 0 ? 0 : records[i - 1]!.seq) !== null)) throw new Error('bad row');
  return records;
}

/**
 * A kept frame's records, by the reader that read it live (only its frames are kept): what it
 * refuses is a frame no sidecar journaled. A test holds it to a real hook's frame, kept literally,
 * so that a change to the wire's frames cannot leave journaled ones unreadable unnoticed.
 */
function framedRecords(base64: string): readonly StepRecord[] {
  const steps = readUsualSteps(Buffer.from(base64, 'base64'));
  if (steps === null) throw new Error('bad frame');
  return steps.records;
}

// The shape of each entry as the journal may hold it. What these let through is applied by a total
// engine, which skips and counts anything it still cannot use (an unknown session, say).
const time = { type: 'number', minimum: 0, maximum: 1e15 } as const;
const id = { type: 'string', minLength: 1, maxLength: 256 } as const;
const object = { type: 'object' } as const;
const int = { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;
const nullableNumber = { type: ['number', 'null'] } as const;

const STEP_ROWS = { type: 'array', items: { type: 'array', minItems: 7, maxItems: 64, items: nullableNumber } } as const;
// A usual steps frame's most rows, each of at most 15 values of at most 9 bytes, and room for its keys and columns: in base64.
const FRAME = { type: 'string', minLength: 1, maxLength: Math.ceil((MAX_ROWS_PER_FRAME * (5 + 15 * 9) + 4096) / 3) * 4 } as const;

/** The `start` entry's settings; a checkpoint holds the settings in force by the same rule. */
export const ENGINE_CONFIG = {
  type: 'object',
  required: ['windowMs', 'holdMs', 'endGraceMs'],
  properties: {
    windowMs: { type: 'number', minimum: 1, maximum: 3.6e6 },
    holdMs: { type: 'number', minimum: 0, maximum: 3.6e6 },
    endGraceMs: { type: 'number', minimum: 0, maximum: 1e9 },
    gpuHourPrice: { type: ['number', 'null'], minimum: 0, maximum: 1e6 },
    stallSteps: { type: 'number', minimum: 1, maximum: 1000 },
    stallFloorMs: { type: 'number', minimum: 0, maximum: 3.6e6 },
    stackDumps: { type: 'boolean' },
    regressionThresholdPct: { type: 'number', minimum: 0, maximum: 1e6 },
    regressionHoldMs: { type: 'number', minimum: 0, maximum: 3.6e6 },
  },
} as const;

const ENTRY_SCHEMAS: Record<Exclude<EntryType, 'reference'>, object> = {
  start: { required: ['config'], properties: { config: ENGINE_CONFIG } },
  source: { required: ['gpu', 'reason'], properties: { gpu: { type: 'string', maxLength: 32 }, reason: { type: 'string', maxLength: 4096 } } },
  hello: { required: ['hello'], properties: { hello: HelloSchema, secret: ResumeSecret } },
  connect: { required: ['session'], properties: { session: id } },
  disconnect: { required: ['session'], properties: { session: id, reason: { enum: DISCONNECT_REASONS } } },
  beat: { required: ['session'], properties: { session: id } },
  stack: { required: ['session', 'capture'], properties: { session: id, capture: CaptureSchema } },
  proc: { required: ['session', 'reading'], properties: { session: id, reading: ProcReadingSchema } },
  env: { required: ['session', 'env'], properties: { session: id, env: EnvSchema } },
  steps: {
    required: ['session', 'dropped'],
    // The records as rows or as the frame they came in, never both: a replay must not have to choose.
    // (Each form's schema again in its branch: Ajv's strict mode wants a required key defined beside it.)
    oneOf: [
      { required: ['rows'], properties: { rows: STEP_ROWS } },
      { required: ['frame'], properties: { frame: FRAME } },
    ],
    properties: {
      session: id,
      dropped: int,
      duplicates: int,
      refused: { type: 'object', required: ['count', 'through'], properties: { count: int, through: int } },
      rows: STEP_ROWS,
      frame: FRAME,
    },
  },
  end: { required: ['session', 'reason'], properties: { session: id, reason: { type: 'string' } } },
  counters: {
    required: ['session', 'batch'],
    properties: { session: id, batch: { type: 'object', required: ['source', 'samples'], properties: { source: { enum: ['nvml', 'process', 'memory'] }, samples: { type: 'array', items: object } } } },
  },
  gpu: { required: ['samples'], properties: { fill: { enum: ['nvidia-smi'] }, samples: { type: 'array', items: { type: 'object', required: ['at', 'index'], properties: { at: time, index: { type: 'integer' } } } } } },
  host: { required: ['sample'], properties: { sample: { type: 'object', required: ['at'], properties: { at: time } } } },
  node: { required: ['node'], properties: { node: NodeInventorySchema } },
  apps: {
    required: ['apps'],
    properties: {
      apps: {
        type: 'array',
        maxItems: 4096,
        items: {
          type: 'object',
          required: ['gpuUuid', 'pid', 'name', 'usedMiB'],
          properties: { gpuUuid: { type: 'string', maxLength: 128 }, pid: int, name: { type: 'string', maxLength: 4096 }, usedMiB: { type: ['number', 'null'], minimum: 0 } },
        },
      },
    },
  },
  tick: {},
  stop: {},
  summarized: { required: ['job', 'run'], properties: { job: id, run: { type: 'integer', minimum: 1 } } },
};

// Each compiled by the one Ajv when an entry of its kind is first read, not when the sidecar starts.
export const entrySchemas = Object.fromEntries(
  Object.entries(ENTRY_SCHEMAS).map(([t, schema]) => {
    const own = schema as { required?: string[]; properties?: object };
    // `t` and `at` are required of every entry, beside what each kind requires.
    return [t, { type: 'object', ...schema, required: ['t', 'at', ...(own.required ?? [])], properties: { t: { const: t }, at: time, ...own.properties } }];
  }),
) as Record<Exclude<EntryType, 'reference'>, object>;

function describe(t: string, error: ErrorObject | undefined): string {
  const where = error?.instancePath.replace(/^\//, '').replaceAll('/', '.') ?? '';
  return `${t}${where ? '.' + where : ''}: ${error?.message ?? 'invalid'}`.slice(0, 200);
}

/** A journal entry, or the reason the value is not one. */
export function parseEntry(value: unknown): JournalEntry | string {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'entry: not an object';
  const t = (value as { t?: unknown }).t;
  if (t === 'reference') return parseReference(value);
  if (typeof t !== 'string' || !Object.hasOwn(entrySchemas, t)) return `entry: unknown type ${shortly(t)}`;
  const validate = validatorOf(entrySchemas[t as Exclude<EntryType, 'reference'>]);
  return validate(value) ? (value as JournalEntry) : describe(t, validate.errors?.[0]);
}

function parseReference(value: unknown): ReferenceEntry | string {
  try {
    return parseInput(ReferenceEntrySchema, value, 'reference');
  } catch (error) {
    if (error instanceof InputError) return error.message;
    throw error;
  }
}
