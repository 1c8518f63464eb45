import type { Static, TSchema } from '@sinclair/typebox';
import { StackFrameSchema, type StackFrame } from './capture.js';
import { profileDataProblem, ProfileFrameSchema, type ProfileFrame, type ProfileRequest } from './profile.js';
import { parseCounterBatch, type CounterBatch } from './counters.js';
import { EndFrame, ENV_LIMITS, EnvFrame, HelloFrame, MAX_ROWS_PER_FRAME, StepsFrame, type Env, type Hello } from './hook-schema.js';
import { parseInput, shortly } from './parse.js';
import { decode, NestedTooDeep } from './codec.js';

export const PROTOCOL_VERSION = 1;

export const CloseCode = {
  goingAway: 1001,
  protocolError: 1002,
  unsupportedData: 1003,
  invalidPayload: 1007,
  policyViolation: 1008,
  tooBig: 1009,
  internalError: 1011,
  tryAgainLater: 1013,
} as const;

export class ProtocolError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export type { Env, Hello };

export interface EnvUpdate {
  type: 'env';
  env: Env;
}

/** A `hello` as parsed: what is kept, and the resume secret it presented (never journaled). */
export interface HelloMessage {
  type: 'hello';
  hello: Hello;
  resume: string | null;
}

export interface StepRecord {
  seq: number;
  step: number;
  endNs: number;
  durNs: number;
  dataNs: number;
  h2dNs: number;
  computeNs: number;
  samples: number | null;
  gpuH2dNs: number | null;
  gpuComputeNs: number | null;
  gpuIdleNs: number | null;
  /** Wall time inside collectives during the step (overlaps merged), what the training thread waited of it, and the bytes moved. */
  commNs: number | null;
  commWaitNs: number | null;
  commBytes: number | null;
  /** Time in evaluation during the step (a part of what is not data, h2d or compute); null where the hook did not measure it. */
  evalNs: number | null;
}

export interface Steps {
  type: 'steps';
  records: StepRecord[];
  dropped: number;
}

export interface End {
  type: 'end';
  reason: string;
}

export type Counters = { type: 'counters' } & CounterBatch;

/** The hook is alive and its sender thread runs (sent when nothing else went out for `heartbeat_ms`). */
export interface Heartbeat {
  type: 'heartbeat';
}

/** Where the rank is, answering a `capture` request (src/protocol/capture.ts). */
export interface Stack {
  type: 'stack';
  frame: StackFrame;
}

/** A chunk of a profiler window's trace, or why there is none (src/protocol/profile.ts). */
export interface Profile {
  type: 'profile';
  frame: ProfileFrame;
}

export type HookMessage = HelloMessage | EnvUpdate | Steps | End | Counters | Heartbeat | Stack | Profile;

export { MAX_ROWS_PER_FRAME };
const DAY_NS = 86_400 * 1e9;
// Phases are timed with separate clock reads, so their sum may exceed the step by a hair.
const PHASE_SLACK_NS = 1e6;

const MESSAGE_TYPES = ['hello', 'env', 'steps', 'end', 'counters', 'heartbeat', 'stack', 'profile'] as const;
type MessageType = (typeof MESSAGE_TYPES)[number];

function isMessageType(type: unknown): type is MessageType {
  return typeof type === 'string' && (MESSAGE_TYPES as readonly string[]).includes(type);
}

/** `value` as `schema`'s type, or a ProtocolError (1007) that says where and why. */
function parseFrame<T extends TSchema>(schema: T, value: unknown, type: MessageType): Static<T> {
  try {
    return parseInput(schema, value, type);
  } catch (error) {
    throw new ProtocolError(CloseCode.invalidPayload, (error as Error).message);
  }
}

/**
 * What msgpack can carry and JSON cannot, made representable before `env` is checked: integers
 * beyond 2^53 are kept as their decimal text (a seed, an id), everything else is left for the
 * schema to refuse. Only own enumerable keys are copied, into fresh objects.
 */
function representable(value: unknown, where: string, depth = 0): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (depth > 4 || typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return value.map((item: unknown, i) => representable(item, `${where}.${i}`, depth + 1));
  // A Date, bytes, a RegExp, a Map, an object whose prototype a `__proto__` key replaced: no JSON.
  const prototype: unknown = Object.getPrototypeOf(value);
  if (prototype !== Object.prototype && prototype !== null) {
    throw new ProtocolError(CloseCode.invalidPayload, `${where}: must be text, a number, true/false, null, a list or a map (got ${value.constructor?.name ?? 'an object'})`);
  }
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, representable(item, `${where}.${key.slice(0, 40)}`, depth + 1)]));
}

