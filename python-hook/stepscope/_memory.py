"""The framework's allocator statistics, for `counters` frames of source ``"memory"``.

Read by the sender thread, at most once a second, and only while the sidecar's `welcome` asks for
``counters.memory``. Only PyTorch's CUDA caching allocator is read, through ``torch`` as the training
script imported it (the hook never imports torch), and only once torch has initialised CUDA: the hook
never initialises CUDA, never creates a context on a device the process has not used, and never
synchronises. A figure that cannot be read is None.

One sample per CUDA device whose allocator this process has used (reserved memory there at some
point), keyed by torch's device ordinal in this process:

    at_ns                 hook monotonic ns of the read
    device                torch's CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
    allocated_bytes       memory_stats "allocated_bytes.all.current": bytes held by tensors now
    reserved_bytes        "reserved_bytes.all.current": bytes the caching allocator holds from the driver
    peak_allocated_bytes  "allocated_bytes.all.peak": most allocated_bytes since the process started
                          (or since the script's last torch.cuda.reset_peak_memory_stats())
    alloc_retries         "num_alloc_retries", cumulative: cudaMalloc calls that failed and made the
                          allocator free its cache (synchronising the device) and retry
    ooms                  "num_ooms", cumulative: out-of-memory errors the allocator raised
    inactive_split_bytes  "inactive_split_bytes.all.current": free bytes inside split blocks that
                          cannot be returned to the driver (fragmentation)
    total_bytes           the device's memory, from torch.cuda.mem_get_info (cudaMemGetInfo), else
                          get_device_properties().total_memory
    free_bytes            the device's free memory for every process on it, from mem_get_info
"""

from __future__ import annotations

import numbers
import sys

__all__ = ["MemorySampler", "MEMORY_INTERVAL_S", "sampler"]

MEMORY_INTERVAL_S = 1.0

# (sample key, torch.cuda.memory_stats key)
_STATS = (
    ("allocated_bytes", "allocated_bytes.all.current"),
    ("reserved_bytes", "reserved_bytes.all.current"),
    ("peak_allocated_bytes", "allocated_bytes.all.peak"),
    ("alloc_retries", "num_alloc_retries"),
    ("ooms", "num_ooms"),
    ("inactive_split_bytes", "inactive_split_bytes.all.current"),
)
_MAX_INT = 2**53 - 1


class MemorySampler:
    """Reads ``torch.cuda.memory_stats`` per device in use; ``samples`` returns [] without CUDA in use."""

    def __init__(self, modules=None):
        self._modules = sys.modules if modules is None else modules
        self._devices = set()  # ordinals whose allocator this process has used
        self._totals = {}  # ordinal -> total bytes (a device's size does not change)

    def samples(self, at_ns: int) -> list:
        try:
            return self._samples(at_ns)
        except Exception:  # never into the sender thread's cycle
            return []

    def _samples(self, at_ns: int) -> list:
        cuda = self._cuda()
        if cuda is None:
            return []
        count = _safe(cuda.device_count)
        if not isinstance(count, int) or count <= 0:
            return []
        out = []
        for device in range(count):
            stats = _safe(lambda: cuda.memory_stats(device))
            if not isinstance(stats, dict):
                stats = {}
            if device not in self._devices:
                if not (_count(stats.get("reserved_bytes.all.peak")) or _count(stats.get("reserved_bytes.all.current"))):
                    continue  # never used here: reading more (mem_get_info) would create a context on it
                self._devices.add(device)
            sample = {"at_ns": at_ns, "device": device}
            for key, name in _STATS:
                sample[key] = _count(stats.get(name))
            free, total = self._device_memory(cuda, device)
            sample["total_bytes"] = total
            sample["free_bytes"] = free
            out.append(sample)
        return out

    def _cuda(self):
        """torch.cuda if the training script imported torch and torch has initialised CUDA, else None."""
        torch = self._modules.get("torch")
        if torch is None:
            return None
        cuda = getattr(torch, "cuda", None)
        if cuda is None:
            return None
        try:
            return cuda if cuda.is_initialized() is True else None
        except Exception:
            return None

    def _device_memory(self, cuda, device):
        info = _safe(lambda: cuda.mem_get_info(device))
        free = total = None
        if isinstance(info, (tuple, list)) and len(info) == 2:
            free, total = _count(info[0]), _count(info[1])
        if total is None:
            total = self._totals.get(device)
            if total is None:
                total = _count(_safe(lambda: cuda.get_device_properties(device).total_memory))
        if total is not None:
            self._totals[device] = total
        return free, total


def sampler(modules=None) -> MemorySampler:
    """The sampler the counter schedule runs for source ``"memory"``."""
    return MemorySampler(modules)


def _count(value):
    """A non-negative integer as sent, else None (never a made-up zero)."""
    if type(value) is bool or not isinstance(value, numbers.Integral):
        return None
    try:
        value = int(value)
    except Exception:
        return None
    return value if 0 <= value <= _MAX_INT else None


def _safe(read):
    try:
        return read()
    except Exception:
        return None
