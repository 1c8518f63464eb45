import { Type, type Static } from '@sinclair/typebox';

/**
 * The shapes a hook may send (docs/protocol.md), as TypeBox schemas: each is the JSON Schema that
 * validates a frame and the type the sidecar uses after it. Every value is bounded so that nothing a
 * client sends can grow the sidecar's memory or fail to serialise (JSON, the journal, /metrics).
 */

/** Text with no control characters (C0, DEL, C1): shown in a terminal, a log line or a label, it cannot steer them. */
export const PRINTABLE = '^[^\\u0000-\\u001f\\u007f-\\u009f]*$';
export const Text = (maxLength: number, minLength = 0) => Type.String({ pattern: PRINTABLE, minLength, maxLength });
export const Uint = (maximum = Number.MAX_SAFE_INTEGER) => Type.Integer({ minimum: 0, maximum });

/** Keys of `env`: printable, short, never one that could set an object's prototype. */
const EnvKey = Type.String({ pattern: '^(?!__proto__$)[^\\u0000-\\u001f\\u007f-\\u009f]{1,64}$' });
export const ENV_LIMITS = {
  /** Keys per map, items per list. */
  entries: 64,
  textChars: 1024,
  /** The serialised size of one rank's env (as JSON), whatever the hellos and updates sent. */
  rankBytes: 16 * 1024,
} as const;
const EnvScalar = Type.Union([Text(ENV_LIMITS.textChars), Type.Number(), Type.Boolean(), Type.Null()]);
// additionalProperties: a key the pattern refuses must be refused, not let through unchecked.
const envMap = <T extends Parameters<typeof Type.Record>[1]>(value: T) => Type.Record(EnvKey, value, { maxProperties: ENV_LIMITS.entries, additionalProperties: false });
const envList = <T extends Parameters<typeof Type.Array>[0]>(value: T) => Type.Array(value, { maxItems: ENV_LIMITS.entries });
// Three levels of maps and lists: `loader: { num_workers: 8 }` and the like, and no deeper.
const EnvLevel3 = Type.Union([EnvScalar, envList(EnvScalar), envMap(EnvScalar)]);
const EnvLevel2 = Type.Union([EnvScalar, envList(EnvLevel3), envMap(EnvLevel3)]);
/** What a rank says about itself (software versions, loader settings, device): text, numbers, flags, lists and maps. */
export const EnvSchema = envMap(EnvLevel2);
export type Env = Static<typeof EnvSchema>;

/** Session ids are the hook's random hex; kept to characters that are safe in any key, label or path. */
export const SessionId = Type.String({ pattern: '^[A-Za-z0-9._:-]{1,64}$' });
/** The secret a session is resumed with, handed out in `welcome`. */
export const ResumeSecret = Type.String({ pattern: '^[0-9a-f]{32}$' });

const identity = {
  job: Text(128, 1),
  rank: Uint(),
  local_rank: Uint(65535),
  world_size: Type.Integer({ minimum: 1, maximum: 65536 }),
  session: SessionId,
  pid: Uint(),
  host: Text(255),
  env: EnvSchema,
  /** The highest seq the hook has had acknowledged in this session (0 before any): bounds what a session new to this sidecar may send. */
  acked: Type.Optional(Uint()),
  /** The hook sends a frame at least this often while its sender thread runs (a `heartbeat` when nothing else goes out), once `welcome` asks for them. Absent: an older hook. */
  heartbeat_ms: Type.Optional(Type.Integer({ minimum: 100, maximum: 60_000 })),
  /** The hook answers `capture` requests with a `stack` frame. */
  capture: Type.Optional(Type.Boolean()),
  /** The hook answers `profile` requests with a torch.profiler window (src/protocol/profile.ts). */
  profile: Type.Optional(Type.Boolean()),
  /** The process's start in clock ticks after boot (/proc/self/stat): tells it from another process with the same pid. */
  proc_start: Type.Optional(Uint()),
};

/** `hello` as it arrives: `wall_ns` comes as a bigint (today's dates pass 2^53) and is checked on its own. */
export const HelloFrame = Type.Object({
  ...identity,
  clock: Type.Object({ wall_ns: Type.Unknown(), mono_ns: Uint() }),
  resume: Type.Optional(Type.Union([ResumeSecret, Type.Null()])),
});

/** A rank's `hello` as the sidecar keeps it (and journals it): the wall clock in ms, no secret. */
export const HelloSchema = Type.Object({
  type: Type.Literal('hello'),
  ...identity,
  clock: Type.Object({ wall_ms: Type.Number({ minimum: 0 }), mono_ns: Uint() }),
});
export type Hello = Static<typeof HelloSchema>;

export const EnvFrame = Type.Object({ env: EnvSchema });
export const EndFrame = Type.Object({ reason: Text(64) });

export const MAX_ROWS_PER_FRAME = 4096;
export const StepsFrame = Type.Object({
  fields: Type.Array(Type.String({ pattern: '^[a-z0-9_]{1,64}$' }), { minItems: 8, maxItems: 64 }),
  // Each value is checked by its column (messages.ts), so that an error names the column.
  rows: Type.Array(Type.Array(Type.Unknown(), { maxItems: 64 }), { minItems: 1, maxItems: MAX_ROWS_PER_FRAME }),
  /** Records the hook dropped in this session so far (its buffers were full). */
  dropped: Uint(),
});