/** A hook's binary frame, decoded and checked: a ProtocolError says why it is refused (1007 undecodable, else its content). */
export function readHookFrame(bytes: Uint8Array): HookMessage {
  let value: unknown;
  try {
    value = decode(bytes);
  } catch (error) {
    const why = error instanceof NestedTooDeep ? error.message : `not valid msgpack (${(error as Error).message})`;
    throw new ProtocolError(CloseCode.invalidPayload, `frame: ${why}`);
  }
  return parseHookMessage(value);
}

/** Validates one decoded frame from a hook; throws ProtocolError with the close code to use. */
export function parseHookMessage(value: unknown): HookMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ProtocolError(CloseCode.invalidPayload, 'frame: must be a msgpack map');
  }
  const frame = value as Record<string, unknown>;
  if (frame.v !== PROTOCOL_VERSION) {
    throw new ProtocolError(CloseCode.policyViolation, `v: unsupported protocol version ${shortly(frame.v)}`);
  }
  if (!isMessageType(frame.type)) {
    throw new ProtocolError(CloseCode.policyViolation, `type: unknown message type ${shortly(frame.type)}`);
  }
  switch (frame.type) {
    case 'hello':
      return parseHello(parseFrame(HelloFrame, { ...frame, env: representable(frame.env, 'hello.env') }, 'hello'));
    case 'env':
      return { type: 'env', env: checkEnvSize(parseFrame(EnvFrame, { env: representable(frame.env, 'env.env') }, 'env').env, 'env') };
    case 'steps':
      return parseSteps(parseFrame(StepsFrame, frame, 'steps'));
    case 'end':
      return { type: 'end', reason: parseFrame(EndFrame, frame, 'end').reason };
    case 'counters': {
      const batch = parseCounterBatch(frame.source, frame.samples);
      if (typeof batch === 'string') throw new ProtocolError(CloseCode.invalidPayload, batch);
      return { type: 'counters', ...batch };
    }
    case 'heartbeat':
      return { type: 'heartbeat' };
    case 'stack':
      return { type: 'stack', frame: parseFrame(StackFrameSchema, frame, 'stack') };
    case 'profile': {
      const profile = parseFrame(ProfileFrameSchema, frame, 'profile');
      const problem = profileDataProblem(profile);
      if (problem) throw new ProtocolError(CloseCode.invalidPayload, problem);
      return { type: 'profile', frame: profile };
    }
  }
}

/** The serialised size of an env, as it is kept and served. */
export function envBytes(env: Env): number {
  return Buffer.byteLength(JSON.stringify(env));
}

function checkEnvSize(env: Env, what: string): Env {
  const bytes = envBytes(env);
  if (bytes > ENV_LIMITS.rankBytes) {
    throw new ProtocolError(CloseCode.invalidPayload, `${what}: ${bytes} bytes as JSON, more than the ${ENV_LIMITS.rankBytes} a rank may hold`);
  }
  return env;
}

function wallMs(value: unknown): number {
  if (typeof value === 'bigint' && value >= 0n && value <= 2n ** 63n) return Number(value / 1000n) / 1000;
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return value / 1e6;
  throw new ProtocolError(CloseCode.invalidPayload, 'hello.clock.wall_ns: must be a non-negative integer');
}

function parseHello(frame: Static<typeof HelloFrame>): HelloMessage {
  if (frame.rank >= frame.world_size) {
    throw new ProtocolError(CloseCode.invalidPayload, `hello.rank: ${frame.rank} is not below world_size ${frame.world_size}`);
  }
  const hello: Hello = {
    type: 'hello',
    job: frame.job,
    rank: frame.rank,
    local_rank: frame.local_rank,
    world_size: frame.world_size,
    session: frame.session,
    pid: frame.pid,
    host: frame.host,
    clock: { wall_ms: wallMs(frame.clock.wall_ns), mono_ns: frame.clock.mono_ns },
    env: checkEnvSize(frame.env, 'hello.env'),
  };
  if (frame.acked !== undefined) hello.acked = frame.acked;
  if (frame.heartbeat_ms !== undefined) hello.heartbeat_ms = frame.heartbeat_ms;
  if (frame.capture !== undefined) hello.capture = frame.capture;
  if (frame.profile !== undefined) hello.profile = frame.profile;
  if (frame.proc_start !== undefined) hello.proc_start = frame.proc_start;
  return { type: 'hello', hello, resume: frame.resume ?? null };
}

