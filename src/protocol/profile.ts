import { Type, type Static } from '@sinclair/typebox';
import { Text, Uint } from './hook-schema.js';
import { Bool, Count, Names, Nullable, StrOrNull, Time } from './schema.js';

/**
 * Deep capture: the sidecar asks one rank's hook for a torch.profiler window of K steps (a `profile`
 * request, protocol version 1); the hook answers with the gzipped Chrome trace in `profile` chunks,
 * or one chunk with `error` saying why it has none. The sidecar stores the trace under --out and
 * lists it as a capture (state, summary, report). The hook sends no path: the sidecar names the file.
 */

export const PROFILE_LIMITS = {
  /** Steps a window holds by default, and at most. */
  defaultSteps: 20,
  maxSteps: 1000,
  /** The gzipped trace's bound. */
  maxBytes: 32 * 1024 * 1024,
  /** A chunk's data at most (well under the default 1 MiB frame). */
  chunkBytes: 256 * 1024,
  /** The trace uncompressed at most, when the sidecar checks that it is JSON. */
  maxJsonBytes: 512 * 1024 * 1024,
} as const;

/** A `profile` frame as it arrives from a hook. */
export const ProfileFrameSchema = Type.Object({
  id: Uint(),
  seq: Uint(PROFILE_LIMITS.maxBytes),
  last: Type.Boolean(),
  // msgpack bin: checked as bytes, and for its length, by parseProfileFrame (the JSON validator knows no bytes).
  data: Type.Optional(Type.Unsafe<Uint8Array>({ description: 'a part of the gzipped trace (msgpack bin)' })),
  error: Type.Optional(Text(256)),
});
export type ProfileFrame = Static<typeof ProfileFrameSchema>;

/** What the schema cannot say of `data`: bytes, at most a chunk of them. Null when fine, else why not. */
export function profileDataProblem(frame: ProfileFrame): string | null {
  if (frame.data === undefined) return null;
  if (!(frame.data instanceof Uint8Array)) return 'profile.data: must be bytes (msgpack bin)';
  return frame.data.byteLength > PROFILE_LIMITS.chunkBytes ? `profile.data: ${frame.data.byteLength} bytes, more than a chunk's ${PROFILE_LIMITS.chunkBytes}` : null;
}

/** Asks a hook for a profiler window (sidecar → hook). */
export interface ProfileRequest {
  type: 'profile';
  id: number;
  steps: number;
  max_bytes: number;
  chunk_bytes: number;
}

export const CAPTURE_REASONS = ['verdict', 'regression', 'demand'] as const;
export const CAPTURE_STATUS = ['requested', 'stored', 'refused'] as const;

export const CaptureRecordSchema = Type.Object(
  {
    id: Count('the request id'),
    rank: Count('the rank whose hook recorded it'),
    steps: Count('steps asked for'),
    reason: Names(CAPTURE_REASONS, { description: '`verdict`: a non-healthy verdict held; `regression`: the run held slower than its reference (--regression-threshold); `demand`: `stepscope capture`, POST /v1/capture or the viewer' }),
    verdict: StrOrNull('the verdict (and cause) that held when it was asked for'),
    requested_at: Time('when it was asked for'),
    status: Names(CAPTURE_STATUS, { description: '`requested`: not answered yet; `stored`: the trace is in `file`; `refused`: the hook said why not (`error`)' }),
    file: StrOrNull("the gzipped Chrome trace, relative to --out (captures/<job>/…trace.json.gz): open it in https://ui.perfetto.dev"),
    bytes: Nullable(Count('its size, gzipped')),
    error: StrOrNull('why there is no trace'),
  },
  { description: 'a deep capture: a torch.profiler window of one rank' },
);
export type CaptureRecord = Static<typeof CaptureRecordSchema>;

/** POST /v1/capture's body. */
export const CaptureBodySchema = Type.Object({
  job: Text(128, 1),
  rank: Type.Optional(Uint(65535)),
  steps: Type.Optional(Type.Integer({ minimum: 1, maximum: PROFILE_LIMITS.maxSteps })),
});

export const CaptureAnswerSchema = Type.Object({ ok: Bool('asked'), capture: Nullable(CaptureRecordSchema), reason: StrOrNull('why not') });
export type CaptureAnswer = Static<typeof CaptureAnswerSchema>;
