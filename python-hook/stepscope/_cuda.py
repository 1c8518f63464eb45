"""GPU-side phase timing with CUDA events, resolved off the training thread.

The training thread only records events (``event.record()``, asynchronous) taken from a
pool; the background thread later polls them with ``event.query()`` and reads
``start.elapsed_time(end)``. Nothing here ever calls ``synchronize()``.

Three ways in record the same marks: the explicit API's phases (``_scope._Phase``), and the
zero-code path and the framework callbacks through a :class:`Marker` (a compute span from a
batch's arrival to its step's end, with the non-blocking copies inside it timed apart).

The event class is injected, so the logic is testable with a simulated device (tests/simcuda.py).
"""

from __future__ import annotations

import collections
import time

from . import _log

__all__ = ["GpuTimer", "GpuStep", "EventPool", "Marker", "UNTIMED_MODES", "H2D", "COMPUTE", "H2D_IN", "torch_timer", "torch_event_factory"]

H2D = 0
COMPUTE = 1
# A copy inside a compute span (the zero-code path's): GPU h2d time, taken out of that span's compute.
H2D_IN = 2

_NS_PER_MS = 1_000_000


class EventPool:
    """Reusable timing events, made on demand up to ``capacity``; never blocks.

    ``take`` and ``give`` may run on any thread (deque operations are atomic).
    """

    def __init__(self, factory, capacity):
        self._factory = factory
        self._capacity = max(1, capacity)
        self._created = 0
        self._free = collections.deque()
        self.exhausted = 0

    def take(self):
        """A free event, or None when the pool is exhausted."""
        try:
            return self._free.popleft()
        except IndexError:
            pass
        if self._created < self._capacity:
            self._created += 1
            return self._factory()
        self.exhausted += 1
        return None

    def give(self, event) -> None:
        # Re-recording an event that is still pending is allowed: nobody reads the old one again.
        if event is not None:
            self._free.append(event)


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
        self.pool = EventPool(event_factory, 2 * max(1, pairs))
        self._free = self.pool._free
        self._marks = []
        self._inflight = collections.deque()
        self._timeout_ns = int(timeout_s * 1e9)
        self._bind_thread = bind_thread
        self._clock = clock or time.monotonic_ns
        self._prev_seq = None
        self._prev_end = None
        self.timeouts = 0
        self.errors = 0
        self.on = True  # False once the scope stopped reading events: record and mark do nothing

    @property
    def exhausted(self) -> int:
        return self.pool.exhausted

    # --- training thread ---------------------------------------------------

    def take(self):
        """A free event, or None when the pool is exhausted (never blocks)."""
        return self.pool.take()

    def record(self):
        """A just-recorded event from the pool; None if the pool is empty, CUDA failed or timing is off."""
        if not self.on:
            return None
        try:
            event = self.pool.take()
            if event is not None:
                event.record()
            return event
        except Exception as exc:
            self.errors += 1
            _log.warn_once(
                _log.INTERNAL + ":cuda-event",
                "a CUDA event could not be recorded (%s: %s); GPU times are missing where that happens (training continues)"
                % (type(exc).__name__, str(exc)[:200]),
            )
            return None

    def mark(self, kind: int, start, end) -> None:
        """A phase of ``kind`` ran between the recorded events ``start`` and ``end`` (None if none)."""
        if self.on:
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
        durations = [0, 0, 0]
        idle = None
        try:
            for kind, start, end in marks:
                durations[kind] += start.elapsed_time(end)
            # Marks are kept in the order they closed; a span closes after the copies inside it, so
            # the step's first start and last end are found on the device's own timeline.
            origin = marks[0][1]
            first = min(marks, key=lambda mark: origin.elapsed_time(mark[1]))[1]
            last_end = max(marks, key=lambda mark: origin.elapsed_time(mark[2]))[2]
            if self._prev_end is not None and self._prev_seq == gpu_step.seq - 1:
                idle = _ns(self._prev_end.elapsed_time(first))
        except Exception:
            self.errors += 1
            self._forget(gpu_step)
            return
        kinds = {kind for kind, _, _ in marks}
        copies = durations[H2D] + durations[H2D_IN]
        gpu_step.h2d_ns = _ns(copies) if kinds & {H2D, H2D_IN} else None
        gpu_step.compute_ns = _ns(durations[COMPUTE] - durations[H2D_IN]) if COMPUTE in kinds else None
        gpu_step.idle_ns = idle
        # Keep this step's last end event out of the pool: the next step's idle gap starts there.
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


