"""A plain PyTorch training program for the accuracy benchmark (scripts/accuracy.mjs). It knows
nothing of stepscope: the benchmark runs it unmodified under `stepscope run` (the zero-code path).

The model is an MLP (--hidden units, --layers hidden layers, SGD) on the CPU; the data come from a
torch DataLoader whose Dataset does real CPU work in Python for each batch (--load-units rounds of a
tokenizer-like loop: splitting, hashing and counting words), or for each item with --batch-items
(then the DataLoader batches --batch items with its default collate, as image or text pipelines do).

The ground truth is measured by ablation: `--ready` runs the same loop over the same batches made
beforehand (the data cost removed, nothing else changed). The benchmark runs both and takes the
share of time the data cost as 1 - t_ready / t_real.

Host-side work after the optimizer step, for host-bound cases:
  --eval-every K --eval-batches B   evaluate B batches under torch.no_grad() every K steps;
  --log-every-step                  per-step logging: every parameter's norm (.item()), a JSON line
                                    formatted and written to a log file, flushed.
Either can be left out of the ablation run with --ablate host (the control then has neither).

The ablation runs beside the real program, at the same time and for as long (--seconds), so that
whatever else the machine runs weighs on both alike.

The last line printed is JSON: steps, the mean step time over the steady part (the first --skip
share of the steps left out, as warm-up), its spread over ten blocks, the torch version.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from steady import steady_allocator

WORDS = ("the quick brown fox jumps over the lazy dog while seven wizards quietly hex the jovial "
         "bankers of zurich under a pale moon").split()


def tokenize(rounds, vocab):
    """A tokenizer's work in pure Python: split a sentence, look words up, count them."""
    counts = 0
    for r in range(rounds):
        for w in WORDS:
            counts += vocab.get(w, r) & 7
    return counts


class WorkDataset(Dataset):
    """Items made of fixed tensors, each costing `units` rounds of tokenizer work to produce."""

    def __init__(self, n, shape, units, classes=10, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn((n,) + shape, generator=g)
        self.y = torch.randint(0, classes, (n,) + shape[:-1], generator=g)
        self.units = units
        self.vocab = {w: i for i, w in enumerate(WORDS)}

    def __len__(self):
        return self.x.shape[0]

    def __getitem__(self, i):
        if self.units:
            tokenize(self.units, self.vocab)
        return self.x[i], self.y[i]


def mlp(features, hidden, layers, classes=10):
    parts, width = [], features
    for _ in range(layers):
        parts += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    parts.append(nn.Linear(width, classes))
    return nn.Sequential(*parts)


def train_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True, help="at most this many steps")
    p.add_argument("--seconds", type=float, default=0, help="and at most this long (0: no limit)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=256, help="batches in the dataset (an epoch)")
    p.add_argument("--load-units", type=int, default=0, help="tokenizer rounds per batch")
    p.add_argument("--batch-items", action="store_true", help="the dataset yields items; the DataLoader batches them")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--ready", action="store_true", help="the ablation: the same batches, made beforehand")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=0)
    p.add_argument("--log-every-step", action="store_true")
    p.add_argument("--log-file", default=os.devnull)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--traceml", action="store_true", help="TraceML's own instrumentation of a plain loop (traceml.init, trace_step)")
    p.add_argument("--skip", type=float, default=0.2, help="share of the steps left out of the timing as warm-up")
    args = p.parse_args()

    steady_allocator()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = mlp(args.features, args.hidden, args.layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    if args.batch_items:
        units = max(0, round(args.load_units / args.batch))
        data = WorkDataset(args.batches * args.batch, (args.features,), units)
        loader = DataLoader(data, batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=True)
    else:
        # One item is one batch: the DataLoader hands each on as it is (batch_size=None), no collate.
        data = WorkDataset(args.batches, (args.batch, args.features), args.load_units)
        loader = DataLoader(data, batch_size=None, shuffle=True, num_workers=args.workers)
    val = [(torch.randn(args.batch, args.features), torch.randint(0, 10, (args.batch,))) for _ in range(max(1, args.eval_batches))]

    if args.ready:
        # The ablation: every batch produced before training, by the same code, then the same loop.
        # Made under no_grad, as an evaluation pass would read a loader: not part of training.
        with torch.no_grad():
            batches = list(loader)

        def epochs():
            while True:
                yield batches
    else:

        def epochs():
            while True:
                yield loader

    trace_step = None
    if args.traceml:
        # TraceML has no zero-code path for plain loops: its documented integration marks each step.
        import traceml_ai as traceml

        traceml.init(mode="auto")
        trace_step = traceml.trace_step

    log = open(args.log_file, "a")
    marks, cpu_marks = [], []
    step = 0
    until = time.perf_counter() + args.seconds if args.seconds else float("inf")
    model.train()
    for epoch in epochs():
        for x, y in epoch:
            marks.append(time.perf_counter())
            cpu_marks.append(time.thread_time())
            if trace_step is None:
                loss = train_step(model, optimizer, x, y)
            else:
                with trace_step(model):
                    loss = train_step(model, optimizer, x, y)
            step += 1
            if args.log_every_step:
                norms = {name: round(p.detach().norm().item(), 6) for name, p in model.named_parameters()}
                log.write(json.dumps({"step": step, "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"], "norms": norms}) + "\n")
                log.flush()
            if args.eval_every and step % args.eval_every == 0:
                model.eval()
                with torch.no_grad():
                    correct = sum(int((model(vx).argmax(1) == vy).sum()) for vx, vy in val)
                model.train()
                log.write(json.dumps({"step": step, "val_correct": correct}) + "\n")
            if step >= args.steps or marks[-1] >= until:
                break
        if step >= args.steps or marks[-1] >= until:
            break
    marks.append(time.perf_counter())
    cpu_marks.append(time.thread_time())
    log.close()

    # Step times from the top of one iteration to the top of the next (data wait included), on the
    # clock and in the training thread's CPU time: with the loading in this thread (no workers), the
    # CPU time is what the wall time would be with the machine to itself, whatever else runs on it.
    first = int(len(marks) * args.skip)

    def blocks_of(ts):
        steady = [b - a for a, b in zip(ts[first:], ts[first + 1:])]
        size = max(1, len(steady) // 10)
        return steady, [statistics.fmean(steady[i:i + size]) * 1e3 for i in range(0, size * 10, size) if steady[i:i + size]]

    steady, blocks = blocks_of(marks)
    _, cpu_blocks = blocks_of(cpu_marks)
    print(json.dumps({
        "steps": step,
        "ready": args.ready,
        "step_ms": statistics.fmean(steady) * 1e3,
        "step_ms_blocks": blocks,
        "cpu_ms_blocks": cpu_blocks,
        "steady_s": sum(steady),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
