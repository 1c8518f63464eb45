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

export const RankStallSchema = Type.Object(
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
    where: Where("the innermost frames of the script's own code in its training thread, innermost first (at most 5); empty where no stack was taken since its last step"),
    capture: Nullable(CaptureSchema, { description: 'the stack its hook took since its last step ended (the sidecar asks when it stalls, and every 10 s while it stays so); null otherwise' }),
    proc: Nullable(Type.Composite([ProcReadingSchema, Type.Object({ at: Num('when it was read, ms since the epoch') })]), {
      description: 'its process as the sidecar read it in /proc while it was unresponsive or stalled; null where it was not read',
    }),
  },
  { description: 'whether the rank steps, and if it stopped, where it is' },
);

export const JobStopSchema = Type.Object(
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
  },
  { description: 'a job that stopped stepping' },
);

export type RankStallState = Static<typeof RankStallSchema>;
export type JobStopState = Static<typeof JobStopSchema>;
