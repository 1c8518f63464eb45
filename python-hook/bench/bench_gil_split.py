"""What the sender thread takes from the training thread through the GIL, told apart within one process.

Comparing a bare process with a hooked one cannot resolve a few µs on a shared machine: two
processes differ by more than that (bench_gil.py). Here one hooked process paces a GIL-holding
step (--step-us of Python, then a sleep that releases the GIL, as a wait on the GPU does) at --rate,
and the sender thread marks when it runs (from each return of its timed wait to its next wait).
A step is hit when its span, from the start of its sleep to its end, overlaps such a run; the GIL the
sender took shows as a late return from the sleep (the sender held the GIL then) or as a longer
step. The training thread's time per step, sleep overshoot included, of all steps against the
steps that no run touched, in the same process over the same seconds: their difference is what
the sender costs a step, load and the machine's noise falling on both alike. Prints one JSON line.

    python3 python-hook/bench/bench_gil_split.py --url ws://127.0.0.1:9477/v1/ingest [--rate 6000]

Run it with PYTHONPATH pointing at another checkout's python-hook to measure that one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stepscope  # noqa: E402
from stepscope import _sender  # noqa: E402

now = time.perf_counter_ns


def sender_runs(runs: list) -> None:
    """Record, in ``runs``, [start, end] of every stretch the sender thread runs between waits."""
    original = _sender.Sender.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        wait = self._wake.wait
        runs.append([now(), None])

        def timed_wait(timeout=None):
            runs[-1][1] = now()
            try:
                return wait(timeout)
            finally:
                runs.append([now(), None])

        self._wake.wait = timed_wait

    _sender.Sender.__init__ = init


def calibrate(step_us: float) -> int:
    n = 100_000
    best = min(_timed(n) for _ in range(5))
    return max(1, int(n * step_us * 1000 / best))


def _timed(n: int) -> int:
    t0 = now()
    for _ in range(n):
        pass
    return now() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, default=6000.0)
    parser.add_argument("--step-us", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    loops = calibrate(args.step_us)
    runs = []
    sender_runs(runs)
    scope = stepscope.init(url=args.url, job="bench-gil-split")
    time.sleep(0.7)  # connected, hello and env sent
    interval = int(1e9 / args.rate)
    steps = []  # (sleep start, step end, time the step took past its due start)
    start = next_at = now()
    slept_at = start
    for _ in scope.loader(itertools.count()):
        due = next_at
        t0 = now()
        with scope.phase("compute"):
            for _ in range(loops):
                pass
        scope.step(samples=1)
        t1 = now()
        steps.append((slept_at, t1, t1 - max(due, slept_at)))
        next_at += interval
        if t1 - start >= args.seconds * 1e9:
            break
        slept_at = now()
        ahead = next_at - slept_at
        if ahead > 0:
            time.sleep(ahead / 1e9)
    elapsed = now() - start
    active = [(a, b) for a, b in runs[:-1] if b is not None and b >= start]
    delivered = scope.close(timeout=10.0)
    hit = []
    clean = []
    i = 0
    for s0, s1, took in steps:
        while i < len(active) and active[i][1] < s0:
            i += 1
        (hit if i < len(active) and active[i][0] <= s1 else clean).append(took)
    all_steps = [took for _, _, took in steps]
    mean_all = statistics.fmean(all_steps)
    mean_clean = statistics.fmean(clean)
    print(json.dumps({
        "hook": os.path.dirname(stepscope.__file__),
        "rate": round(len(steps) / elapsed * 1e9),
        "steps": len(steps),
        "sender_runs_per_s": round(len(active) / elapsed * 1e9, 1),
        "hit_steps": len(hit),
        "us_per_step_clean": round(mean_clean / 1e3, 2),
        "us_per_step_hit": round(statistics.fmean(hit) / 1e3, 2) if hit else None,
        "cost_us_per_step": round((mean_all - mean_clean) / 1e3, 3),
        "delivered_all": bool(delivered),
        "load_average": round(os.getloadavg()[0], 1),
    }))


if __name__ == "__main__":
    main()
