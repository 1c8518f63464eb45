import { Type, type Static } from '@sinclair/typebox';
import { Count, Described, Names, Nullable, Num, NumOrNull, Str, StrOrNull, Time } from './schema.js';
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
        key: Type.Optional(Str('what tells this device from the others, as in the state\'s counters.gpus[].key (a MIG slice under DCGM shares its parent\'s UUID); absent from older sidecars')),
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

export const RegressionFrameSchema = Type.Object(
  {
    v: Version,
    type: Type.Literal('regression', { description: 'the frame type' }),
    at: Time('when the sidecar decided'),
    job: Str('the job'),
    run: Type.Integer({ minimum: 1, description: 'its run number on this sidecar' }),
    status: Names(['started', 'ended', 'ongoing'] as const, {
      description: 'it began; it is over (back within the threshold); or it holds, sent right after each snapshot a viewer gets',
    }),
    change_pct: NumOrNull("time per sample against the reference, percent, at `at`; null where the run has no figures yet"),
    threshold_pct: Num('the threshold (--regression-threshold), percent'),
    started_at: Time('when the run passed the threshold and stayed past it'),
    ended_at: Nullable(Time('when it came back within the threshold'), { description: "when it came back within the threshold; null unless `status` is 'ended'" }),
    reference: Nullable(
      Type.Object({
        kind: Names(['baseline', 'history'] as const, { description: 'a pinned --baseline, or the median of recent comparable runs' }),
        label: Str('the reference in words, as /v1/runs names it'),
      }),
      { description: 'what the run is compared with; null where it no longer has one' },
    ),
    text: Str("the comparison's first line: how much slower, where the time went, what changed since"),
  },
  {
    description:
      "a job's run passing its regression threshold (held 30 s past warm-up) or coming back within it; sent only to viewers that ask for it with `?events=regression`",
  },
);

/** The frames every viewer gets. */
export const StreamFrameSchema = Type.Union([SnapshotFrameSchema, UpdateFrameSchema, VerdictFrameSchema]);
/** Frames a viewer gets only when it names them in `?events=` (a viewer of an older build would refuse an unknown type). */
export const STREAM_EVENTS = ['regression'] as const;
export type StreamEvent = (typeof STREAM_EVENTS)[number];

export type StreamHistory = Static<typeof StreamHistorySchema>;
export type SnapshotFrame = Static<typeof SnapshotFrameSchema>;
export type UpdateFrame = Static<typeof UpdateFrameSchema>;
export type VerdictFrame = Static<typeof VerdictFrameSchema>;
export type RegressionFrame = Static<typeof RegressionFrameSchema>;
export type StreamFrame = Static<typeof StreamFrameSchema>;

/** Close codes of the stream beyond the standard ones. */
export const StreamCloseCode = {
  goingAway: 1001,
  /** The viewer does not read fast enough: too much unsent, or nothing taken for too long. */
  tooSlow: 4008,
} as const;