def torch_event_factory(torch):
    """Makes timing events of this torch (``torch.cuda.Event(enable_timing=True)``)."""
    Event = torch.cuda.Event

    def make_event():
        return Event(enable_timing=True)

    return make_event


def torch_timer(torch, **kwargs) -> GpuTimer:
    """A GpuTimer for the current CUDA device of the calling (training) thread."""
    device = torch.cuda.current_device()

    def bind_thread():
        # A fresh thread's current device is 0; querying from there could create a CUDA
        # context on GPU 0 in every rank.
        torch.cuda.set_device(device)

    return GpuTimer(torch_event_factory(torch), bind_thread=bind_thread, **kwargs)


# The scope's GPU modes (``Scope._gpu_mode``) in which a Marker without a timer records nothing and
# has nothing to decide: callers on the hot path skip its calls then (each is a Python frame).
UNTIMED_MODES = ("off", "waiting")


class Marker:
    """GPU marks of the ways in that see no phases, only moments: the zero-code path and the callbacks.

    A compute span opens when a batch arrives (:meth:`open`) and ends where its GPU work was queued
    last: its optimizer step (:meth:`close_now`, again for each optimizer stepped on the same batch),
    else its backward pass (:meth:`close_if_open`: an event recorded later, on an idle GPU, would count
    the idle time as compute); :meth:`flush` hands it to the timer before the step is ended. Copies to the GPU inside an open span (:meth:`copy_begin`,
    :meth:`copy_end`) are h2d and are taken out of the span's compute. Training thread only; each call
    is an attribute check while the scope has no GPU timing, and one ``event.record()`` when it has.
    """

    __slots__ = ("scope", "timer", "start", "end")

    def __init__(self, scope):
        self.scope = scope
        self.timer = None
        self.start = None
        self.end = None

    def ready(self):
        """The scope's GpuTimer once CUDA timing is on (decided the first time CUDA is seen in use)."""
        timer = self.timer
        if timer is None:
            timer = self.timer = self.scope._gpu_for_marks()
        return timer

    def open(self):
        timer = self.timer or self.ready()
        if timer is None:
            return
        self.discard()
        self.start = timer.record()

    def close_now(self):
        timer = self.timer
        if timer is None or self.start is None:
            return
        end = timer.record()
        if self.end is not None:
            timer.pool.give(self.end)  # a later end of the same span (another optimizer stepped)
        self.end = end

    def close_if_open(self):
        """End the span here unless an end was already recorded (a backward pass, then the next batch)."""
        if self.end is None:
            self.close_now()

    def flush(self):
        """The step ends: its span, if closed, goes to the timer; an unclosed one is dropped."""
        timer = self.timer
        if timer is None or self.start is None:
            return
        if self.end is None:
            self.discard()
            return
        timer.mark(COMPUTE, self.start, self.end)
        self.start = self.end = None

    def discard(self):
        timer = self.timer
        if timer is not None:
            timer.pool.give(self.start)
            timer.pool.give(self.end)
        self.start = self.end = None

    def copy_begin(self):
        timer = self.timer or self.ready()
        return None if timer is None else timer.record()

    def cancel(self, begun):
        """A copy begun with :meth:`copy_begin` turned out not to be one to the GPU."""
        if self.timer is not None:
            self.timer.pool.give(begun)

    def copy_end(self, begun):
        timer = self.timer
        if timer is None or begun is None:
            return
        inside = self.start is not None and self.end is None
        timer.mark(H2D_IN if inside else H2D, begun, timer.record())
