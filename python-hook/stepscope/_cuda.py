"""GPU-side phase timing with CUDA events, resolved off the training thread.

The training thread only records events (``event.record()``, asynchronous) taken from a
pool; the background thread later polls them with ``event.query()`` and reads
``start.elapsed_time(end)``. Nothing here ever calls ``synchronize()``.

The event class is injected, so the logic is testable with fake events.
"""

from __future__ import annotations

import collections
import time

__all__ = ["GpuTimer", "GpuStep", "H2D", "COMPUTE", "torch_timer"]

H2D = 0
COMPUTE = 1

_NS_PER_MS = 1_000_000


class GpuStep:
    """The GPU marks of one step; ``done`` once resolved (durations stay None if unknown)."""

    __slots__ = ("seq", "marks", "done", "h2d_ns", "compute_ns", "idle_ns", "first_seen")

    def __init__(self, seq: int, marks: list):
        self.seq = seq
        self.marks = marks
        self.done = False
        self.h2d_ns = None
        self.compute_ns = None
        self.idle_ns = None
        self.first_seen = None


class GpuTimer:
    """A pool of reusable events plus the in-order resolver of the steps that used them.

    Training thread: :meth:`take`, :meth:`mark`, :meth:`end_step`.
    Background thread: :meth:`resolve`.
    The two share only deques, whose append/popleft are atomic.
    """

    def __init__(self, event_factory, *, pairs: int = 256, timeout_s: float = 10.0, bind_thread=None, clock=None):
        self._factory = event_factory
        self._capacity = 2 * max(1, pairs)
        self._created = 0
        self._free = collections.deque()
        self._marks = []
        self._inflight = collections.deque()
        self._timeout_ns = int(timeout_s * 1e9)
        self._bind_thread = bind_thread
        self._clock = clock or time.monotonic_ns
        self._prev_seq = None
        self._prev_end = None
        self.exhausted = 0
        self.timeouts = 0
        self.errors = 0

    # --- training thread ---------------------------------------------------

    def take(self):
        """A free event, or None when the pool is exhausted (never blocks)."""
        try:
            return self._free.popleft()
        except IndexError:
            pass
        if self._created < self._capacity:
            self._created += 1
            return self._factory()
        self.exhausted += 1
        return None

    def mark(self, kind: int, start, end) -> None:
        """A phase of ``kind`` ran between the recorded events ``start`` and ``end`` (None if none)."""
        self._marks.append((kind, start, end))

    def end_step(self, seq: int):
        """Close the marks of the step recorded as ``seq``; None if it had no GPU phase."""
        marks = self._marks
        if not marks:
            return None
        self._marks = []
        gpu_step = GpuStep(seq, marks)
        self._inflight.append(gpu_step)
        return gpu_step

    # --- background thread -------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._inflight)

    def resolve(self, give_up: bool = False) -> int:
        """Resolve finished steps in order; return how many were resolved.

        A step whose events are still pending blocks the ones behind it (the idle gap needs
        the previous step), until it has waited ``timeout_s``; it then resolves without GPU
        times. ``give_up`` (at close) resolves every pending step that way at once.
        """
        if self._bind_thread is not None:
            bind, self._bind_thread = self._bind_thread, None
            try:
                bind()
            except Exception:
                self.errors += 1
        inflight = self._inflight
        resolved = 0
        now = None
        while inflight:
            gpu_step = inflight[0]
            state = self._state(gpu_step.marks)
            if state is None:
                if now is None:
                    now = self._clock()
                if gpu_step.first_seen is None:
                    gpu_step.first_seen = now
                if not give_up and now - gpu_step.first_seen < self._timeout_ns:
                    break
                self.timeouts += 1
                state = False
            if state:
                self._measure(gpu_step)
            else:
                self._forget(gpu_step)
            inflight.popleft()
            gpu_step.done = True
            resolved += 1
        return resolved

    def _state(self, marks):
        """True: all events completed; False: unusable (pool ran dry); None: still pending."""
        for _, start, end in marks:
            if start is None or end is None:
                return False
        try:
            for _, start, end in reversed(marks):
                if not end.query() or not start.query():
                    return None
        except Exception:
            self.errors += 1
            return False
        return True

    def _measure(self, gpu_step: GpuStep) -> None:
        marks = gpu_step.marks
        durations = [0, 0]
        idle = None
        try:
            for kind, start, end in marks:
                durations[kind] += _ns(start.elapsed_time(end))
            if self._prev_end is not None and self._prev_seq == gpu_step.seq - 1:
                idle = _ns(self._prev_end.elapsed_time(marks[0][1]))
        except Exception:
            self.errors += 1
            self._forget(gpu_step)
            return
        gpu_step.h2d_ns = durations[H2D] if any(kind == H2D for kind, _, _ in marks) else None
        gpu_step.compute_ns = durations[COMPUTE] if any(kind == COMPUTE for kind, _, _ in marks) else None
        gpu_step.idle_ns = idle
        # Keep this step's last end event out of the pool: the next step's idle gap starts there.
        last_end = marks[-1][2]
        self._release_prev()
        self._prev_end = last_end
        self._prev_seq = gpu_step.seq
        free = self._free
        for _, start, end in marks:
            free.append(start)
            if end is not last_end:
                free.append(end)
        gpu_step.marks = None

    def _forget(self, gpu_step: GpuStep) -> None:
        self._release_prev()
        free = self._free
        for _, start, end in gpu_step.marks:
            # Re-recording an event that is still pending is allowed; nobody reads these again.
            if start is not None:
                free.append(start)
            if end is not None:
                free.append(end)
        gpu_step.marks = None

    def _release_prev(self) -> None:
        if self._prev_end is not None:
            self._free.append(self._prev_end)
        self._prev_end = None
        self._prev_seq = None


def _ns(milliseconds: float) -> int:
    return max(0, int(round(milliseconds * _NS_PER_MS)))


def torch_timer(torch, **kwargs) -> GpuTimer:
    """A GpuTimer for the current CUDA device of the calling (training) thread."""
    device = torch.cuda.current_device()
    Event = torch.cuda.Event

    def make_event():
        return Event(enable_timing=True)

    def bind_thread():
        # A fresh thread's current device is 0; querying from there could create a CUDA
        # context on GPU 0 in every rank.
        torch.cuda.set_device(device)

    return GpuTimer(make_event, bind_thread=bind_thread, **kwargs)
