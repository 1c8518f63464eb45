import type { CodeFrame } from '../protocol/capture.js';
import type { Cause, Verdict } from '../model/verdict.js';
import { rankList } from '../model/stall.js';
import type { Recommendation } from '../protocol/state.js';

/**
 * What to do about a job that stopped: the culprit's own advice first (its stack, its loader, its
 * node), then how to make the next hang fail fast instead of waiting out a collective timeout.
 */

export interface StopContext {
  /** The ranks concerned (the culprits of a job's stop). */
  ranks: number[];
  /** The innermost frame of the script's own code where the rank stopped. */
  where: CodeFrame | null;
  pid: number | null;
  host: string | null;
}

const r = (id: string, text: string): Recommendation => ({ id, text });

const FAIL_FAST = r(
  'collective-timeout',
  'Make a hang fail fast instead of waiting out the collective timeout (30 minutes by default on gloo, 10 on NCCL): pass timeout=timedelta(minutes=…) to init_process_group, and on NCCL keep TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (NCCL_ASYNC_ERROR_HANDLING on torch before 2.2) so the watchdog aborts the job; TORCH_NCCL_DUMP_ON_TIMEOUT=1 writes the Flight Recorder when it does.',
);
const PY_SPY = (c: StopContext) =>
  r('py-spy', `For every thread's stack, native frames included, run py-spy dump --pid ${c.pid ?? '<pid>'}${c.host ? ` on ${c.host}` : ''} (the capture above is the Python stack the hook read).`);

export function stopAdvice(verdict: Verdict, cause: Cause, c: StopContext): Recommendation[] {
  const who = c.ranks.length ? `rank${c.ranks.length === 1 ? '' : 's'} ${rankList(c.ranks)}` : 'the ranks';
  // Each line rests on the stop itself: which ranks, in what state, where.
  const fact = `${who} ${verdict}${cause ? ` (${cause})` : ''}${c.where ? ` at ${c.where.file}:${c.where.line}` : ''}`;
  return stopLines(verdict, cause, c, who).map((line) => ({ ...line, because: fact }));
}

function stopLines(verdict: Verdict, cause: Cause, c: StopContext, who: string): Recommendation[] {
  const at = c.where ? ` at ${c.where.file}:${c.where.line} (${c.where.function})` : '';
  switch (cause) {
    case 'code':
      return [
        r('unstick-code', `Look at what ${who} does${at}: a lock, queue, event or subprocess that never gets its counterpart, a read from a file or socket that never returns, a retry loop without a limit. Give such waits a timeout so they raise instead of hanging.`),
        PY_SPY(c),
        FAIL_FAST,
      ];
    case 'data-loader':
      return [
        r('loader-timeout', `${who[0]!.toUpperCase()}${who.slice(1)} waits for a batch that does not come: set DataLoader(timeout=…) so that a worker that never returns raises instead of hanging the job, and look at the workers listed (state D: disk or network filesystem I/O; S with no CPU: waiting on a lock, a queue or a remote service).`),
        r('worker-health', "Check the workers' health: a worker killed by the out-of-memory killer or by a signal (dmesg, the pod's events), shared memory exhausted (/dev/shm in containers: mount a larger emptyDir), a dataset that blocks on remote storage; persistent_workers=True avoids restarting them each epoch."),
        FAIL_FAST,
      ];
    case 'busy':
      return [
        r('outside-steps', `${who[0]!.toUpperCase()}${who.slice(1)} runs its own code outside any step${at}: evaluation, checkpointing, a long log or upload. If it is expected, nothing hangs; if it lasts, run it less often, asynchronously, or on every rank, so the others do not wait for it idle.`),
      ];
    case 'unresponsive':
      return [
        r('gil-held', `${who[0]!.toUpperCase()}${who.slice(1)} answers nothing: its training thread holds the GIL without letting go (a long C call that does not release it: a regular expression, a C extension), or the process is stopped (state T) or stuck in uninterruptible I/O (state D).`),
        r('py-spy-native', `Run py-spy dump --native --pid ${c.pid ?? '<pid>'}${c.host ? ` on ${c.host}` : ''} to see where it is, native frames included.`),
        FAIL_FAST,
      ];
    case 'collective':
      return verdict === 'hung'
        ? [
            r('find-missing-rank', 'Every rank here waits in the same collective: the rank that never joined reports to another sidecar (stepscope watch --selector shows the job across its pods), or the collective itself hangs: check the network between nodes (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME), and that every rank calls the same collectives in the same order.'),
            FAIL_FAST,
          ]
        : [r('wait-collective', `${who[0]!.toUpperCase()}${who.slice(1)} waits in a collective for ranks that do not come: see the job's verdict for the rank holding them.`)];
    case 'connection-closed':
    case 'no-answer':
    case 'not-reconnected':
    case 'rank-gone':
      return [
        r('rank-exit', `Find out how ${who} ended: its exit code and the node's kernel log (out-of-memory killer: dmesg, kubectl describe pod), the node's state (kubectl describe node, cordoned, lost), a crash in native code (a core dump).`),
        r('elastic-restart', 'Let the job survive a lost rank: torchrun restarts the workers (--max-restarts) from the last checkpoint; checkpoint often enough that a restart loses little.'),
        FAIL_FAST,
      ];
    default:
      return verdict === 'stalled' || verdict === 'hung' ? [PY_SPY(c), FAIL_FAST] : [];
  }
}