export const REQUIRED_COLUMNS = ['seq', 'step', 'end_ns', 'dur_ns', 'data_ns', 'h2d_ns', 'compute_ns', 'samples'] as const;
export const GPU_COLUMNS = ['gpu_h2d_ns', 'gpu_compute_ns', 'gpu_idle_ns'] as const;
/** Sent only by hooks that measure collectives (stepscope.watch_ddp or the collective wrappers). */
export const COMM_FIELDS = ['comm_ns', 'comm_wait_ns', 'comm_bytes'] as const;
/** Sent by hooks that tell evaluation apart (the zero-code path, scope.phase("eval")). */
export const EVAL_FIELD = 'eval_ns';
const OPTIONAL_COLUMNS = [...GPU_COLUMNS, ...COMM_FIELDS, EVAL_FIELD] as const;
const NULLABLE = new Set<string>(['samples', ...OPTIONAL_COLUMNS]);
/** A step record's columns in StepRecord's order (parseSteps reads them by position). */
const RECORD_COLUMNS = [...REQUIRED_COLUMNS, ...OPTIONAL_COLUMNS] as const;

function columnIndex(fields: string[]): Map<string, number> {
  const index = new Map<string, number>();
  fields.forEach((name, i) => {
    if (index.has(name)) throw new ProtocolError(CloseCode.invalidPayload, `steps.fields: duplicate column ${name}`);
    index.set(name, i);
  });
  for (const name of REQUIRED_COLUMNS) {
    if (!index.has(name)) throw new ProtocolError(CloseCode.invalidPayload, `steps.fields: missing column ${name}`);
  }
  return index;
}

function readColumn(row: readonly unknown[], r: number, name: string, at: number | undefined): number | null {
  const value = at === undefined ? null : row[at];
  if (value === null || value === undefined) {
    if (NULLABLE.has(name)) return null;
    throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${name}: missing`);
  }
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${name}: must be a non-negative integer, got ${describeValue(value)}`);
  }
  return value;
}

function describeValue(value: unknown): string {
  if (typeof value === 'bigint') return 'an integer beyond 2^53';
  if (typeof value === 'number') return String(value);
  return typeof value;
}

