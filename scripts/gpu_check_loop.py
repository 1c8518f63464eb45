"""A training loop that knows nothing of stepscope, for scripts/gpu_check.py's zero-code check
(`python -m stepscope run scripts/gpu_check_loop.py ...`): a DataLoader (pinned memory, --data-ms
spent per batch in the dataset), copies to the GPU with non_blocking=True, a small model, a kernel
that keeps the GPU busy --busy-ms, backward, an optimizer step and loss.item().

--simulate puts the simulated CUDA layer (python-hook/tests/simcuda.py) in torch.cuda first, for
machines without a GPU.
"""
import argparse
import os
import sys
import time

import torch


class Slow(torch.utils.data.Dataset):
    def __init__(self, n, data_ms):
        self.n = n
        self.data_s = data_ms / 1000.0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.data_s:
            time.sleep(self.data_s / 8)  # 8 items a batch
        return torch.full((256,), float(i % 7)), i % 10


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--data-ms", type=float, default=0.0)
    parser.add_argument("--busy-ms", type=float, default=20.0)
    parser.add_argument("--simulate", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.simulate:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python-hook"))
        from tests.simcuda import SimCuda

        sim = SimCuda()
        sim.patch(torch).__enter__()
        busy, device, pin = sim.kernel, "cpu", False
    else:
        torch.cuda.init()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(2):
            start.record()
            torch.cuda._sleep(20_000_000)
            end.record()
            torch.cuda.synchronize()
        cycles_per_ms = 20_000_000 / start.elapsed_time(end)

        def busy(ms):
            torch.cuda._sleep(int(ms * cycles_per_ms))

        device, pin = "cuda", True
    loader = torch.utils.data.DataLoader(Slow(args.steps * 8, args.data_ms), batch_size=8, pin_memory=pin)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        x = x.to("cuda", non_blocking=True)
        y = y.to("cuda", non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        busy(args.busy_ms)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        if args.simulate:
            sim.item()  # what loss.item() waits for on a GPU


if __name__ == "__main__":
    main()
