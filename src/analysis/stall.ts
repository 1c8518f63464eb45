import { frameText, type Capture, type CodeFrame } from '../protocol/capture.js';
import type { RankLiveness } from '../store/rank-history.js';
import { jobStop, rankList, type JobStop, type RankStop } from '../model/stall.js';
import type { Cause, Evidence, Verdict } from '../model/verdict.js';
import { stopAdvice } from './stall-advice.js';
import { fileSafeName } from '../model/names.js';
import type { Recommendation } from '../protocol/state.js';
import type { StallConfig } from './stall-config.js';

/**
 * When a rank stops stepping: stalled (alive and heard from), unresponsive (its connection open but
 * its hook silent), gone (its connection dropped without an end) or idle by design, and where it is,
 * from the stack its hook took when asked. Pure: the rank's liveness and the time in, its state and
 * verdict out. The job-level rule (hung, and on whom it waits) is in src/model/stall.ts; the
 * reasoning in docs/verdicts.md ("A job that stops").
 */

export { STALL_DEFAULTS, type StallConfig } from './stall-config.js';

export const STALL = {
  /** Heartbeats missed before a rank whose connection stays open is unresponsive. */
  beatsMissed: 5,
  /** A connection dropped without an end: gone once it has not come back for this long (the hook reconnects within a second). */
  goneMs: 5_000,
  /** After the sidecar restarted, hooks get this long to reconnect (their backoff reaches 5 s). */
  restartGraceMs: 30_000,
  /** A stack that changed within this long is moving: the rank runs code, it is not stuck. */
  movingMs: 2_000,
  /** A rank without a step for this many of its median steps (and at least waitFloorMs) no longer steps. */
  waitSteps: 2,
  waitFloorMs: 1_000,
  /** How long the job's verdict waits for a stalled rank's stack before it is decided without it. */
  captureWaitMs: 5_000,
} as const;

export interface StallInput {
  rank: number;
  liveness: RankLiveness;
  /** The end of its last step, ms (sidecar clock); null before the first. */
  lastStepEndAt: number | null;
  /** Its recent steps' median, ms; null before the first. */
  stepP50Ms: number | null;
  /** Ranks in the job (more than this sidecar may see). */
  worldSize: number;
}

export interface RankStall {
  stop: RankStop;
  /** stalled, gone or idle, with the evidence; null while the rank steps or only waits (the usual rules judge it). */
  judgement: { verdict: Verdict; cause: Cause; evidence: Evidence; recommendations: Recommendation[]; since: number } | null;
  /** No step for this long without being stalled: ms; null before a step. */
  quietMs: number | null;
  thresholdMs: number | null;
  /** ms since anything came from it; null where nothing did. */
  heardAgoMs: number | null;
  /** Heartbeats stopped while its connection stays open. */
  unresponsive: boolean;
  /** The capture taken since it stopped stepping, if any. */
  capture: Capture | null;
  /** The innermost frames of the script's own code in its training thread (at most 5), innermost first. */
  where: CodeFrame[];
  pid: number;
  host: string;
  /** Where it is, in words ("stopped in wait (x.py:3), unmoved for 20.1 s"); null while it steps. */
  whereText: string | null;
}

