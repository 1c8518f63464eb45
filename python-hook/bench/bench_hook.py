"""What the stepscope hook costs a training process.

1. Training-thread time per step: the loop of the README (one next() through
   scope.loader, two phases, step()) against the same loop without the hook, in the
   training thread's CPU time (time.thread_time_ns) and in wall time; median over runs.
   And that CPU as a ratio to the same loop's floor (its shape with the least Python can
   do), timed in the same runs: the figure bench:check budgets.
2. Sender-thread CPU at a paced 1,000 steps/s (--rate) for a few seconds, in % of one core.

Both with the hook pointed at nothing (a refused port) and, with --url, at a live sidecar.
Prints one JSON object. Runs in about 20 s (30 s with --url).

    python3 python-hook/bench/bench_hook.py [--url ws://127.0.0.1:9477/v1/ingest]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stepscope  # noqa: E402
from _stand_ins import Appender, Timed, readme_floor, readme_hooked  # noqa: E402

BUDGET_OVERHEAD_US = 5.0
BUDGET_BG_CPU_PCT = 1.0


def plain_loop(data):
    for batch in data:
        moved = batch
        result = moved
    return result


def measure_overhead(scope, steps: int, runs: int) -> dict:
    """The hooked loop's CPU and wall time per step above the plain loop's, medians over runs; and,
    as a ratio, above the same loop's floor (readme_floor: its shape with the least Python can do).
    The three loops run in turn in each run, so the ratio is of times the same load, clock speed
    and interpreter build moved alike: bench:check budgets it, not the microseconds."""
    data = list(range(steps))
    timed, appender = Timed(), Appender()
    loops = {
        "plain": plain_loop,
        "hooked": lambda data: readme_hooked(scope, data),
        "floor": lambda data: readme_floor(data, timed, appender),
    }
    # Each run takes the next of the six orders, so that no loop always follows the hooked one
    # (whose records the sender thread is still taking as the next loop starts).
    orders = list(itertools.permutations(loops))
    cpu, wall, ratio = [], [], []
    for run in range(runs):
        timings = {}
        for name in orders[run % len(orders)]:
            time.sleep(0.15)  # let the sender drain the hooked loop's records before timing
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            loops[name](data)
            timings[name] = (time.thread_time_ns() - c0, time.perf_counter_ns() - w0)
        cpu.append((timings["hooked"][0] - timings["plain"][0]) / steps / 1000)
        wall.append((timings["hooked"][1] - timings["plain"][1]) / steps / 1000)
        floor = timings["floor"][0] - timings["plain"][0]
        if floor > 0:  # a run whose floor the clock could not tell from the bare loop says nothing
            ratio.append((timings["hooked"][0] - timings["plain"][0]) / floor)
    return {
        "overhead_us_per_step_cpu": round(statistics.median(cpu), 3),
        "overhead_us_per_step_wall": round(statistics.median(wall), 3),
        # None (a missing figure, which bench:check fails) when no run could be judged.
        "overhead_ratio_to_floor": round(statistics.median(ratio), 3) if ratio else None,
        "plain_loop_us_per_step": round(timings["plain"][1] / steps / 1000, 3),
    }


def measure_sender_cpu(scope, seconds: float, rate: float) -> dict:
    time.sleep(0.3)
    cpu_start = scope.stats()["bg_cpu_s"]
    interval = 1.0 / rate
    start = time.perf_counter()
    deadline = start + seconds
    next_tick = start
    steps = 0
    for batch in scope.loader(itertools.count()):
        with scope.phase("h2d"):
            moved = batch
        with scope.phase("compute"):
            _ = moved
        scope.step(samples=8)
        steps += 1
        next_tick += interval
        if next_tick >= deadline:
            break
        delay = next_tick - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.perf_counter() - start
    cpu = scope.stats()["bg_cpu_s"] - cpu_start
    return {
        "steps_per_s": round(steps / elapsed, 1),
        "bg_cpu_pct": round(100.0 * cpu / elapsed, 3),
    }


def scenario(url: str, steps: int, runs: int, seconds: float, rate: float) -> dict:
    scope = stepscope.init(url=url, job="bench")
    result = measure_overhead(scope, steps, runs)
    # The overhead loops run at ~1M steps/s: a fresh scope keeps their backlog out of the
    # sender-CPU figure, which is about a steady 1,000 steps/s.
    result["overhead_records"] = scope.stats()["records"]
    result["overhead_delivered_all"] = scope.close(timeout=5.0)
    scope = stepscope.init(url=url, job="bench")
    result.update(measure_sender_cpu(scope, seconds, rate))
    result["connected"] = scope.stats()["connects"] > 0
    result["delivered_all"] = scope.close(timeout=5.0)
    stats = scope.stats()
    result["records"] = stats["records"]
    result["dropped"] = stats["dropped"]
    return result


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "ws://127.0.0.1:%d/v1/ingest" % s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a live sidecar to measure against as well")
    parser.add_argument("--steps", type=int, default=50_000, help="steps per timed loop")
    parser.add_argument("--runs", type=int, default=9, help="timed runs of the three loops (median)")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the paced run")
    parser.add_argument("--rate", type=float, default=1000.0, help="steps/s of the paced run (the sender thread's CPU)")
    args = parser.parse_args()

    report = {"python": platform.python_version(), "hook": stepscope.__version__}
    report["unreachable"] = scenario(refused_url(), args.steps, args.runs, args.seconds, args.rate)
    if args.url:
        report["live"] = scenario(args.url, args.steps, args.runs, args.seconds, args.rate)
    report["budget"] = {"overhead_us_per_step": BUDGET_OVERHEAD_US, "bg_cpu_pct": BUDGET_BG_CPU_PCT}
    for name in ("unreachable", "live"):
        if name in report:
            r = report[name]
            r["overhead_share_of_budget"] = round(r["overhead_us_per_step_cpu"] / BUDGET_OVERHEAD_US, 3)
            r["bg_cpu_share_of_budget"] = round(r["bg_cpu_pct"] / BUDGET_BG_CPU_PCT, 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
