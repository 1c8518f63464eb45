import type { Static, TSchema } from '@sinclair/typebox';
import { StackFrameSchema, type StackFrame } from './capture.js';
import { profileDataProblem, ProfileFrameSchema, type ProfileFrame, type ProfileRequest } from './profile.js';
import { parseCounterBatch, type CounterBatch } from './counters.js';
import { EndFrame, ENV_LIMITS, EnvFrame, HelloFrame, MAX_ROWS_PER_FRAME, StepsFrame, type Env, type Hello } from './hook-schema.js';
import { parseInput, shortly } from './parse.js';
import { decode, NestedTooDeep } from './codec.js';
import { parseSteps, type Steps } from './step-records.js';
import { readUsualSteps } from './steps-bytes.js';
import { CloseCode, PROTOCOL_VERSION, ProtocolError } from './wire.js';

export { CloseCode, PROTOCOL_VERSION, ProtocolError };
export { recordProblem, type StepRecord, type Steps } from './step-records.js';

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
  // A hook's usual steps frame straight from its bytes; any other frame, or one it would refuse, the general way.
  // Only its frames carry their bytes for the journal: bounded (known keys and columns, integers or
  // nil) and read back by the same reader, whatever else a general-path frame may hold.
  const usual = readUsualSteps(bytes);
  if (usual !== null) return { ...usual, bytes };
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
