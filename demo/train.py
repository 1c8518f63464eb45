"""The training loop of `stepscope demo`, reporting through the real stepscope hook.

It follows a schedule of regimes on a clock shared with the sidecar's simulated GPU counters: each
entry of --schedule (JSON, written by src/demo/story.ts) holds until `until_s` seconds after --t0
(epoch seconds), and the loop ends with the last one.

Scripted (the default, standard library only): each step sleeps the entry's phase times, the data
wait inside the loader's next() (augmentation in the training process: the loader reports
num_workers=0), h2d and compute inside scope.phase(), the rest outside any phase.

--real (needs PyTorch with CUDA): a small model really trained on the GPU. Compute-bound regimes
read batches prepared ahead by DataLoader workers; input-bound regimes augment every sample in the
training process (num_workers=0). A GPU cannot be made to throttle on purpose, so a "throttled"
regime trains as a healthy one and the real counters say what the GPU did.

Prints one JSON line at the end: steps, seconds, and whether the hook delivered everything.
"""
import argparse
import json
import os
import time

import stepscope

SAMPLES_PER_BATCH = 64


class Schedule:
    def __init__(self, entries, t0):
        self.entries = entries
        self.t0 = t0

    def current(self):
        """The entry in force now, or None once the last has run out."""
        elapsed = time.time() - self.t0
        for entry in self.entries:
            if elapsed < entry["until_s"]:
                return entry
        return None


class AugmentingLoader:
    """Batches built in the training process; data_ms is the time to decode and augment one.

    It has a DataLoader's num_workers, batch_size and dataset, so the hook reports its settings."""

    num_workers = 0
    batch_size = SAMPLES_PER_BATCH
    pin_memory = False
    dataset = range(1 << 30)

    def __init__(self, schedule):
        self.schedule = schedule

    def __iter__(self):
        while True:
            entry = self.schedule.current()
            if entry is None:
                return
            time.sleep(entry["data_ms"] / 1000.0)
            yield entry


def scripted(scope, schedule):
    steps = 0
    for entry in scope.loader(AugmentingLoader(schedule)):
        with scope.phase("h2d"):
            time.sleep(entry["h2d_ms"] / 1000.0)
        with scope.phase("compute"):
            time.sleep(entry["compute_ms"] / 1000.0)
        time.sleep(entry["other_ms"] / 1000.0)
        scope.step(samples=SAMPLES_PER_BATCH)
        steps += 1
    return steps


def burn_cpu(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def real(scope, schedule):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    features, hidden, batch = 1024, 4096, 1024
    layers = [nn.Linear(features, hidden), nn.ReLU()]
    for _ in range(6):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    class Samples(Dataset):
        def __init__(self, augment_ms):
            self.augment_ms = augment_ms
            self.x = torch.randn(4096, features)

        def __len__(self):
            return 1 << 30

        def __getitem__(self, i):
            if self.augment_ms:
                burn_cpu(self.augment_ms / 1000.0)  # decode and augment one sample on the CPU
            return self.x[i % len(self.x)], i % 10

    def loader_for(regime):
        if regime == "input-bound":
            return DataLoader(Samples(augment_ms=0.25), batch_size=batch, num_workers=0)
        return DataLoader(Samples(augment_ms=0), batch_size=batch, num_workers=4, pin_memory=True, prefetch_factor=4)

    steps = 0
    entry = schedule.current()
    while entry is not None:
        regime = entry["regime"]
        for x, y in scope.loader(loader_for(regime)):
            with scope.phase("h2d"):
                x = x.to(device, non_blocking=True)
                y = y.to(device, non_blocking=True)
            with scope.phase("compute"):
                optimizer.zero_grad(set_to_none=True)
                loss_fn(model(x), y).backward()
                optimizer.step()
            scope.step(samples=len(y))
            steps += 1
            entry = schedule.current()
            if entry is None or entry["regime"] != regime:
                break
    torch.cuda.synchronize()
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedule", required=True, help="JSON list of {regime, until_s, data_ms, h2d_ms, compute_ms, other_ms}")
    parser.add_argument("--t0", type=float, required=True, help="epoch seconds the schedule counts from")
    parser.add_argument("--real", action="store_true", help="train a real model on the GPU (PyTorch with CUDA)")
    args = parser.parse_args()

    schedule = Schedule(json.loads(args.schedule), args.t0)
    scope = stepscope.init()
    started = time.perf_counter()
    steps = (real if args.real else scripted)(scope, schedule)
    seconds = time.perf_counter() - started
    closed = scope.close(timeout=10.0)
    print(json.dumps({"steps": steps, "seconds": round(seconds, 2), "closed": closed}), flush=True)


if __name__ == "__main__":
    main()
