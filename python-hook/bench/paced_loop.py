"""A training loop of empty steps at a paced rate (each step's length drawn around the mean, so that the
steps' ends fall at every phase of the hook's sends, as real steps' do), with the real hook's explicit API, noting when each
step ended on the wall clock (CLOCK_REALTIME, which a viewer on the same host reads too).

    python3 python-hook/bench/paced_loop.py --url ws://127.0.0.1:9477/v1/ingest --rate 50 --seconds 20 --out ends.json

Writes {"ends_ms": [...]} to --out after the loop (its step k ended at ends_ms[k]): nothing is written
while it runs, so the timing is the hook's alone. Used by scripts/bench-stream.mjs --hook python.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time

# The hook under test: --hook-path DIR (another checkout's python-hook, for a baseline), else this one's.
_HOOK = sys.argv[sys.argv.index("--hook-path") + 1] if "--hook-path" in sys.argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _HOOK)

import stepscope  # noqa: E402


def cuda_work(ms: float):
    """A callable that queues about ``ms`` of GPU time (a spinning kernel, calibrated here)."""
    import torch

    cycles = 1_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # the first launch's own cost out of the way
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    scaled = max(1, int(cycles * ms / max(start.elapsed_time(end), 1e-3)))
    return lambda: torch.cuda._sleep(scaled)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--job", default="bench")
    parser.add_argument("--jitter", type=float, default=0.5, help="each step's length is uniform in (1 ± jitter) / rate")
    parser.add_argument("--busy", type=float, default=0.0, help="the share of each step spent in Python holding the GIL (the rest sleeps, as a wait on the GPU does)")
    parser.add_argument("--cuda-ms", type=float, default=0.0, help="GPU time queued each step (torch.cuda._sleep), which the hook times with CUDA events: its rows wait for them")
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-interval", type=float, default=None, help="the hook's; default its own")
    parser.add_argument("--hook-path", default=None, help="the python-hook directory to import stepscope from")
    args = parser.parse_args()

    options = {} if args.batch_interval is None else {"batch_interval": args.batch_interval}
    gpu_work = cuda_work(args.cuda_ms) if args.cuda_ms > 0 else None
    scope = stepscope.init(url=args.url, job=args.job, **options)
    ends = []
    interval = 1.0 / args.rate
    draw = random.Random(os.getpid()).uniform
    start = next_at = time.perf_counter()
    for _ in scope.loader(itertools.count()):
        with scope.phase("compute"):
            if gpu_work is not None:
                gpu_work()  # queued, not waited for: the step ends before its kernel does, as in training
            if args.busy > 0:
                until = time.perf_counter() + interval * args.busy
                while time.perf_counter() < until:
                    pass
        scope.step(samples=8)
        ends.append(time.time_ns() / 1e6)
        next_at += interval * draw(1.0 - args.jitter, 1.0 + args.jitter)
        if next_at >= start + args.seconds:
            break
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    scope.close(timeout=5.0)
    with open(args.out, "w") as out:
        json.dump({"ends_ms": ends}, out)


if __name__ == "__main__":
    main()
