"""A real neighbour for the accuracy benchmark: --procs processes that keep a core each busy with
arithmetic until killed (SIGTERM or SIGKILL), as another tenant's job on a shared node would."""
import argparse
import ctypes
import multiprocessing
import os
import signal
import sys


PR_SET_PDEATHSIG = 1


def spin(parent):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Each in a session of its own, as another tenant's processes would be: where the kernel groups
    # by session (sched_autogroup), the processes of one session share one task's time, so a
    # two-process neighbour in one session would hold one core against the job's session, not two.
    os.setsid()
    # Out of its parent's process group now, so killing that group no longer reaches it: it dies
    # with its parent instead, however the parent dies.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        return
    x = 0
    while True:
        for i in range(10_000):
            x = (x + i * i) % 1_000_003


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--procs", type=int, default=2)
    args = p.parse_args()
    workers = [multiprocessing.Process(target=spin, args=(os.getpid(),), daemon=True) for _ in range(args.procs)]
    for w in workers:
        w.start()

    def stop(*_):
        for w in workers:
            w.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(" ".join(str(w.pid) for w in workers), flush=True)
    for w in workers:
        w.join()


if __name__ == "__main__":
    # A group of its own, to be killed as one; started detached it leads a session, and so its group, already.
    if os.getsid(0) != os.getpid():
        os.setpgrp()
    main()
