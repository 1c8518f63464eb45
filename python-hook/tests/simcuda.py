"""A simulated CUDA device for tests on machines without a GPU: ``torch.cuda``'s events, streams and
devices with the semantics of the real API, over a device timeline the test controls.

The hook is run against it unchanged: it reads ``torch.cuda`` from ``sys.modules["torch"]``, and
:meth:`SimCuda.patch` puts this layer there (on a real torch, for the zero-code path and the callbacks)
or :mod:`tests.simnccl` builds a whole stand-in ``torch`` around it (for NCCL, which needs GPUs).

The model: each stream is a queue whose work ends at its **tail**, a point on the device's timeline.
Work launched on a stream (:meth:`SimStream.launch`) starts when the stream has finished what was
queued before it, or now if it is idle, and ends ``duration`` later; the host does not wait for it.
A point may be unknown yet (an NCCL collective waiting for the other ranks): what follows it on the
stream is unknown too until it is resolved. The device clock is ``time.perf_counter_ns`` (real time:
the host runs ahead of the device until it synchronizes, as with a real GPU) or one the test moves
by hand. What follows is the real API's behaviour, with where it is defined:

- ``torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False)``; the CUDA event is
  created at its first ``record()``, on the recording stream's device (ATen ``CUDAEvent::record``:
  "Event device ... does not match recording stream's device ..." for a later record elsewhere).
- ``record(stream=None)`` records on the current stream (torch/cuda/streams.py ``Event.record``); the
  event captures the work queued on that stream and completes once it has (``cudaEventRecord``).
- ``query()`` is True for an event never recorded (``CUDAEvent::query``: ``if (!is_created_) return
  true``), else whether its work completed (``cudaEventQuery``: ``cudaSuccess`` / ``cudaErrorNotReady``).
- ``elapsed_time(end)`` in milliseconds; ``ValueError`` unless both were made with ``enable_timing=True``
  ("Both events must be created with argument 'enable_timing=True'.") and both were recorded ("Both
  events must be recorded before calculating elapsed time."), ``RuntimeError`` unless both completed
  ("Both events must be completed before calculating elapsed time."): ``CUDAEvent::elapsed_time``.
- ``wait(stream=None)``: the stream waits for the event, the host does not (``cudaStreamWaitEvent``).
- ``synchronize()`` of an event, a stream or the device blocks the host; each call is counted in
  :attr:`SimCuda.host_syncs` (the hook must never make one).
- The current stream and the current device are per host thread (``cudaSetDevice``; a new thread
  starts on device 0 and each device's default stream).
"""

from __future__ import annotations

import contextlib
import threading
import time
import types

__all__ = ["SimCuda", "Point", "ManualClock", "SimTensor"]

_SYNC_TIMEOUT_S = 30.0


class ManualClock:
    """A device clock the test moves: ``advance(ns)`` or ``now = ...``."""

    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, ns):
        self.now += ns


class Point:
    """A moment on the device timeline: ``at`` in ns, or None while it waits for something unknown.

    ``Point(at=t)`` is known; ``Point(after=[...], plus=d)`` is ``d`` after the latest of its
    predecessors (ints or Points); ``Point()`` is unknown until :meth:`resolve` (a collective's end).
    """

    __slots__ = ("_at", "_after", "_plus")

    def __init__(self, at=None, after=(), plus=0):
        self._at = at
        self._after = tuple(after)
        self._plus = plus

    @property
    def at(self):
        if self._at is None and self._after:
            latest = 0
            for one in self._after:
                value = one if isinstance(one, int) else one.at
                if value is None:
                    return None
                latest = max(latest, value)
            self._at = latest + self._plus
            self._after = ()
        return self._at

    def resolve(self, at):
        self._at = int(at)
        self._after = ()


class SimStream:
    """A CUDA stream of the simulated device (``torch.cuda.Stream``'s calls the hook and tests make)."""

    def __init__(self, sim, device, name):
        self.sim = sim
        self.device = types.SimpleNamespace(type="cuda", index=device)
        self.device_index = device
        self.name = name
        self.tail = Point(at=0)

    def __repr__(self):
        return "<SimStream %s on cuda:%d>" % (self.name, self.device_index)

    # what a recorded event captures, and queueing
    def mark(self):
        """The point at which work queued so far is done (an event recorded now completes there)."""
        now = self.sim.clock()
        tail = self.tail.at
        if tail is not None:
            return Point(at=max(tail, now))
        return Point(after=(self.tail, now))

    def launch(self, duration_ns, name="kernel"):
        """Queue ``duration_ns`` of work (a kernel, a copy); returns the point where it ends."""
        self.tail = end = Point(after=(self.mark(),), plus=int(duration_ns))
        self.sim.launched.append((name, self, int(duration_ns)))
        return end

    def wait_point(self, point):
        """Later work on this stream waits for ``point`` (cudaStreamWaitEvent); the host does not."""
        self.tail = Point(after=(self.tail, point))

    # torch.cuda.Stream's API
    def wait_event(self, event):
        event.wait(self)

    def wait_stream(self, stream):
        self.wait_point(stream.mark())

    def record_event(self, event=None):
        event = event or self.sim.Event()
        event.record(self)
        return event

    def query(self):
        at = self.tail.at
        return at is not None and self.sim.clock() >= at

    def synchronize(self):
        self.sim.host_syncs += 1
        self.sim.block_until(self.tail)


