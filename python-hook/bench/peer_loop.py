"""One training loop, instrumented one way, for scripts/bench-hook-peers.mjs.

A small MLP (batch 32, 64-128-10) fed by a DataLoader, SGD, one CPU thread. --variant:
bare (nothing), explicit (stepscope's API as the README shows it), zero-code (run under
``python -m stepscope run``: this script is unchanged), profiler (torch.profiler recording every
step), traceml (run under ``traceml run``: its documented trace_step around each step). Prints one
JSON line: the training thread's CPU and wall time per step over the steps after --warmup.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", required=True, choices=("bare", "explicit", "zero-code", "profiler", "traceml"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total = args.steps + args.warmup
    data = TensorDataset(torch.randn(total * 32, 64), torch.randint(0, 10, (total * 32,)))
    loader = DataLoader(data, batch_size=32)

    scope = None
    step_context = lambda: contextlib.nullcontext()  # noqa: E731
    outer = contextlib.nullcontext()
    after_step = None
    if args.variant == "explicit":
        import stepscope

        scope = stepscope.init(url=args.url, job="bench-peers")
        loader = scope.loader(loader)
    elif args.variant == "profiler":
        outer = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    elif args.variant == "traceml":
        import traceml_ai as traceml

        traceml.init(mode="auto")
        step_context = lambda: traceml.trace_step(model)  # noqa: E731

    cpu0 = wall0 = None
    with outer as prof:
        if args.variant == "profiler":
            after_step = prof.step
        for i, (x, y) in enumerate(loader):
            if i == args.warmup:
                cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
            with step_context():
                if scope is not None:
                    with scope.phase("compute"):
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                        optimizer.zero_grad()
                        loss.backward()
                        optimizer.step()
                    scope.step(samples=len(x))
                else:
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
            if after_step is not None:
                after_step()
        # Before the profiler's post-processing at the end of the `with` (in the whole-process figure).
        cpu, wall = time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0
    if scope is not None:
        scope.close(timeout=5.0)
    print(json.dumps({"variant": args.variant, "cpu_us_per_step": cpu / args.steps / 1000, "wall_us_per_step": wall / args.steps / 1000}))


if __name__ == "__main__":
    main()
