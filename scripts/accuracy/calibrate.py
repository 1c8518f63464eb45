"""Sizes for the accuracy benchmark's programs on this machine (run without stepscope): how many
tokenizer rounds take a millisecond, and which MLP width gives each wanted training-step time.

    python calibrate.py --compute-ms 0.25 0.5 1 ... [--layers 2 --batch 32 --features 64]

Prints JSON: {"units_per_ms": ..., "hidden": {"0.25": 24, ...}, "torch": ...}. The figures only aim
the grid's cells; each cell's truth is measured by ablation, not taken from here.
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

from steady import steady_allocator
from train import WORDS, mlp, tokenize


def best_of(fn, repeat=5):
    """The fastest of `repeat` timings (s): the least disturbed by whatever else the machine runs."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def units_per_ms():
    vocab = {w: i for i, w in enumerate(WORDS)}
    n = 200
    return n / (best_of(lambda: tokenize(n, vocab)) * 1e3)


def step_ms(hidden, layers, batch, features):
    model = mlp(features, hidden, layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(batch, features), torch.randint(0, 10, (batch,))

    def steps(n):
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            opt.step()

    steps(3)
    one = best_of(lambda: steps(1), 3)
    n = max(1, min(200, int(0.02 / max(one, 1e-6))))
    return best_of(lambda: steps(n), 5) / n * 1e3


def widths_for(targets, layers, batch, features):
    """The width whose step takes about each target ms: step times measured at widths 4, 8, 16, ...
    until past the largest target, then interpolated on a log-log scale (at least 4)."""
    curve = []
    width = 4
    while True:
        curve.append((width, step_ms(width, layers, batch, features)))
        if curve[-1][1] >= max(targets) or width >= 16384:
            break
        width *= 2
    out = {}
    for target in targets:
        if target <= curve[0][1]:
            out[target] = curve[0][0]
            continue
        (w0, t0), (w1, t1) = next(((a, b) for a, b in zip(curve, curve[1:]) if b[1] >= target), (curve[-2], curve[-1]))
        k = (math.log(target) - math.log(t0)) / max(1e-9, math.log(t1) - math.log(t0))
        out[target] = max(4, int(round(math.exp(math.log(w0) + k * (math.log(w1) - math.log(w0))))))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compute-ms", type=float, nargs="+", required=True)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--features", type=int, default=64)
    args = p.parse_args()
    steady_allocator()
    torch.set_num_threads(1)
    hidden = {str(ms): w for ms, w in widths_for(args.compute_ms, args.layers, args.batch, args.features).items()}
    print(json.dumps({
        "units_per_ms": statistics.fmean(units_per_ms() for _ in range(3)),
        "hidden": hidden,
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