class SimEvent:
    """``torch.cuda.Event`` on the simulated device."""

    def __init__(self, sim, enable_timing=False, blocking=False, interprocess=False):
        self.sim = sim
        self.enable_timing = bool(enable_timing)
        self.device = None  # set at the first record, as the CUDA event is created then
        self.point = None
        self.records = 0

    def record(self, stream=None):
        stream = stream if stream is not None else self.sim.current_stream()
        if self.device is None:
            self.device = stream.device_index
        elif self.device != stream.device_index:
            raise RuntimeError("Event device %d does not match recording stream's device %d." % (self.device, stream.device_index))
        self.point = stream.mark()
        self.records += 1
        self.sim.recorded.append(self)

    def query(self):
        if self.point is None:
            return True
        at = self.point.at
        return at is not None and self.sim.clock() >= at

    def elapsed_time(self, end):
        if not (self.enable_timing and end.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self.point is None or end.point is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end.point.at - self.point.at) / 1e6

    def wait(self, stream=None):
        if self.point is None:
            return
        stream = stream if stream is not None else self.sim.current_stream()
        stream.wait_point(self.point)

    def synchronize(self):
        self.sim.host_syncs += 1
        if self.point is not None:
            self.sim.block_until(self.point)


class SimCuda:
    """One simulated machine of ``devices`` GPUs; ``torch.cuda``'s functions are its methods.

    clock       device timeline in ns: ``time.perf_counter_ns`` (default: real time) or a :class:`ManualClock`
    initialized whether CUDA is already in use (``torch.cuda.is_initialized()``); :meth:`init` sets it
    """

    def __init__(self, devices=1, clock=None, initialized=True, name="NVIDIA H100 80GB HBM3"):
        self.clock = clock or time.perf_counter_ns
        self.realtime = clock is None
        self.devices = devices
        self.initialized = initialized
        self.name = name
        self.host_syncs = 0  # synchronize() calls through the torch.cuda API (the hook must make none)
        self.recorded = []  # every event record, in order
        self.launched = []  # (name, stream, duration) of all work queued
        self._local = threading.local()
        self._defaults = [SimStream(self, d, "default") for d in range(devices)]
        self._streams = 0
        self.Event = lambda enable_timing=False, blocking=False, interprocess=False: SimEvent(self, enable_timing, blocking, interprocess)

    # --- torch.cuda ------------------------------------------------------------
    def is_available(self):
        return True

    def is_initialized(self):
        return self.initialized

    def init(self):
        self.initialized = True

    def device_count(self):
        return self.devices

    def current_device(self):
        return getattr(self._local, "device", 0)

    def set_device(self, device):
        index = device if isinstance(device, int) else getattr(device, "index", 0) or 0
        if not 0 <= index < self.devices:
            raise RuntimeError("CUDA error: invalid device ordinal")
        self._local.device = index

    def get_device_name(self, device=None):
        return self.name

    def get_device_properties(self, device=None):
        index = self.current_device() if device is None else int(getattr(device, "index", device) or 0)
        return types.SimpleNamespace(
            name=self.name, total_memory=85_520_809_984, major=9, minor=0, multi_processor_count=132, uuid="GPU-5e1b6a3c-0d2f-4c71-9b8e-%012x" % index
        )

    def default_stream(self, device=None):
        return self._defaults[self._index(device)]

    def current_stream(self, device=None):
        index = self._index(device)
        streams = getattr(self._local, "streams", None)
        if streams is None:
            streams = self._local.streams = {}
        return streams.get(index) or self._defaults[index]

    def Stream(self, device=None, priority=0):
        self._streams += 1
        return SimStream(self, self._index(device), "stream%d" % self._streams)

    def set_stream(self, stream):
        if not hasattr(self._local, "streams"):
            self._local.streams = {}
        self._local.streams[stream.device_index] = stream

    @contextlib.contextmanager
    def stream(self, stream):
        if stream is None:
            yield
            return
        previous = self.current_stream(stream.device_index)
        self.set_stream(stream)
        try:
            yield
        finally:
            self.set_stream(previous)

    def synchronize(self, device=None):
        self.host_syncs += 1
        self.block_until(Point(after=tuple(s.tail for s in self._defaults)))

    # --- what a test drives ------------------------------------------------------
    def kernel(self, ms, stream=None, name="kernel"):
        """Queue ``ms`` milliseconds of GPU work on the current stream (a model's forward and backward)."""
        return (stream or self.current_stream()).launch(int(ms * 1e6), name)

    def item(self, stream=None):
        """What ``loss.item()`` does: the host waits for the stream's queued work (not counted as a hook sync)."""
        self.block_until((stream or self.current_stream()).tail)

    def block_until(self, point):
        if not self.realtime:
            at = point.at
            if at is None or self.clock() < at:
                raise RuntimeError("simulated GPU: a host wait on a manual clock would block for ever")
            return
        deadline = time.monotonic() + _SYNC_TIMEOUT_S
        while True:
            at = point.at
            now = self.clock()
            if at is not None and now >= at:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("simulated GPU: work never completed")
            time.sleep(0.0005 if at is None else max(0.0, min((at - now) / 1e9, 0.05)))

    def namespace(self):
        """A ``torch.cuda``-like module of this layer (for a stand-in ``torch``)."""
        cuda = types.ModuleType("torch.cuda")
        for name in _CUDA_NAMES:
            setattr(cuda, name, getattr(self, name))
        cuda.Event = self.Event
        cuda.sim = self
        return cuda

    def patch(self, torch):
        """Put this layer in a real torch's ``torch.cuda`` (and CPU tensors' ``.to("cuda")``/``.cuda()``)
        until the returned context exits."""
        stack = contextlib.ExitStack()
        from unittest import mock

        for name in _CUDA_NAMES:
            stack.enter_context(mock.patch.object(torch.cuda, name, getattr(self, name)))
        stack.enter_context(mock.patch.object(torch.cuda, "Event", self.Event))
        tensor = torch.Tensor
        stack.enter_context(mock.patch.object(tensor, "to", _sim_to(self, tensor.to, torch)))
        stack.enter_context(mock.patch.object(tensor, "cuda", _sim_cuda(self)))
        return stack

    def _index(self, device):
        if device is None:
            return self.current_device()
        return int(device if isinstance(device, int) else getattr(device, "index", None) or 0)


