"""What knowing where a stalled rank is costs the training thread (issue 29).

1. The training thread's step, while the job steps: a loop of fixed Python work 30 frames deep, timed
   per step (wall and the thread's CPU) with the hook stepping normally, and with its sender thread
   answering a `capture` request every 50 ms — two hundred times what the sidecar asks of a stalled rank
   (one every 10 s), and never while a job steps. Medians of interleaved runs; the ratio to the plain
   stepping run of the same round.
2. The stack sampling that tells a stuck stack from a moving one, which runs only once no step ended
   for a second: the same loop with slow "steps" (nothing ends a step), sampled every 0.5 s as the
   sender does, against the same loop unsampled.
3. The sender thread's own CPU for one capture (the training thread 30 frames deep, 8 other threads),
   and the bytes of the frame it sends.
4. The collective wrapper's bookkeeping (one list appended per collective, for the per-step counts),
   around a collective that does nothing: ns a call, wrapped against unwrapped.

Prints one JSON object (or a Markdown table with --markdown).

    python3 python-hook/bench/bench_where.py [--rounds 7] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stepscope  # noqa: E402
from stepscope import _comm, _msgpack, _where  # noqa: E402
from tests.fake_sidecar import FakeSidecar, wait_until  # noqa: E402

DEPTH = 30
WORK = 2000  # sum(range(WORK)) per call: tens of microseconds


def work_at_depth(n):
    if n:
        return work_at_depth(n - 1)
    return sum(range(WORK))


def steps(scope, count):
    """`count` steps of fixed work; per-step wall and thread-CPU ns, medians."""
    wall, cpu = [], []
    for _ in range(count):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(10):
            work_at_depth(DEPTH)
        if scope is not None:
            scope.step()
        wall.append(time.perf_counter_ns() - w0)
        cpu.append(time.thread_time_ns() - c0)
    return statistics.median(wall), statistics.median(cpu)


def stepping_cost(rounds, count):
    """Training-thread step time: hooked and stepping, with and without captures every 50 ms."""
    with FakeSidecar(welcome={"heartbeat_ms": 1000, "capture": {"deep": False}}) as fake:
        scope = stepscope.init(url=fake.url, job="bench-where", rank=0, world_size=1)
        wait_until(lambda: fake.of_type("hello"), 5)
        stop = threading.Event()
        capturing = threading.Event()

        def ask():
            request = 0
            while not stop.is_set():
                if capturing.is_set():
                    request += 1
                    fake.send_all({"v": 1, "type": "capture", "id": request})
                stop.wait(0.05)

        asker = threading.Thread(target=ask, daemon=True)
        asker.start()
        quiet, asked = [], []
        try:
            steps(scope, count)  # warm up
            for r in range(rounds):
                for mode in (("quiet", "asked") if r % 2 == 0 else ("asked", "quiet")):
                    (capturing.set if mode == "asked" else capturing.clear)()
                    time.sleep(0.1)
                    (asked if mode == "asked" else quiet).append(steps(scope, count))
            answered = len(fake.of_type("stack"))
        finally:
            stop.set()
            asker.join(2)
            scope.close(timeout=2)
    q_wall = statistics.median(w for w, _ in quiet)
    a_wall = statistics.median(w for w, _ in asked)
    q_cpu = statistics.median(c for _, c in quiet)
    a_cpu = statistics.median(c for _, c in asked)
    return {
        "step_us_stepping": round(q_wall / 1e3, 1),
        "step_us_with_a_capture_every_50ms": round(a_wall / 1e3, 1),
        "wall_ratio": round(a_wall / q_wall, 4),
        "training_cpu_ratio": round(a_cpu / q_cpu, 4),
        "captures_answered": answered,
    }


def stillness_cost(rounds, count):
    """The same work with the sender sampling the training thread's stack every 0.5 s (no step ends)."""
    tid = threading.get_ident()
    still = _where.Stillness(after_s=0.0, every_s=0.5)
    stop = threading.Event()
    sampling = threading.Event()

    def sampler():
        while not stop.is_set():
            if sampling.is_set():
                still.sample(tid, time.monotonic(), 5.0)
            stop.wait(0.1)  # the sender's cycle; the sample itself is due every 0.5 s

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    off, on = [], []
    try:
        steps(None, count)
        for r in range(rounds):
            for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                (sampling.set if mode == "on" else sampling.clear)()
                (on if mode == "on" else off).append(steps(None, count)[0])
    finally:
        stop.set()
        thread.join(2)
    return {"wall_ratio_sampled_to_not": round(statistics.median(on) / statistics.median(off), 4)}


