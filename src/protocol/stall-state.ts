import { Type, type Static } from '@sinclair/typebox';
import { RANK_STOP_STATES } from '../model/stall.js';
import { GONE_CAUSES, HUNG_CAUSES, STALL_CAUSES, STOP_VERDICTS } from '../model/verdict.js';
import { CaptureSchema, CodeFrameSchema, ProcReadingSchema } from './capture.js';
import { Bool, Count, Names, Nullable, Num, NumOrNull, Str, StrOrNull, Time } from './schema.js';

/**
 * What the state says of a job that stops stepping (docs/verdicts.md, "A job that stops"): each
 * rank's `stall` and the job's `stop`, in GET /v1/state and every stream frame (src/protocol/state.ts).
 */

export const StopCauseSchema = Nullable(Names([...STALL_CAUSES, ...GONE_CAUSES, ...HUNG_CAUSES] as const), {
  description: 'where the rank is or how it went (see docs/verdicts.md); null where not known yet',
});

const Where = (description: string) => Type.Array(CodeFrameSchema, { description });

export const RankStallStateSchema = Type.Object(
  {
    state: Names(RANK_STOP_STATES, {
      description:
        'stepping: a step ended lately; waiting: none for a little while (not yet stalled); stalled: alive and heard from, none for stall_after_s; gone: its connection dropped without an end; ended: it said so, or none of its code runs',
    }),
    no_step_s: NumOrNull('seconds since its last step ended; null before the first'),
    stall_after_s: NumOrNull('no step for this long and it is stalled: --stall-steps of its median steps, at least --stall-floor; null before its first step'),
    heard_s_ago: NumOrNull('seconds since anything came from its hook (a frame, a heartbeat); null where nothing did'),
    unresponsive: Bool('its hook sends nothing (no heartbeat) while its connection stays open, or its process is still in /proc after the sidecar closed the silent connection: its training thread holds the GIL, or the process is stopped'),
    last_step: Type.Integer({ description: "its last step's number; -1 before the first" }),
    collectives: Nullable(
      Type.Object({
        count: Type.Integer({ minimum: -1, description: 'the sequence number of the last collective it enqueued (flight-recorder), or the collectives it entered in its current step (hook)' }),
        source: Names(['flight-recorder', 'hook'] as const, { description: "PyTorch's Flight Recorder (the default process group), or the hook's collective wrappers" }),
      }),
      { description: 'how far it got in its collectives, from its latest stack capture; null where not known' },
    ),
    in_collective: StrOrNull('the collective it waits in, in words; null where it is not seen inside one'),
    progressing: Bool('its code still moves, or its loader workers still run: slow, not stuck'),
    capture_pending: Bool('it stalled and its stack was asked for and has not come yet'),
    where: Where(
      "the innermost frames of the script's own code where it is stuck, innermost first (at most 5): a DataLoader worker's first where it waits for one that is stuck in the script's code (its Dataset), then its training thread's; empty where no stack was taken since its last step",
    ),
    capture: Nullable(CaptureSchema, { description: 'the stack its hook took since its last step ended (the sidecar asks when it stalls, and every 10 s while it stays so); null otherwise' }),
    proc: Nullable(Type.Composite([ProcReadingSchema, Type.Object({ at: Num('when it was read, ms since the epoch') })]), {
      description: 'its process as the sidecar read it in /proc while it was unresponsive or stalled; null where it was not read',
    }),
  },
  { description: 'whether the rank steps, and if it stopped, where it is' },
);

export const JobStopStateSchema = Type.Object(
  {
    verdict: Names(STOP_VERDICTS, { description: 'hung: no rank steps and one stalled or went; stalled: a rank stalled while others step; gone: a rank went' }),
    cause: StopCauseSchema,
    since: Time("when it stopped stepping: the end of the last step of the ranks that stopped"),
    seconds: Num('how long it has not stepped'),
    step: Type.Integer({ description: 'the last step before it' }),
    culprits: Type.Array(Count('rank'), { description: 'the ranks the others wait for; empty where every rank here waits in one collective' }),
    waiting: Type.Array(Count('rank'), { description: 'the ranks waiting for them' }),
    waits_in: StrOrNull('what the waiting ranks wait in, in words; null where they are not seen inside a collective'),
    text: Str('the stop in words, naming the ranks, where they are and what they wait on'),
    where: Where("the innermost frames of the script's own code where the first culprit stopped (at most 5)"),
    dumps: Type.Optional(Type.Array(Str('a file under --out'), { description: "with --stack-dumps, once the job was declared hung: every rank's stacks of that moment, one file a rank" })),
  },
  { description: 'a job that stopped stepping' },
);

export const STACK_DUMP_SCHEMA = 'stepscope.stack-dump/v1';

/** One rank's stacks when its job was declared hung (--stack-dumps), in a file of its own. */
export const StackDumpSchema = Type.Object(
  {
    schema: Type.Literal(STACK_DUMP_SCHEMA),
    job: Str('the job'),
    run: Type.Integer({ minimum: 1, description: 'the run of the job' }),
    rank: Count('the rank'),
    declared_at: Time('when the job was declared hung'),
    hung_since: Time('when it stopped stepping'),
    job_rule: Str("the job's verdict, in words, when it was declared hung"),
    state: Names(RANK_STOP_STATES, { description: "the rank's state then" }),
    rule: StrOrNull("the rank's verdict, in words"),
    capture: Nullable(CaptureSchema, { description: 'its stacks (every thread, whole, with --stack-dumps), its collectives, its loader workers, the Flight Recorder; null where none could be taken' }),
    proc: Nullable(Type.Composite([ProcReadingSchema, Type.Object({ at: Num('when it was read, ms since the epoch') })]), { description: 'its process as /proc showed it, where read' }),
    why_no_capture: StrOrNull('why there is no capture (unresponsive, gone, an older hook); null where there is one'),
  },
  { description: "one rank's stacks when its job was declared hung" },
);
export type StackDump = Static<typeof StackDumpSchema>;

export type RankStallState = Static<typeof RankStallStateSchema>;
export type JobStopState = Static<typeof JobStopStateSchema>;

const RecommendationLike = Type.Object({ id: Str('a stable name for the advice'), text: Str('what to do, in words') });

/** A stretch of a run in which it did not step, as its summary reports it. */
export const SummaryStopSchema = Type.Object(
  {
    verdict: Names(STOP_VERDICTS, { description: 'hung: no rank stepped; stalled: a rank stopped while others stepped; gone: a rank went' }),
    cause: StopCauseSchema,
    since_s: Num("when it began (the last step's end), s from the run's start"),
    seconds: Num('how long it lasted'),
    wall_share: NumOrNull("its share of the run's wall time, 0..1"),
    step: Type.Integer({ description: 'the last step before it' }),
    culprits: Type.Array(Count('rank'), { description: 'the ranks the others waited for' }),
    waiting: Type.Array(Count('rank'), { description: 'the ranks waiting for them' }),
    waits_in: StrOrNull('what they waited in, in words'),
    text: Str('who stopped where, and what the others waited on, in words (as last judged)'),
    where: Where("the innermost frames of the script's own code where the first culprit stopped"),
    gpu_seconds: Num('GPU time it held idle: its seconds times the ranks that did not step (one GPU a rank)'),
    recommendations: Type.Array(RecommendationLike, { description: 'what to do about it' }),
    dumps: Type.Optional(Type.Array(Str('a file under --out'), { description: "with --stack-dumps: every rank's stacks when the job was declared hung, one file a rank" })),
  },
  { description: 'a stop of the run' },
);
export type SummaryStop = Static<typeof SummaryStopSchema>;