_CUDA_NAMES = (
    "is_available",
    "is_initialized",
    "init",
    "device_count",
    "current_device",
    "set_device",
    "get_device_name",
    "get_device_properties",
    "default_stream",
    "current_stream",
    "Stream",
    "set_stream",
    "stream",
    "synchronize",
)

# Host-to-device bandwidth of the simulated copies: PCIe 4.0 x16 from pinned memory, about 25 GB/s.
H2D_BYTES_PER_NS = 25.0


class SimTensor:
    """Where a stand-in torch needs a tensor (NCCL buffers): its size and device, nothing computed."""

    def __init__(self, numel, element_size=4, cuda=True):
        self._numel = int(numel)
        self._element_size = int(element_size)
        self.is_cuda = bool(cuda)
        self.divided_by = 1

    def numel(self):
        return self._numel

    def element_size(self):
        return self._element_size

    def div_(self, value):
        self.divided_by *= value
        return self


def _is_cuda_target(args, kwargs):
    target = kwargs.get("device", args[0] if args else None)
    if isinstance(target, str):
        return target.startswith("cuda")
    return getattr(target, "type", None) == "cuda"


def _non_blocking(args, kwargs):
    # to(device, dtype, non_blocking) or to(device, non_blocking): True in the second or third place
    return bool(kwargs.get("non_blocking") or any(arg is True for arg in args[1:3]))


def _sim_cuda_class(torch):
    cls = getattr(torch, "_stepscope_sim_cuda_tensor", None)
    if cls is None:

        class SimCudaTensor(torch.Tensor):
            """A CPU tensor the simulated device holds: ``is_cuda`` is True, the arithmetic stays on the CPU."""

            @property
            def is_cuda(self):
                return True

        cls = SimCudaTensor
        torch._stepscope_sim_cuda_tensor = cls
    return cls


def _copy_to_device(sim, tensor, non_blocking, torch):
    """A host-to-device copy: queued on the current stream; a blocking one waits for it."""
    nbytes = tensor.numel() * tensor.element_size()
    end = sim.current_stream().launch(int(nbytes / H2D_BYTES_PER_NS) + 2_000, "h2d")
    if not non_blocking:
        sim.block_until(end)
    return tensor.as_subclass(_sim_cuda_class(torch))


def _sim_to(sim, original, torch):
    def to(self, *args, **kwargs):
        if not _is_cuda_target(args, kwargs) or self.is_cuda:
            return original(self, *args, **kwargs)
        return _copy_to_device(sim, self, _non_blocking(args, kwargs), torch)

    return to


def _sim_cuda(sim):
    def cuda(self, device=None, non_blocking=False, **kwargs):
        if self.is_cuda:
            return self
        import torch

        return _copy_to_device(sim, self, non_blocking, torch)

    return cuda
