"""A small language model trained the way many short scripts do it, for the accuracy benchmark and
the zero-code tests: no DataLoader (batches are sliced out of one token tensor), no torch.optim
optimizer (the weights are updated by hand under torch.no_grad()), and, with --eval-every, the
validation loss estimated every few steps under torch.no_grad() with the model in eval mode (the
shape of nanoGPT's and many tutorials' loops). It knows nothing of stepscope.

--log-every-step instead logs the loss every step (.item() and a formatted line to a file): cheap.
--ready is the ablation of the evaluation (the same loop, evaluating never): 1 - t_ready / t_real is
the share of time evaluation took.

The last line printed is JSON: steps, the mean wall time of a step over the steady part (the first
--skip of the steps left out), the torch version.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from steady import steady_allocator


class TinyLM(nn.Module):
    """Embeddings, a GRU-free MLP over a context window, and a head: a bigram-plus model."""

    def __init__(self, vocab, context, width):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Sequential(nn.Linear(context * width, width), nn.Tanh(), nn.Dropout(0.1), nn.Linear(width, width), nn.Tanh())
        self.head = nn.Linear(width, vocab)

    def forward(self, x):
        return self.head(self.mix(self.embed(x).flatten(1)))


def get_batch(tokens, batch, context, generator):
    """Slices of the token tensor: inputs and the token that follows each (no DataLoader)."""
    at = torch.randint(0, tokens.numel() - context - 1, (batch,), generator=generator)
    x = torch.stack([tokens[i : i + context] for i in at.tolist()])
    y = tokens[at + context]
    return x, y


@torch.no_grad()
def estimate_loss(model, tokens, batches, batch, context, generator):
    model.eval()
    losses = []
    for _ in range(batches):
        x, y = get_batch(tokens, batch, context, generator)
        losses.append(F.cross_entropy(model(x), y).item())
    model.train()
    return sum(losses) / len(losses)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--width", type=int, default=96)
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=0)
    p.add_argument("--log-every-step", action="store_true")
    p.add_argument("--log-file", default=os.devnull)
    p.add_argument("--ready", action="store_true", help="the ablation: never evaluate")
    p.add_argument("--skip", type=float, default=0.2)
    args = p.parse_args()
    steady_allocator()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    vocab = 64
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (200_000,), generator=generator)
    train, val = tokens[:180_000], tokens[180_000:]
    model = TinyLM(vocab, args.context, args.width)
    params = list(model.parameters())
    log = open(args.log_file, "a")

    times = []
    start = time.monotonic()
    step = 0
    last = time.perf_counter()
    while step < args.steps and (not args.seconds or time.monotonic() - start < args.seconds):
        x, y = get_batch(train, args.batch, args.context, generator)
        loss = F.cross_entropy(model(x), y)
        for q in params:
            q.grad = None
        loss.backward()
        with torch.no_grad():
            for q in params:
                q -= args.lr * q.grad
        if args.log_every_step:
            log.write("step %d loss %.4f\n" % (step, loss.item()))
            log.flush()
        if args.eval_every and step % args.eval_every == 0 and not args.ready:
            val_loss = estimate_loss(model, val, args.eval_batches, args.batch, args.context, generator)
            log.write("step %d val %.4f\n" % (step, val_loss))
        step += 1
        now = time.perf_counter()
        times.append(now - last)
        last = now
    steady = times[int(len(times) * args.skip) :] or times
    print(json.dumps({"steps": step, "step_ms": 1000 * sum(steady) / len(steady), "torch": torch.__version__}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
