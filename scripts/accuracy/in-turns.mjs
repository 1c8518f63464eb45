// Two runs of one machine in turns: the accuracy grid's truth (scripts/accuracy.mjs) and the live
// accuracy tests' (test/accuracy-e2e.test.ts) take it the same way.

/** A signal to the child's process group where it leads one (spawned detached), else to it; none once it has exited (its pid may be another's). */
export function signalRun(child, signal) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    try {
      process.kill(child.pid, signal);
    } catch {
      // gone
    }
  }
}

/**
 * The program and its ablation in turns, one running while the other is stopped, swapping every
 * `turnMs`: both meet the same machine turn by turn — whatever else runs on it, or a drift of its
 * speed, weighs on both alike — and neither takes CPU from the other. Run one after the other, the
 * drift between the two runs entered the truth (a 10 ms loop built to lose 11% measured 4.5%, its
 * ablation's steps 10% slower than the hour's usual). `children`: the two runs, just started;
 * `settled`: what resolves once both have exited, which this resolves with; where it rejects, both
 * runs are killed.
 */
export async function inTurns(children, settled, turnMs = 100) {
  let turn = 0;
  signalRun(children[1], 'SIGSTOP');
  const running = (child) => child.exitCode === null && child.signalCode === null;
  const timer = setInterval(() => {
    const live = children.filter(running);
    if (live.length < 2) return live.forEach((child) => signalRun(child, 'SIGCONT'));
    signalRun(children[turn], 'SIGSTOP');
    turn = 1 - turn;
    signalRun(children[turn], 'SIGCONT');
  }, turnMs);
  try {
    return await settled;
  } catch (error) {
    // One failed: the pair's truth is void, and the other must not run on beside what comes next.
    for (const child of children) signalRun(child, 'SIGKILL');
    throw error;
  } finally {
    clearInterval(timer);
    for (const child of children) signalRun(child, 'SIGCONT');
  }
}