def capture_cost(repeats):
    """The sender thread's CPU for one capture, the training thread DEPTH frames deep among 8 others."""
    release = threading.Event()
    ready = threading.Barrier(10)

    def parked(n):
        if n:
            return parked(n - 1)
        ready.wait()
        release.wait()

    training = threading.Thread(target=parked, args=(DEPTH,), daemon=True)
    others = [threading.Thread(target=parked, args=(3,), daemon=True) for _ in range(8)]
    for t in [training, *others]:
        t.start()
    ready.wait()
    try:
        samples = []
        for _ in range(repeats):
            c0 = time.thread_time_ns()
            where = _where.capture(training.ident, exclude=(threading.get_ident(),))
            samples.append(time.thread_time_ns() - c0)
        size = len(_msgpack.packb(where))
    finally:
        release.set()
        for t in [training, *others]:
            t.join(2)
    return {"capture_us": round(statistics.median(samples) / 1e3, 1), "capture_bytes": size, "threads": len(where["threads"])}


def wrapper_cost(n, rounds):
    """ns a call of a collective that does nothing, wrapped (events, per-step counts) and not."""

    def nothing(tensor=None, group=None, async_op=False):
        return None

    class Dist:  # what the wrapper asks of torch.distributed: a gloo group of 2 (cached after the first call)
        @staticmethod
        def get_world_size(group=None):
            return 2

        @staticmethod
        def get_backend(group=None):
            return "gloo"

    tracker = _comm.CommTracker(modules={"torch.distributed": Dist})
    tracker.activate(0)
    wrapped = _comm._wrapper("barrier", nothing)
    previous = _comm._current
    _comm._current = tracker
    plain_ns, wrapped_ns = [], []
    try:
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                nothing()
            plain_ns.append((time.perf_counter_ns() - t0) / n)
            t0 = time.perf_counter_ns()
            for _ in range(n):
                wrapped()
            wrapped_ns.append((time.perf_counter_ns() - t0) / n)
            tracker.events.clear()
            tracker.calls.clear()
    finally:
        _comm._current = previous
    return {"collective_ns_unwrapped": round(statistics.median(plain_ns)), "collective_ns_wrapped": round(statistics.median(wrapped_ns))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    result = {"python": sys.version.split()[0]}
    result["stepping"] = stepping_cost(args.rounds, args.steps)
    result["stillness"] = stillness_cost(args.rounds, args.steps)
    result["capture"] = capture_cost(201)
    result["collective"] = wrapper_cost(20000, args.rounds)
    if not args.markdown:
        print(json.dumps(result, indent=2))
        return
    s, c, w = result["stepping"], result["capture"], result["collective"]
    print("| what | figure |\n|---|---|")
    print("| training step, stepping (10 × work 30 frames deep) | %.1f µs |" % s["step_us_stepping"])
    print("| the same, the sender answering a capture every 50 ms | %.1f µs (%.2f× wall, %.2f× CPU) |" % (s["step_us_with_a_capture_every_50ms"], s["wall_ratio"], s["training_cpu_ratio"]))
    print("| the same, its stack sampled every 0.5 s (no step ending) | %.2f× wall |" % result["stillness"]["wall_ratio_sampled_to_not"])
    print("| one capture, sender thread CPU (%d threads, 30 frames deep) | %.1f µs, %d bytes |" % (c["threads"], c["capture_us"], c["capture_bytes"]))
    print("| a collective, unwrapped / wrapped | %d ns / %d ns |" % (w["collective_ns_unwrapped"], w["collective_ns_wrapped"]))


if __name__ == "__main__":
    main()
