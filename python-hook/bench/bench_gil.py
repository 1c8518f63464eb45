"""What the hook's sender thread takes from the training thread through the GIL at a high step rate.

A step that holds the GIL the whole time (a fixed Python loop of about --step-us, as a
Python-heavy step does), paced at up to --rate steps/s by sleeping (the GIL released, as while
waiting on the GPU), run in a fresh process per round, alternately bare and with
the explicit API against a live sidecar (the sender thread encoding and sending every record).
Per round: the training thread's wall time per step. Prints one JSON object: per variant the
median over rounds, and the median of each round's difference to the bare round beside it.

    python3 python-hook/bench/bench_gil.py --url ws://127.0.0.1:9477/v1/ingest [--hook-path DIR]

--hook-path DIR (repeatable, as NAME=DIR) adds a variant using the stepscope package found in DIR
(another checkout), so that a change is measured against the code before it in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import sys, time, json
steps, loops, rate, url = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
scope = None
if url != "bare":
    import stepscope
    scope = stepscope.init(url=url, job="bench-gil")
    time.sleep(0.5)  # connected before timing
now = time.perf_counter_ns
interval = int(1e9 / rate)

def work():  # a fixed amount of Python: the GIL another thread takes shows as a longer step
    for _ in range(loops):
        pass

start = now()
next_at = start
busy = 0
if scope is None:
    for _ in range(steps):
        t0 = now()
        work()
        busy += now() - t0
        next_at += interval
        ahead = next_at - now()
        if ahead > 0:
            time.sleep(ahead / 1e9)  # as a step waiting on the GPU does: the GIL released
else:
    for batch in scope.loader(range(steps)):
        t0 = now()
        with scope.phase("compute"):
            work()
        scope.step(samples=1)
        busy += now() - t0
        next_at += interval
        ahead = next_at - now()
        if ahead > 0:
            time.sleep(ahead / 1e9)  # as a step waiting on the GPU does: the GIL released
elapsed = now() - start
out = {"us_per_step": busy / steps / 1000, "steps_per_s": steps / elapsed * 1e9}
if scope is not None:
    out["delivered_all"] = bool(scope.close(timeout=10.0))
print(json.dumps(out))
"""


def calibrate(step_us: float) -> int:
    """Iterations of ``for _ in range(n): pass`` that take ``step_us`` here, unloaded as can be."""
    n = 100_000
    best = min(_timed(n) for _ in range(5))
    return max(1, int(n * step_us * 1000 / best))


def _timed(n: int) -> int:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pass
    return time.perf_counter_ns() - t0


def run(python: str, hook_path, steps: int, loops: int, rate: float, url: str) -> dict:
    env = dict(os.environ)
    if hook_path:
        env["PYTHONPATH"] = hook_path
    out = subprocess.run([python, "-c", CHILD, str(steps), str(loops), str(rate), url], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a live sidecar")
    parser.add_argument("--rate", type=float, default=6000.0, help="steps per second")
    parser.add_argument("--step-us", type=float, default=150.0, help="GIL-holding work per step")
    parser.add_argument("--steps", type=int, default=30000, help="steps per round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--hook-path", action="append", default=[], help="NAME=DIR: another stepscope to compare")
    args = parser.parse_args()
    variants = [("bare", None, "bare"), ("hook", os.path.dirname(HERE), args.url)]
    for spec in args.hook_path:
        name, _, path = spec.partition("=")
        variants.append((name, path, args.url))
    loops = calibrate(args.step_us)
    per = {name: [] for name, _, _ in variants}
    cost = {name: [] for name, _, _ in variants if name != "bare"}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        got = {name: run(sys.executable, path, args.steps, loops, args.rate, url) for name, path, url in order}
        for name in per:
            per[name].append(got[name]["us_per_step"])
        for name in cost:
            cost[name].append(got[name]["us_per_step"] - got["bare"]["us_per_step"])
            if not got[name].get("delivered_all"):
                print("round %d: %s did not deliver everything" % (r, name), file=sys.stderr)
        time.sleep(0.2)
    report = {
        "python": sys.version.split()[0],
        "rate": args.rate,
        "step_us": args.step_us,
        "steps": args.steps,
        "rounds": args.rounds,
        "load_average": os.getloadavg()[0],
    }
    for name in per:
        entry = {"wall_us_per_step": round(statistics.median(per[name]), 2)}
        if name in cost:
            entry["cost_us_per_step"] = round(statistics.median(cost[name]), 2)
            q = statistics.quantiles(cost[name], n=4) if len(cost[name]) > 1 else [cost[name][0]] * 3
            entry["cost_iqr"] = [round(q[0], 2), round(q[2], 2)]
            entry["ratio_to_bare"] = round(statistics.median(per[name]) / statistics.median(per["bare"]), 4)
        report[name] = entry
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