/** When a rank with this median step is stalled: k median steps, never under the floor. */
export function stallThresholdMs(stepP50Ms: number | null, config: StallConfig): number {
  return Math.max(config.floorMs, config.steps * (stepP50Ms ?? 0));
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** The training thread's stack in a capture, innermost first; null where the hook did not find it. */
function trainingStack(capture: Capture | null): CodeFrame[] | null {
  return capture?.threads.find((thread) => thread.training)?.frames ?? null;
}

const inFile = (frames: CodeFrame[], part: string) => frames.some((frame) => frame.kind === 'lib' && frame.file.replaceAll('\\', '/').includes(part));

/** The collective a capture shows the rank inside of, in words; null where it is not in one. */
function collectiveOf(capture: Capture, worldSize: number): string | null {
  const waiting = capture.comm?.waiting;
  if (waiting) return `${waiting.op} (collective ${waiting.index} of its step, entered ${seconds(waiting.for_ms)} before)`;
  for (const group of capture.flight?.groups ?? []) {
    const pending = group.pending[0];
    if (pending) return `${pending.op} (collective #${pending.seq} of ${group.name || `process group ${group.id}`})`;
    if (group.enqueued > group.completed) return `collective #${group.completed + 1} of ${group.name || `process group ${group.id}`}`;
  }
  const frames = trainingStack(capture) ?? [];
  const dist = frames.find((frame) => frame.kind === 'lib' && frame.file.replaceAll('\\', '/').includes('/torch/distributed/'));
  if (dist) return `${dist.function} (torch.distributed)`;
  if (worldSize > 1 && inFile(frames, '/torch/autograd/')) return "backward() (DDP's gradient all-reduce, most likely)";
  return null;
}

function collectives(capture: Capture | null): RankStop['collectives'] {
  const group = capture?.flight?.groups.find((g) => g.id === '0') ?? capture?.flight?.groups[0];
  if (group) return { count: group.enqueued, source: 'flight-recorder' };
  if (capture?.comm) return { count: capture.comm.entered, source: 'hook' };
  return null;
}

function unresponsiveNow(live: RankLiveness, at: number): boolean {
  if (live.heartbeatMs === null || live.heardAt === null) return false;
  return at - live.heardAt >= STALL.beatsMissed * live.heartbeatMs;
}

/** A rank the sidecar closed as silent whose process /proc still shows (after that): alive, not gone. */
function aliveInProc(live: RankLiveness): boolean {
  const proc = live.proc;
  return live.disconnectReason === 'silent' && proc !== null && proc.visible && proc.state !== 'Z' && proc.at >= (live.disconnectedAt ?? Infinity);
}

export function rankStall(input: StallInput, at: number, config: StallConfig): RankStall {
  const live = input.liveness;
  const quietMs = input.lastStepEndAt === null ? null : Math.max(0, at - input.lastStepEndAt);
  const thresholdMs = input.stepP50Ms === null ? null : stallThresholdMs(input.stepP50Ms, config);
  const heardAgoMs = live.heardAt === null ? null : Math.max(0, at - live.heardAt);
  const fresh = live.capture !== null && input.lastStepEndAt !== null && live.capture.at >= input.lastStepEndAt ? live.capture : null;
  let where = (trainingStack(fresh) ?? []).filter((frame) => frame.kind === 'user').slice(0, 5);
  const stop: RankStop = {
    rank: input.rank,
    state: 'stepping',
    cause: null,
    since: input.lastStepEndAt,
    wentAt: null,
    lastStep: live.lastStep,
    collectives: collectives(fresh),
    inCollective: null,
    progressing: false,
    capturePending: false,
  };
  const result: RankStall = { stop, judgement: null, quietMs, thresholdMs, heardAgoMs, unresponsive: false, capture: fresh, where, pid: live.pid, host: live.host, whereText: null };
  const silentButAlive = aliveInProc(live);

  if (live.ended) return { ...result, stop: { ...stop, state: 'ended' } };
  if (!live.connected && !silentButAlive) {
    const grace = live.disconnectReason === 'restart' ? STALL.restartGraceMs : STALL.goneMs;
    if (live.disconnectedAt === null || at - live.disconnectedAt < grace) return { ...result, stop: { ...stop, state: 'waiting' } };
    const cause = live.disconnectReason === 'silent' ? 'no-answer' : live.disconnectReason === 'restart' ? 'not-reconnected' : 'connection-closed';
    stop.state = 'gone';
    stop.cause = cause;
    stop.wentAt = live.disconnectedAt;
    const judgement = goneJudgement(input, live, cause, at);
    return { ...result, judgement, whereText: goneHow(cause) };
  }
  if (quietMs === null || thresholdMs === null) return { ...result, stop: { ...stop, state: 'waiting' } };
  if (quietMs < thresholdMs) {
    const waitMs = Math.max(STALL.waitFloorMs, STALL.waitSteps * (input.stepP50Ms ?? 0));
    return { ...result, stop: { ...stop, state: quietMs >= waitMs ? 'waiting' : 'stepping' } };
  }

  // Stalled: alive (connected or seen in /proc), no step for its threshold.
  stop.state = 'stalled';
  result.unresponsive = silentButAlive || unresponsiveNow(live, at);
  const stack = trainingStack(fresh);
  let cause: Cause = null;
  let whereText: string;
  if (result.unresponsive) {
    cause = 'unresponsive';
    whereText = unresponsiveText(live, heardAgoMs);
  } else if (fresh === null) {
    stop.capturePending = live.captures && quietMs - thresholdMs < STALL.captureWaitMs;
    whereText = live.captures ? (stop.capturePending ? 'stopped, its stack on its way' : 'stopped, its stack not sent') : 'stopped where it cannot say: its hook does not capture stacks (an older hook)';
  } else if (stack === null) {
    whereText = `stopped, its training thread not found${fresh.error ? ` (${fresh.error})` : ''}`;
  } else if (!stack.some((frame) => frame.kind === 'user')) {
    // None of the script's code runs: it is not stepping by design (between runs, shutting down).
    stop.state = 'ended';
    const top = stack[0];
    const rule = `no step for ${seconds(quietMs)}, and none of the script's code is running${top ? ` (the training thread is in ${frameText(top)})` : ''}: not stepping by design`;
    return { ...result, stop, judgement: { verdict: 'idle', cause: null, evidence: { rule, lost: {}, figures: figures(input, result, fresh) }, recommendations: [], since: input.lastStepEndAt! } };
  } else {
    stop.inCollective = collectiveOf(fresh, input.worldSize);
    const moving = fresh.still_ms !== null && fresh.still_ms < STALL.movingMs;
    const loaderWorks = (fresh.workers ?? []).some((worker) => worker.state === 'R');
    if (stop.inCollective !== null) {
      cause = 'collective';
      whereText = `waits in ${stop.inCollective}`;
    } else if (inFile(stack, '/torch/utils/data/')) {
      cause = 'data-loader';
      stop.progressing = loaderWorks;
      // A worker stuck in the script's own code (its Dataset) is where the batch does not come from.
      const stuck = (fresh.workers ?? []).find((worker) => worker.frames?.some((frame) => frame.kind === 'user'));
      const inWorker = stuck?.frames?.filter((frame) => frame.kind === 'user') ?? [];
      const loop = where[0];
      where = [...inWorker, ...where].slice(0, 5);
      result.where = where;
      const worker = stuck ? `; its worker pid ${stuck.pid} (${stuck.state}${stuck.wchan ? `, ${stuck.wchan}` : ''}) is in ${frameText(inWorker[0]!)}` : '';
      whereText = `waits for its DataLoader${loop ? ` in ${frameText(loop)}` : ''}${worker}${workersText(fresh, stuck?.pid)}`;
    } else if (moving) {
      cause = 'busy';
      stop.progressing = true;
      whereText = `its code runs outside any step${where[0] ? `: ${frameText(where[0])}` : ''} (its stack moved within the last ${seconds(STALL.movingMs)})`;
    } else {
      cause = 'code';
      const still = fresh.still_ms === null ? '' : `, unmoved for ${seconds(fresh.still_ms)}`;
      whereText = `stopped in ${where[0] ? frameText(where[0]) : 'its code'}${stack[0] && stack[0] !== where[0] ? ` at ${frameText(stack[0])}` : ''}${still}`;
    }
  }
  stop.cause = cause;
  result.whereText = whereText;
  const rule = `no step for ${seconds(quietMs)} (stalled after ${seconds(thresholdMs)}: ${config.steps} of its ${Math.round(input.stepP50Ms ?? 0)} ms median steps, at least ${seconds(config.floorMs)}), after step ${live.lastStep}; ${result.unresponsive ? '' : `alive: heard from ${seconds(heardAgoMs ?? 0)} ago; `}${whereText}`;
  const evidence: Evidence = { rule, lost: {}, figures: figures(input, result, fresh) };
  return { ...result, stop, judgement: { verdict: 'stalled', cause, evidence, recommendations: stopAdvice('stalled', cause, { ranks: [input.rank], where: where[0] ?? null, pid: live.pid, host: live.host }), since: input.lastStepEndAt! } };
}

function workersText(capture: Capture, named?: number): string {
  const workers = (capture.workers ?? []).filter((w) => w.pid !== named);
  if ((capture.workers ?? []).length === 0) return capture.workers === null ? '' : '; no worker processes (num_workers=0: the loading itself is stuck)';
  if (workers.length === 0) return '';
  const shown = workers.slice(0, 4).map((w) => `pid ${w.pid} ${w.state}${w.wchan ? ` (${w.wchan})` : ''} ${w.cpu_s.toFixed(1)} CPU-s`);
  return `; ${named === undefined ? 'its' : 'its other'} workers: ${shown.join(', ')}${workers.length > 4 ? `, and ${workers.length - 4} more` : ''}`;
}

function unresponsiveText(live: RankLiveness, heardAgoMs: number | null): string {
  const silence = `nothing from its hook for ${seconds(heardAgoMs ?? 0)} (heartbeats every ${seconds(live.heartbeatMs ?? 1000)})${live.connected ? ' while its connection stays open' : ', the sidecar closed its silent connection, and its process is still there'}`;
  const proc = live.proc;
  if (proc === null) return `${silence}: its training thread never lets the hook's thread run (a long call that holds the GIL) or the process is stopped`;
  if (!proc.visible) return `${silence}: its training thread never lets the hook's thread run (a long call that holds the GIL) or the process is stopped; /proc/${live.pid} cannot say: ${proc.why ?? 'not visible'}`;
  const state = { R: 'running (busy in a call that holds the GIL)', S: 'sleeping', D: 'in uninterruptible I/O (disk or network filesystem)', T: 'stopped (SIGSTOP, a debugger)', t: 'stopped by a tracer', Z: 'a zombie' }[proc.state ?? ''] ?? `state ${proc.state}`;
  return `${silence}; /proc/${live.pid}: ${state}${proc.wchan ? `, waiting in ${proc.wchan}` : ''}${proc.cpu_s === null ? '' : `, ${proc.cpu_s.toFixed(1)} CPU-s in all`}`;
}

function goneHow(cause: Cause): string {
  return cause === 'no-answer'
    ? 'the sidecar closed its connection after hearing nothing from it (no frame, no answer to pings): its node or network was lost, or the process is frozen where /proc cannot show it'
    : cause === 'not-reconnected'
      ? 'it has not reconnected since the sidecar restarted'
      : 'its connection dropped without an end: the process was killed (SIGKILL, the out-of-memory killer), crashed hard, or its node was lost';
}

function goneJudgement(input: StallInput, live: RankLiveness, cause: Cause, at: number): NonNullable<RankStall['judgement']> {
  const ago = seconds(at - live.disconnectedAt!);
  const rule = `gone ${ago} ago, after step ${live.lastStep}: ${goneHow(cause)}`;
  const evidence: Evidence = {
    rule,
    lost: {},
    figures: { last_step: live.lastStep, gone_s: Math.round((at - live.disconnectedAt!) / 100) / 10, pid: live.pid, host: live.host },
  };
  return { verdict: 'gone', cause, evidence, recommendations: stopAdvice('gone', cause, { ranks: [input.rank], where: null, pid: live.pid, host: live.host }), since: live.disconnectedAt! };
}

function figures(input: StallInput, result: RankStall, capture: Capture | null): Evidence['figures'] {
  const group = capture?.flight?.groups.find((g) => g.id === '0') ?? capture?.flight?.groups[0] ?? null;
  return {
    last_step: input.liveness.lastStep,
    no_step_s: result.quietMs === null ? null : Math.round(result.quietMs / 100) / 10,
    stall_after_s: result.thresholdMs === null ? null : Math.round(result.thresholdMs / 100) / 10,
    step_ms_p50: input.stepP50Ms === null ? null : Math.round(input.stepP50Ms * 10) / 10,
    heard_s_ago: result.heardAgoMs === null ? null : Math.round(result.heardAgoMs / 100) / 10,
    stack_still_s: capture?.still_ms == null ? null : Math.round(capture.still_ms / 100) / 10,
    collectives_entered: capture?.comm?.entered ?? null,
    collectives_completed: capture?.comm?.completed ?? null,
    fr_enqueued: group?.enqueued ?? null,
    fr_completed: group?.completed ?? null,
    where: result.where[0] ? frameText(result.where[0]) : null,
    pid: input.liveness.pid,
  };
}

/** What the job's stop says, given each rank's stall: its verdict and the evidence, naming who holds the others. */
export function jobStopJudgement(stop: JobStop, stalls: ReadonlyMap<number, RankStall>, worldSize: number, at: number): { verdict: Verdict; cause: Cause; evidence: Evidence; recommendations: Recommendation[]; since: number } {
  const text = jobStopText(stop, stalls, worldSize, at);
  const lead = stalls.get(stop.culprits[0] ?? -1);
  const lastSteps = [...stalls.values()].map((s) => s.stop.lastStep);
  const figures: Evidence['figures'] = {
    stopped_s: Math.round((at - stop.since) / 100) / 10,
    at_step: lastSteps.length ? Math.max(...lastSteps) : null,
    culprits: stop.culprits.length ? rankList(stop.culprits) : null,
    waiting: stop.waiting.length ? rankList(stop.waiting) : null,
    where: lead?.where[0] ? frameText(lead.where[0]) : null,
  };
  const recommendations = stopAdvice(stop.verdict, stop.cause, { ranks: stop.culprits, where: lead?.where[0] ?? null, pid: lead?.pid ?? null, host: lead?.host ?? null });
  return { verdict: stop.verdict, cause: stop.cause, evidence: { rule: text, lost: {}, figures }, recommendations, since: stop.since };
}

/**
 * The stop in words: "hung for 42.0 s after step 149: rank 1 stopped in stuck (train.py:42) (…);
 * rank 1 never entered all_reduce (collective #301 of default_pg), which rank 0 waits in".
 */
export function jobStopText(stop: JobStop, stalls: ReadonlyMap<number, RankStall>, worldSize: number, at: number): string {
  const { head, detail } = jobStopParts(stop, stalls, worldSize, at);
  return detail ? `${head}: ${detail}` : head;
}

/** The stop's head ("hung for 42.0 s after step 149") and what follows it (who, where, waiting on what). */
export function jobStopParts(stop: JobStop, stalls: ReadonlyMap<number, RankStall>, worldSize: number, at: number): { head: string; detail: string } {
  const ranks = (list: number[]) => `rank${list.length === 1 ? '' : 's'} ${rankList(list)}`;
  const lead = stalls.get(stop.culprits[0] ?? -1);
  const step = lead?.stop.lastStep ?? Math.max(...[...stalls.values()].map((s) => s.stop.lastStep));
  const detail = (stall: RankStall | undefined) => stall?.whereText ?? '';
  const parts: string[] = [];
  const stepping = [...stalls.values()].filter((s) => s.stop.state === 'stepping').map((s) => s.stop.rank);
  let head: string;
  if (stop.verdict === 'hung') head = `hung for ${seconds(at - stop.since)} after step ${step}`;
  else if (stop.verdict === 'gone') head = `${ranks(stop.culprits)} gone after step ${step}`;
  else head = `${ranks(stop.culprits)} stalled for ${seconds(at - stop.since)} after step ${step}${stepping.length ? ` while ${ranks(stepping)} ${stepping.length === 1 ? 'steps' : 'step'} on` : ''}`;
  if (stop.verdict === 'gone') return { head, detail: detail(lead) };
  if (stop.culprits.length && stop.verdict === 'hung') {
    const is = stop.cause === 'rank-gone' ? ` ${stop.culprits.length === 1 ? 'is' : 'are'} gone:` : stop.cause === 'unresponsive' ? ` ${stop.culprits.length === 1 ? 'is' : 'are'} unresponsive:` : '';
    const never = lead?.stop.lastStep === -1 ? `never ended a step (connected, heard from ${seconds(lead.heardAgoMs ?? 0)} ago)` : 'stopped';
    parts.push(`${ranks(stop.culprits)}${is} ${detail(lead) || never}`);
  } else if (detail(lead)) {
    parts.push(detail(lead));
  }
  if (stop.waiting.length) {
    const wait = stop.waiting.length === 1 ? 'waits' : 'wait';
    const never = stop.culprits.length && stop.cause !== 'rank-gone' && stop.cause !== 'collective' && stop.waitsIn;
    parts.push(never ? `${ranks(stop.culprits)} never entered ${stop.waitsIn}, which ${ranks(stop.waiting)} ${wait} in` : `${ranks(stop.waiting)} ${wait}${stop.waitsIn ? ` in ${stop.waitsIn}` : ' for it'}`);
  }
  if (stop.cause === 'collective') {
    const seen = stalls.size;
    parts.push(
      seen < worldSize
        ? `every rank here waits in the same collective: the rank it waits for is among the ${worldSize - seen} that report to other sidecars (their state names it), or the collective itself hangs (network, NCCL)`
        : 'every rank waits in the same collective: the collective itself hangs (network, NCCL, a mismatched call)',
    );
  }
  return { head, detail: parts.join('; ') };
}

/** The folder of a hang's stack dumps under --out (--stack-dumps): `stacks-<job>[.<run>]-<n>`, n counting the run's hangs. */
export function stackDumpDir(job: string, run: number, n: number): string {
  return `stacks-${fileSafeName(job)}${run > 1 ? `.${run}` : ''}-${n}`;
}

export { jobStop };
