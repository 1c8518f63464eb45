import { Type, type Static } from '@sinclair/typebox';
import { Count, Described, Nullable, Num, Str, StrOrNull, Time } from './schema.js';
import { CauseSchema, SidecarStateSchema, VerdictSchema } from './state.js';

/**
 * The frames of `ws /v1/stream` (sidecar → viewers), JSON in text frames; see "Stream (sidecar →
 * viewers)" in docs/protocol.md, whose field tables are generated from the descriptions here. The
 * sidecar writes them (src/outputs/stream.ts, typed by these), the viewer reads them (checked
 * against these with parseInput). Objects may gain fields within a version; readers ignore what
 * they do not know.
 */

export const STREAM_VERSION = 1;

const Version = Type.Literal(STREAM_VERSION, { description: 'the stream version' });

const Series = (description: string) => Type.Array(Nullable(Type.Number()), { description: `${description}; null where nothing was seen` });

export const StreamHistorySchema = Type.Object(
  {
    from: Time('start of the first slice'),
    slice_s: Num('length of a slice, s'),
    ranks: Type.Array(
      Type.Object({
        job: Str('the job'),
        rank: Count('the rank'),
        step_ms: Series('mean step time of the steps that ended in each slice, ms'),
      }),
      { description: 'ranks with a step since `from`' },
    ),
    gpus: Type.Array(
      Type.Object({
        index: Num('the GPU index'),
        uuid: StrOrNull('GPU UUID'),
        util: Series('mean utilization in each slice, percent'),
        sm_clock_pct: Series('mean SM clock in each slice, percent of its maximum'),
      }),
      { description: 'every GPU seen' },
    ),
  },
  { description: 'per-slice figures for sparklines, oldest first: slice i covers [from + i·slice_s, from + (i+1)·slice_s)' },
);

export const SnapshotFrameSchema = Type.Object(
  {
    v: Version,
    type: Type.Literal('snapshot', { description: 'the frame type' }),
    seq: Count("the sidecar's tick"),
    at: Time('when the state was read'),
    rate_hz: Num('updates a second'),
    state: SidecarStateSchema,
    history: StreamHistorySchema,
  },
  { description: 'the whole state and the last 300 s of history: the first frame, and the next one after a viewer fell behind' },
);

export const UpdateFrameSchema = Type.Object(
  {
    v: Version,
    type: Type.Literal('update', { description: 'the frame type' }),
    seq: Count("the sidecar's tick: one more than the previous update's"),
    at: Time('when the state was read'),
    state: SidecarStateSchema,
    history: StreamHistorySchema,
  },
  { description: 'the whole state and the last few slices of history, which replace the same slices of the history held' },
);

export const VerdictFrameSchema = Type.Object(
  {
    v: Version,
    type: Type.Literal('verdict', { description: 'the frame type' }),
    at: Time('when the sidecar decided'),
    job: Str('the job'),
    rank: Nullable(Type.Integer({ minimum: 0 }), { description: "the rank; null for the job's own verdict" }),
    from: Nullable(VerdictSchema, { description: 'the verdict before; null for the first' }),
    from_cause: Described(CauseSchema, "the previous verdict's cause"),
    to: Described(VerdictSchema, 'the new verdict'),
    cause: Described(CauseSchema, "the new verdict's cause"),
    since: Time('when the new verdict began'),
    rule: Str('the evidence, in words'),
    recommendation: StrOrNull('what to do first; null if nothing'),
  },
  { description: 'a verdict change, sent as soon as the sidecar decides it' },
);

export const StreamFrameSchema = Type.Union([SnapshotFrameSchema, UpdateFrameSchema, VerdictFrameSchema]);

export type StreamHistory = Static<typeof StreamHistorySchema>;
export type SnapshotFrame = Static<typeof SnapshotFrameSchema>;
export type UpdateFrame = Static<typeof UpdateFrameSchema>;
export type VerdictFrame = Static<typeof VerdictFrameSchema>;
export type StreamFrame = Static<typeof StreamFrameSchema>;

/** Close codes of the stream beyond the standard ones. */
export const StreamCloseCode = {
  goingAway: 1001,
  /** The viewer does not read fast enough: too much unsent, or nothing taken for too long. */
  tooSlow: 4008,
} as const;
