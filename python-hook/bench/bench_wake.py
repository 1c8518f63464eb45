"""What a thread that only wakes costs here: the floor under the sender thread's CPU (target 5).

A thread that does nothing but wait, as the sender does between its sends (threading.Event.wait
with a timeout), and, for comparison, time.sleep and a bare lock's timed acquire, at the periods
the sender uses (0.08 s while a viewer watches, 0.5 s while none does) and shorter ones. Its CPU
comes from /proc/thread-self/schedstat (ns, what the scheduler ran it), read before and after.
Nothing is sent and nothing is encoded, so whatever the sender thread costs at a cadence is at
least this. Prints one JSON line per period. Linux only.

    python3 python-hook/bench/bench_wake.py [--seconds 4] [--periods 0.001,0.01,0.08,0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time


def thread_ns() -> int:
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[0])


def waits(period: float):
    event = threading.Event()
    lock = threading.Lock()
    lock.acquire()  # held, so that each acquire waits its timeout out
    return {
        "event_wait": lambda: event.wait(period),
        "sleep": lambda: time.sleep(period),
        "lock_acquire": lambda: lock.acquire(True, period),
    }


def measure(wait, seconds: float, out: dict) -> None:
    wakes = 0
    start_ns = thread_ns()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        wait()
        wakes += 1
    elapsed = time.monotonic() - start
    cpu_s = (thread_ns() - start_ns) / 1e9
    out.update(wakes_per_s=round(wakes / elapsed, 1), cpu_pct=round(100 * cpu_s / elapsed, 3), us_per_wake=round(cpu_s / wakes * 1e6, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--periods", default="0.001,0.01,0.08,0.5")
    args = parser.parse_args()
    for period in (float(p) for p in args.periods.split(",")):
        report = {"python": sys.version.split()[0], "period_s": period, "load_average": round(os.getloadavg()[0], 1)}
        for name, wait in waits(period).items():
            result: dict = {}
            thread = threading.Thread(target=measure, args=(wait, max(args.seconds, 3 * period), result))
            thread.start()
            thread.join()
            report[name] = result
        print(json.dumps(report))


if __name__ == "__main__":
    main()
