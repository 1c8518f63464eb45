"""What the stack fingerprint (stepscope._stack) costs: the training thread and the sender thread.

- training thread: ``with torch.autocast(...)`` and ``GradScaler.scale`` with stepscope's wrappers
  against the originals, in the same run (the only part of the fingerprint on the step path; each
  happens about once a step);
- sender thread: one read of the stack and compile groups (``Watcher.poll`` when due, at most once
  every 10 s), without torch.compile and after it ran.

Medians over ``--repeats`` of ``--n`` calls each, in microseconds of CPU time (time.thread_time).
Prints one JSON object.

    python python-hook/bench/bench_stack.py [--n 20000] [--repeats 9]

Needs torch; torch.compile's part needs torch 2.x (the test environment:
`node scripts/python-venv.mjs ensure`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from stepscope import _stack  # noqa: E402


def cpu_us(fn, n, repeats):
    samples = []
    for _ in range(repeats):
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        samples.append((time.thread_time() - t0) / n * 1e6)
    return statistics.median(samples)


def autocast_enter():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    scaler_cls = getattr(getattr(torch, "amp", None), "GradScaler", None)
    scaler = scaler_cls("cpu") if scaler_cls is not None else torch.cuda.amp.GradScaler(enabled=False)
    loss = torch.ones(1)
    result = {"torch": torch.__version__}
    for label in ("original", "wrapped", "original_again"):
        if label == "wrapped":
            _stack.install(torch)
        elif label == "original_again":
            _stack.uninstall()
        result["autocast_us_" + label] = round(cpu_us(autocast_enter, args.n, args.repeats), 3)
        result["scaler_scale_us_" + label] = round(cpu_us(lambda: scaler.scale(loss), args.n, args.repeats), 3)
    _stack.install(torch)
    watcher = _stack.Watcher({})
    clock = [0.0]

    def poll():
        clock[0] += 20.0  # always due
        watcher.poll(clock[0], 1)

    result["poll_us_uncompiled"] = round(cpu_us(poll, max(1, args.n // 20), args.repeats), 3)
    if hasattr(torch, "compile"):
        compiled = torch.compile(lambda x: (x * 2).sum(), backend="eager", dynamic=False)
        for n in range(2, 6):
            compiled(torch.ones(n))
        result["poll_us_compiled"] = round(cpu_us(poll, max(1, args.n // 20), args.repeats), 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
