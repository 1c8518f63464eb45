"""Where the sender thread's CPU goes, per wake, at a paced step rate against a live sidecar.

The whole thread's user and system CPU (getrusage(RUSAGE_THREAD) around each wake), then, in a
second run, each part of a wake timed on its own with time.thread_time_ns (which adds its own
system calls: the parts read a little high). Prints one JSON object.

    python3 python-hook/bench/bench_sender.py --url ws://127.0.0.1:9477/v1/ingest [--rate 1000] [--seconds 6]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stepscope  # noqa: E402
from stepscope import _sender  # noqa: E402


def paced(url: str, rate: float, seconds: float, reset, stop=lambda: None) -> float:
    scope = stepscope.init(url=url, job="bench-sender")
    time.sleep(0.5)  # connected, hello and env sent
    reset()
    interval = 1.0 / rate
    start = next_at = time.perf_counter()
    for _ in scope.loader(itertools.count()):
        with scope.phase("h2d"):
            pass
        with scope.phase("compute"):
            pass
        scope.step(samples=8)
        next_at += interval
        if next_at >= start + seconds:
            break
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.perf_counter() - start
    stop()  # what close() does (the last frames, `end`, its ack) is not the steady state's
    scope.close(timeout=5.0)
    return elapsed


def whole_thread(url: str, rate: float, seconds: float) -> dict:
    total = [0.0, 0.0, 0]
    original = _sender.Sender._cycle

    def cycle(self):
        a = resource.getrusage(resource.RUSAGE_THREAD)
        try:
            return original(self)
        finally:
            b = resource.getrusage(resource.RUSAGE_THREAD)
            total[0] += b.ru_utime - a.ru_utime
            total[1] += b.ru_stime - a.ru_stime
            total[2] += 1

    _sender.Sender._cycle = cycle
    try:
        steady = []
        elapsed = paced(url, rate, seconds, lambda: total.__setitem__(slice(None), [0.0, 0.0, 0]), lambda: steady.extend(total))
    finally:
        _sender.Sender._cycle = original
    total = steady
    wakes = max(1, total[2])
    return {
        "user_pct": round(100 * total[0] / elapsed, 3),
        "system_pct": round(100 * total[1] / elapsed, 3),
        "wakes_per_s": round(total[2] / elapsed, 1),
        "us_per_wake": round((total[0] + total[1]) / wakes * 1e6),
    }


def by_part(url: str, rate: float, seconds: float) -> dict:
    spent = collections.Counter()
    calls = collections.Counter()

    def timed(function, label):
        def wrapper(*args, **kwargs):
            t0 = time.thread_time_ns()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.thread_time_ns() - t0
                calls[label] += 1

        return wrapper

    originals = {name: getattr(_sender.Sender, name) for name in ("_collect", "_exchange", "_send_rows", "__init__")}
    for name in ("_collect", "_exchange", "_send_rows"):
        setattr(_sender.Sender, name, timed(originals[name], name))

    def init(self, *args, **kwargs):
        originals["__init__"](self, *args, **kwargs)
        self._wake.wait = timed(self._wake.wait, "wait")
        self._counters.sample_due = timed(self._counters.sample_due, "counters")
        self._still.sample = timed(self._still.sample, "stillness")
        if self._tick is not None:
            self._tick = timed(self._tick, "tick (stack watcher)")

    _sender.Sender.__init__ = init
    steady = []
    try:
        elapsed = paced(url, rate, seconds, lambda: (spent.clear(), calls.clear()), lambda: steady.extend([collections.Counter(spent), collections.Counter(calls)]))
    finally:
        for name, function in originals.items():
            setattr(_sender.Sender, name, function)
    spent, calls = steady
    return {label: {"us_per_s": round(ns / elapsed / 1e3), "us_per_call": round(ns / calls[label] / 1e3, 1)} for label, ns in spent.most_common()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    report = {"python": sys.version.split()[0], "rate": args.rate, "load_average": round(os.getloadavg()[0], 1)}
    report["whole_thread"] = whole_thread(args.url, args.rate, args.seconds)
    report["parts"] = by_part(args.url, args.rate, args.seconds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
