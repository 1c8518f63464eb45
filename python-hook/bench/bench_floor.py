"""What the explicit API's cost per step is made of, piece by piece, against what Python itself costs.

Each line is the training-thread CPU per step (time.thread_time_ns) of a loop over a list, minus the
same loop bare, median of --repeats: first the hook's pieces one at a time (scope.loader alone, one
phase, step()), then the whole README loop, then the floors -- the same shapes written with the
least Python can do (a generator that yields, a `with` on a class whose __enter__ and __exit__ do
nothing, a method call that appends a tuple, a clock read). Prints one JSON object.

    python3 python-hook/bench/bench_floor.py [--steps 200000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stepscope  # noqa: E402
from _stand_ins import Appender, Empty, Timed, generator, readme_floor, readme_hooked  # noqa: E402


def loops(scope):
    empty, timed, appender = Empty(), Timed(), Appender()
    phase = scope.phase("compute")
    clock = time.perf_counter_ns

    def bare(data):
        for _ in data:
            pass

    def hook_loader(data):
        for _ in scope.loader(data):
            pass

    def hook_phase(data):
        for _ in data:
            with scope.phase("compute"):
                pass

    def hook_phase_cached(data):
        for _ in data:
            with phase:
                pass

    def hook_step(data):
        for _ in data:
            scope.step(samples=8)

    def hook_readme(data):
        readme_hooked(scope, data)

    def floor_generator(data):
        for _ in generator(data):
            pass

    def floor_with_empty(data):
        for _ in data:
            with empty:
                pass

    def floor_with_timed(data):
        for _ in data:
            with timed:
                pass

    def floor_step_append(data):
        for _ in data:
            appender.step(samples=8)

    def floor_clock(data):
        for _ in data:
            clock()

    def floor_readme(data):
        readme_floor(data, timed, appender)

    return {
        "bare": bare,
        "hook: scope.loader": hook_loader,
        "hook: one phase (scope.phase lookup + with)": hook_phase,
        "hook: one phase, object kept": hook_phase_cached,
        "hook: step()": hook_step,
        "hook: README loop (loader, two phases, step)": hook_readme,
        "floor: a generator": floor_generator,
        "floor: with on an empty context manager": floor_with_empty,
        "floor: with reading the clock twice": floor_with_timed,
        "floor: a method call appending a tuple (and a clock read)": floor_step_append,
        "floor: one clock read": floor_clock,
        "floor: README loop shape (generator, two timed withs, append)": floor_readme,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = "ws://127.0.0.1:%d/v1/ingest" % s.getsockname()[1]  # refused: nothing is sent
    scope = stepscope.init(url=url, job="bench-floor", buffer_size=1 << 20, max_unacked=1 << 22)
    data = list(range(args.steps))
    variants = loops(scope)
    samples = {name: [] for name in variants}
    for r in range(args.repeats):
        names = list(variants)
        names = names[r % len(names):] + names[: r % len(names)]
        times = {}
        for name in names:
            t0 = time.thread_time_ns()
            variants[name](data)
            times[name] = time.thread_time_ns() - t0
        for name in variants:
            samples[name].append((times[name] - times["bare"]) / args.steps)
    report = {"python": sys.version.split()[0], "steps": args.steps, "repeats": args.repeats, "load_average": round(os.getloadavg()[0], 1)}
    report["ns_per_step_above_bare"] = {name: round(statistics.median(v)) for name, v in samples.items() if name != "bare"}
    scope.close(timeout=0.1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
