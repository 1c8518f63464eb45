"""What watching DDP costs: the hook's communication hook (DDP's own allreduce_hook run inside a Python
hook that timestamps each bucket) against DDP's built-in C++ all-reduce, per bucket, in the same run.

One process, torch.distributed on gloo with one rank (the collective itself is a copy: what is left is
the per-bucket machinery), a model of --layers small linear layers and a bucket cap small enough that
every layer is a bucket of its own. Rounds alternate the two models; per variant the median of the
rounds' wall time per step, the cost per bucket (median of each round's difference, divided by the
buckets) and the ratio.

    python python-hook/bench/bench_ddp.py [--rounds 15] [--steps 200] [--layers 32]

Needs torch (Debian's python3-torch, or the test environment); the hook is taken from this checkout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from stepscope import _comm  # noqa: E402


def model(layers, width):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])


def step_time(ddp, x, steps):
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        ddp(x).sum().backward()
    return (time.perf_counter_ns() - t0) / steps / 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    store = tempfile.mktemp(prefix="stepscope-bench-ddp-")
    dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
    cap = (args.width * args.width + args.width) * 4 / 1024 / 1024 * 0.9  # under one layer: a bucket each
    builtin = torch.nn.parallel.DistributedDataParallel(model(args.layers, args.width), bucket_cap_mb=cap)
    watched = torch.nn.parallel.DistributedDataParallel(model(args.layers, args.width), bucket_cap_mb=cap)
    tracker = _comm.CommTracker()
    tracker.activate()
    _comm._current = tracker
    assert _comm.watch_ddp(watched)
    x = torch.randn(8, args.width)
    for ddp in (builtin, watched):
        step_time(ddp, x, 20)
    buckets = None
    times = {"builtin": [], "watched": []}
    for r in range(args.rounds):
        order = ("builtin", "watched") if r % 2 == 0 else ("watched", "builtin")
        for name in order:
            tracker.events.clear()
            times[name].append(step_time(builtin if name == "builtin" else watched, x, args.steps))
            if name == "watched":
                buckets = sum(1 for e in tracker.events if e[0] == "L") // args.steps
    costs = [w - b for w, b in zip(times["watched"], times["builtin"])]
    result = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "buckets_per_step": buckets,
        "builtin_us_per_step": round(statistics.median(times["builtin"]), 1),
        "watched_us_per_step": round(statistics.median(times["watched"]), 1),
        "cost_us_per_bucket": round(statistics.median(costs) / buckets, 2),
        "cost_us_per_bucket_iqr": [round(q / buckets, 2) for q in statistics.quantiles(costs, n=4)[::2]],
        "ratio": round(statistics.median(w / b for w, b in zip(times["watched"], times["builtin"])), 3),
        "loadavg": os.getloadavg()[0],
    }
    dist.destroy_process_group()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
