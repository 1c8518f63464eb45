"""A stand-in ``torch`` for NCCL on simulated GPUs (tests/simcuda.py): ``torch.distributed`` with an NCCL
process group, DDP's reducer and its default communication hook, so that the hook's code for GPU
collectives runs unchanged where no GPU exists. Nothing of real torch is imported.

What it reproduces, and where PyTorch defines it:

- A collective on NCCL runs on the process group's own CUDA stream, which first waits for the calling
  stream's queued work (ProcessGroupNCCL ``syncStream``); the CPU-side call returns at once. It ends
  when every rank has reached it, plus the transfer (``bytes / bandwidth``): a rank that is ready
  early waits on the GPU for the last one.
- ``Work.wait()`` makes the current stream wait for the collective and does not block the host
  (``WorkNCCL::wait`` → ``synchronizeStream``); a synchronous call (``async_op=False``) is the
  asynchronous one followed by ``work.wait()`` (``distributed_c10d``: ``if async_op: return work``
  ... ``work.wait()``).
- ``work.get_future()`` is completed at launch and CUDA-aware: ``then(callback)`` runs the callback
  at once, on the CPU, with a current stream that waits for the collective, and the future it
  returns completes after what the callback queued (``ivalue::Future::then``; torch's documentation
  of ``Future.then``: "the callback will be invoked with some dedicated streams set as current ...
  synchronized with those kernels"). ``Future.wait()`` makes the current stream wait.
- DDP: gradients are computed bucket by bucket during backward; when a bucket is ready its
  communication hook is called with a ``GradBucket`` (``buffer()``, ``is_last()``); without a hook the
  built-in all-reduce runs (not through ``torch.distributed``'s Python functions); at the end of
  backward the reducer waits on every bucket's future. ``register_comm_hook`` twice is refused as the
  reducer refuses it. ``default_hooks.allreduce_hook`` is torch's: divide by the group size, then
  ``dist.all_reduce(..., async_op=True).get_future().then(lambda fut: fut.value()[0])``.

Ranks: :class:`ScriptedPeers` (one process: the other ranks are ready a fixed time after this one) or
:class:`PipePeers` (ranks in separate processes, their ready times exchanged through a coordinator:
:func:`coordinate`). Timelines of processes on one machine compare: the device clock is
``time.perf_counter_ns`` (CLOCK_MONOTONIC).
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import time
import types
from unittest import mock

from .simcuda import Point, SimCuda, SimTensor

__all__ = ["install", "ScriptedPeers", "PipePeers", "coordinate", "SimModel"]


class ScriptedPeers:
    """The other ranks reach each collective ``lag_ns`` after this one (negative: before it)."""

    def __init__(self, lag_ns=0):
        self.lag_ns = lag_ns

    def last_ready(self, seq, ready):
        return Point(after=(ready,), plus=max(0, self.lag_ns))


class PipePeers:
    """Ranks in other processes: this rank's ready times go to :func:`coordinate` in the parent, which
    answers with the latest of all ranks'. A thread per process does the exchange, in launch order
    (NCCL runs a communicator's collectives in the order they were issued)."""

    def __init__(self, conn):
        self._conn = conn
        self._queue = collections.deque()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simnccl-proxy", daemon=True)
        self._thread.start()

    def last_ready(self, seq, ready):
        result = Point()
        self._queue.append((seq, ready, result))
        self._wake.set()
        return result

    def _run(self):
        while True:
            self._wake.wait(0.05)
            self._wake.clear()
            while self._queue:
                seq, ready, result = self._queue[0]
                while ready.at is None:
                    time.sleep(0.0002)
                try:
                    self._conn.send((seq, ready.at))
                    result.resolve(self._conn.recv())
                except (EOFError, OSError):
                    return
                self._queue.popleft()


def coordinate(conns):
    """The parent's side of :class:`PipePeers`: for each collective, the latest ready time of all ranks."""
    try:
        while True:
            asked = [conn.recv() for conn in conns]
            seqs = {seq for seq, _ in asked}
            if len(seqs) != 1:
                raise RuntimeError("ranks disagree on the collective: %s" % sorted(seqs))
            latest = max(at for _, at in asked)
            for conn in conns:
                conn.send(latest)
    except (EOFError, OSError):
        return


class SimFuture:
    """``torch.futures.Future`` of a CUDA collective: completed at launch, CUDA-aware."""

    def __init__(self, sim, value, points):
        self._sim = sim
        self._value = value
        self._points = list(points)

    def done(self):
        return True

    def value(self):
        return self._value

    def wait(self):
        stream = self._sim.current_stream()
        for point in self._points:
            stream.wait_point(point)
        return self._value

    def then(self, callback):
        stream = self._sim.Stream()  # "dedicated streams ... synchronized with those kernels"
        for point in self._points:
            stream.wait_point(point)
        with self._sim.stream(stream):
            value = callback(self)
            done = stream.mark()
        return SimFuture(self._sim, value, [done])


class Work:
    """``torch.distributed.Work`` of a ProcessGroupNCCL collective."""

    def __init__(self, sim, end, outputs):
        self._sim = sim
        self._end = end
        self._future = SimFuture(sim, outputs, [end])

    def wait(self, timeout=None):
        self._sim.current_stream().wait_point(self._end)
        return True

    def is_completed(self):
        at = self._end.at
        return at is not None and self._sim.clock() >= at

    def get_future(self):
        return self._future


class ProcessGroupNCCL:
    def __init__(self, sim, rank, world_size, peers, bandwidth_bytes_per_ns):
        self.sim = sim
        self.rank_ = rank
        self.size_ = world_size
        self.peers = peers
        self.bandwidth = bandwidth_bytes_per_ns
        self.seq = itertools.count(1)
        self._streams = {}
        self.launched = []  # (name, bus bytes) of every collective, in order

    def rank(self):
        return self.rank_

    def size(self):
        return self.size_

    def collective(self, name, tensor, bus_bytes):
        sim = self.sim
        caller = sim.current_stream()
        device = caller.device_index
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = sim.Stream(device)
        ready = caller.mark()
        stream.wait_point(ready)  # syncStream: NCCL's stream waits for the caller's queued work
        last = self.peers.last_ready(next(self.seq), ready)
        stream.wait_point(last)
        end = stream.launch(int(bus_bytes / self.bandwidth) + 5_000, "nccl:" + name)
        self.launched.append((name, bus_bytes))
        return Work(sim, end, [tensor])


class DistModule(types.ModuleType):
    """``torch.distributed`` over :class:`ProcessGroupNCCL`, with distributed_c10d's signatures."""

    def __init__(self, sim, peers, bandwidth_bytes_per_ns):
        super().__init__("torch.distributed")
        self._sim = sim
        self._peers = peers
        self._bandwidth = bandwidth_bytes_per_ns
        self._world = None
        self.Work = Work
        self.group = types.SimpleNamespace(WORLD=None)
        self.ReduceOp = types.SimpleNamespace(SUM="sum", AVG="avg")

        # Bound here as module functions, with the parameter names of torch's.
        def all_reduce(tensor, op="sum", group=None, async_op=False):
            pg = self._pg(group)
            return self._run(pg.collective("all_reduce", tensor, _nbytes(tensor) * 2 * (pg.size() - 1) // pg.size()), async_op)

        def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
            pg = self._pg(group)
            return self._run(pg.collective("all_gather", output_tensor, _nbytes(output_tensor) * (pg.size() - 1) // pg.size()), async_op)

        def reduce_scatter_tensor(output, input, op="sum", group=None, async_op=False):
            pg = self._pg(group)
            return self._run(pg.collective("reduce_scatter", output, _nbytes(input) * (pg.size() - 1) // pg.size()), async_op)

        def broadcast(tensor, src, group=None, async_op=False):
            return self._run(self._pg(group).collective("broadcast", tensor, _nbytes(tensor)), async_op)

        def barrier(group=None, async_op=False, device_ids=None):
            return self._run(self._pg(group).collective("barrier", None, 0), async_op)

        for fn in (all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, barrier):
            setattr(self, fn.__name__, fn)

    def _run(self, work, async_op):
        if async_op:
            return work
        work.wait()
        return None

    def _pg(self, group):
        pg = group if group is not None else self._world
        if pg is None:
            raise RuntimeError("Default process group has not been initialized, please make sure to call init_process_group.")
        return pg

    def is_available(self):
        return True

    def is_initialized(self):
        return self._world is not None

    def init_process_group(self, backend="nccl", rank=0, world_size=1, **kwargs):
        self._world = ProcessGroupNCCL(self._sim, rank, world_size, self._peers, self._bandwidth)
        self.group.WORLD = self._world
        return self._world

    def destroy_process_group(self, group=None):
        self._world = None

    def get_rank(self, group=None):
        return self._pg(group).rank()

    def get_world_size(self, group=None):
        return self._pg(group).size()

    def get_backend(self, group=None):
        self._pg(group)
        return "nccl"


def _nbytes(tensor):
    return 0 if tensor is None else tensor.numel() * tensor.element_size()


class GradBucket:
    def __init__(self, index, buffer, last):
        self._index = index
        self._buffer = buffer
        self._last = last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def is_last(self):
        return self._last


class SimModel:
    """A model's shape as the GPU sees it: parameters (element counts) and the milliseconds its
    forward and backward kernels take per layer."""

    def __init__(self, layers, forward_ms, backward_ms):
        self.layers = list(layers)  # parameter elements per layer, first to last
        self.forward_ms = forward_ms
        self.backward_ms = backward_ms

    def param_bytes(self):
        return 4 * sum(self.layers)


def make_ddp_class(sim, dist, default_hooks):
    class DistributedDataParallel:
        """DDP's reducer as far as communication goes: buckets of gradients, in backward order."""

        def __init__(self, module, process_group=None, bucket_cap_mb=25, **kwargs):
            self.module = module
            self.process_group = process_group if process_group is not None else dist._pg(None)
            self._hook = None
            self.buckets = []  # [[layer indices]], in the order backward produces them
            cap = bucket_cap_mb * 1024 * 1024
            bucket, size = [], 0
            for index in reversed(range(len(module.layers))):
                bucket.append(index)
                size += 4 * module.layers[index]
                if size >= cap:
                    self.buckets.append(bucket)
                    bucket, size = [], 0
            if bucket:
                self.buckets.append(bucket)

        def register_comm_hook(self, state, hook):
            self._check_comm_hook(hook)
            if self._hook is not None:
                raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
            self._hook = (state, hook)

        def _check_comm_hook(self, hook):
            if not callable(hook):
                raise TypeError("Communication hook must be callable.")

        def forward(self):
            sim.kernel(self.module.forward_ms, name="forward")

        def backward(self):
            layers = self.module.layers
            per_layer = self.module.backward_ms / max(1, len(layers))
            futures = []
            for index, bucket in enumerate(self.buckets):
                sim.kernel(per_layer * len(bucket), name="backward")
                buffer = SimTensor(sum(layers[i] for i in bucket))
                grad_bucket = GradBucket(index, buffer, index == len(self.buckets) - 1)
                if self._hook is None:  # the C++ built-in all-reduce
                    pg = self.process_group
                    futures.append(pg.collective("all_reduce", buffer, _nbytes(buffer) * 2 * (pg.size() - 1) // pg.size()).get_future())
                else:
                    state, hook = self._hook
                    futures.append(hook(state, grad_bucket))
            for future in futures:  # finalize_backward: the stream waits for every bucket
                future.wait()

    return DistributedDataParallel


def _default_hooks(dist):
    module = types.ModuleType("torch.distributed.algorithms.ddp_comm_hooks.default_hooks")

    def _allreduce_fut(process_group, tensor):
        group_to_use = process_group if process_group is not None else dist.group.WORLD
        tensor.div_(group_to_use.size())
        return dist.all_reduce(tensor, group=group_to_use, async_op=True).get_future().then(lambda fut: fut.value()[0])

    def allreduce_hook(process_group, bucket):
        return _allreduce_fut(process_group, bucket.buffer())

    def fp16_compress_hook(process_group, bucket):
        return _allreduce_fut(process_group, bucket.buffer())

    module._allreduce_fut = _allreduce_fut
    module.allreduce_hook = allreduce_hook
    module.fp16_compress_hook = fp16_compress_hook
    return module


def install(sim=None, peers=None, bandwidth_gbps=100.0):
    """Put a stand-in torch on ``sim`` (a SimCuda, real time by default) in ``sys.modules`` until the
    returned context exits; its ``torch.sim`` and ``torch.distributed`` drive it."""
    sim = sim or SimCuda()
    dist = DistModule(sim, peers or ScriptedPeers(), bandwidth_gbps)  # GB/s is bytes per ns
    torch = types.ModuleType("torch")
    torch.__version__ = "2.6.0+simulated"
    torch.version = types.SimpleNamespace(cuda="12.4")
    torch.cuda = sim.namespace()
    torch.sim = sim
    torch.distributed = dist
    algorithms = types.ModuleType("torch.distributed.algorithms")
    ddp_comm_hooks = types.ModuleType("torch.distributed.algorithms.ddp_comm_hooks")
    default_hooks = _default_hooks(dist)
    ddp_comm_hooks.default_hooks = default_hooks
    algorithms.ddp_comm_hooks = ddp_comm_hooks
    dist.algorithms = algorithms
    dist.distributed_c10d = dist
    nn = types.ModuleType("torch.nn")
    parallel = types.ModuleType("torch.nn.parallel")
    parallel.DistributedDataParallel = make_ddp_class(sim, dist, default_hooks)
    nn.parallel = parallel
    torch.nn = nn
    modules = {
        "torch": torch,
        "torch.cuda": torch.cuda,
        "torch.distributed": dist,
        "torch.distributed.distributed_c10d": dist,
        "torch.distributed.algorithms": algorithms,
        "torch.distributed.algorithms.ddp_comm_hooks": ddp_comm_hooks,
        "torch.distributed.algorithms.ddp_comm_hooks.default_hooks": default_hooks,
        "torch.nn": nn,
        "torch.nn.parallel": parallel,
    }
    patcher = mock.patch.dict(sys.modules, modules)
    patcher.torch = torch
    return patcher
