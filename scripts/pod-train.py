"""The training script of the pod stage (scripts/pod-ci.mjs), at /workspace/train.py in its training image.

An ordinary PyTorch loop that knows nothing of stepscope: the manifests time it from outside
(STEPSCOPE_AUTO=1, or `python -m stepscope run`). Its verdict is certain: each sample takes 10 ms to
"read" (a sleep, whatever the machine's load) in the main process (num_workers=0), and the model is
a single small layer, so every step waits about 80 ms on its loader and computes in well under one:
input-bound. Under torchrun it trains with DistributedDataParallel over gloo, one CPU process per rank.
Its last line says how many steps it took.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

STEPS = 300
BATCH = 8


class SlowReads(Dataset):
    """Stands for samples read from slow storage: 10 ms each."""

    def __len__(self):
        return STEPS * BATCH

    def __getitem__(self, index):
        time.sleep(0.010)
        g = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=g), torch.randint(0, 4, (), generator=g)


def main():
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    model = nn.Linear(32, 4)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(SlowReads(), batch_size=BATCH, num_workers=0)
    steps = 0
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        steps += 1
    if distributed:
        dist.destroy_process_group()
    # One write for the line: the ranks share the container's stdout.
    sys.stdout.write("trained %d steps (rank %s)\n" % (steps, os.environ.get("RANK", "0")))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