function parseSteps(frame: Static<typeof StepsFrame>): Steps {
  const { fields, rows } = frame;
  const index = columnIndex(fields);
  // Each column's position, looked up once a frame rather than once a value (the ingest's hottest loop).
  const [seq, step, endNs, durNs, dataNs, h2dNs, computeNs, samples, gpuH2dNs, gpuComputeNs, gpuIdleNs, commNs, commWaitNs, commBytes, evalNs] = RECORD_COLUMNS.map((name) => index.get(name));
  const records: StepRecord[] = new Array(rows.length);
  let previousSeq = 0;
  for (let r = 0; r < rows.length; r++) {
    const row = rows[r]!;
    if (row.length !== fields.length) {
      throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}]: has ${row.length} values for ${fields.length} fields`);
    }
    const record: StepRecord = {
      seq: readColumn(row, r, 'seq', seq)!,
      step: readColumn(row, r, 'step', step)!,
      endNs: readColumn(row, r, 'end_ns', endNs)!,
      durNs: readColumn(row, r, 'dur_ns', durNs)!,
      dataNs: readColumn(row, r, 'data_ns', dataNs)!,
      h2dNs: readColumn(row, r, 'h2d_ns', h2dNs)!,
      computeNs: readColumn(row, r, 'compute_ns', computeNs)!,
      samples: readColumn(row, r, 'samples', samples),
      gpuH2dNs: readColumn(row, r, 'gpu_h2d_ns', gpuH2dNs),
      gpuComputeNs: readColumn(row, r, 'gpu_compute_ns', gpuComputeNs),
      gpuIdleNs: readColumn(row, r, 'gpu_idle_ns', gpuIdleNs),
      commNs: readColumn(row, r, 'comm_ns', commNs),
      commWaitNs: readColumn(row, r, 'comm_wait_ns', commWaitNs),
      commBytes: readColumn(row, r, 'comm_bytes', commBytes),
      evalNs: readColumn(row, r, EVAL_FIELD, evalNs),
    };
    // readColumn has checked every value is a non-negative integer or null.
    const problem = relationProblem(record, previousSeq);
    if (problem !== null) throw new ProtocolError(CloseCode.invalidPayload, `steps.rows[${r}].${problem}`);
    previousSeq = record.seq;
    records[r] = record;
  }
  return { type: 'steps', records, dropped: frame.dropped };
}

/** Why a step record cannot be one (durations, phases, order), or null: the same checks for a frame and a journal row. */
export function recordProblem(record: StepRecord, previousSeq: number): string | null {
  // The engine checks every applied row again, live ones included: no Object.entries pairs per record.
  for (const name of RECORD_KEYS) {
    const value = record[name];
    if (value !== null && !(Number.isSafeInteger(value) && value >= 0)) return `${name}: must be a non-negative integer`;
  }
  return relationProblem(record, previousSeq);
}

/** Every StepRecord key (the object's type makes the list complete). */
const RECORD_KEYS = Object.keys({
  seq: true,
  step: true,
  endNs: true,
  durNs: true,
  dataNs: true,
  h2dNs: true,
  computeNs: true,
  samples: true,
  gpuH2dNs: true,
  gpuComputeNs: true,
  gpuIdleNs: true,
  commNs: true,
  commWaitNs: true,
  commBytes: true,
  evalNs: true,
} satisfies Record<keyof StepRecord, true>) as (keyof StepRecord)[];

/**
 * What is wrong between a record's values (its order, its phases against its duration), or null;
 * each value already a non-negative integer or null. No allocation on the way to null: it runs for
 * every step record received.
 */
function relationProblem(record: StepRecord, previousSeq: number): string | null {
  if (record.seq < 1) return 'seq: must be >= 1';
  if (record.seq <= previousSeq) return `seq: ${record.seq} does not follow ${previousSeq}`;
  if (record.durNs <= 0) return 'dur_ns: must be > 0';
  if (record.durNs > DAY_NS) return `dur_ns: ${record.durNs} is longer than a day`;
  const phases = record.dataNs + record.h2dNs + record.computeNs;
  if (phases > record.durNs + PHASE_SLACK_NS) return 'phases: data_ns + h2d_ns + compute_ns exceed dur_ns';
  if (record.evalNs !== null && phases + record.evalNs > record.durNs + PHASE_SLACK_NS) return 'eval_ns: data_ns + h2d_ns + compute_ns + eval_ns exceed dur_ns';
  if (record.gpuH2dNs !== null && record.gpuH2dNs > DAY_NS) return `gpu_h2d_ns: ${record.gpuH2dNs} is longer than a day`;
  if (record.gpuComputeNs !== null && record.gpuComputeNs > DAY_NS) return `gpu_compute_ns: ${record.gpuComputeNs} is longer than a day`;
  if (record.gpuIdleNs !== null && record.gpuIdleNs > DAY_NS) return `gpu_idle_ns: ${record.gpuIdleNs} is longer than a day`;
  if (record.commNs !== null && record.commNs > DAY_NS) return `comm_ns: ${record.commNs} is longer than a day`;
  // The wait is part of the time in collectives, and the training thread cannot wait longer than its step.
  if (record.commWaitNs !== null && record.commWaitNs > Math.min(record.commNs ?? Infinity, record.durNs) + PHASE_SLACK_NS) {
    return 'comm_wait_ns: exceeds comm_ns or dur_ns';
  }
  return null;
}

export interface Welcome {
  type: 'welcome';
  session: string;
  /** The secret to send back as `resume` in any later hello of this session: only its holder resumes it. */
  resume: string;
  ack: number;
  /** Which counters the sidecar wants the hook to forward, and how often (ms). */
  counters: { nvml: boolean; interval_ms: number; process: boolean; memory: boolean };
  /** To a hook that offered them: send a frame at least this often (a `heartbeat` when nothing else goes out). */
  heartbeat_ms?: number;
  /** To a hook that offered them: `capture` requests will come; `deep`: every thread's whole stack. */
  capture?: { deep: boolean };
  /** Whether a viewer watches this sidecar now: a hook sends less often while none does (later changes come as `watch`). Absent: an older sidecar. */
  watched?: boolean;
}

/** A viewer started or stopped watching: the hook's batches go back to their short interval, or may lengthen (sent on change only; older hooks ignore it). */
export interface WatchNotice {
  type: 'watch';
  watched: boolean;
}

/** Asks the hook where its training thread is: it answers with a `stack` frame carrying `id`. */
export interface CaptureRequest {
  type: 'capture';
  id: number;
}

export interface Ack {
  type: 'ack';
  ack: number;
  end?: true;
}

export type SidecarMessage = Welcome | Ack | CaptureRequest | ProfileRequest | WatchNotice;

export function sidecarFrame(message: SidecarMessage): Record<string, unknown> {
  return { v: PROTOCOL_VERSION, ...message };
}
