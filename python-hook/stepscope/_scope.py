"""The Scope: step and phase timing on the training thread.

Everything here runs on the training thread and is kept to a few attribute updates: a
step ends by appending one tuple to a bounded deque that the sender thread drains.
"""

from __future__ import annotations

import collections
import itertools
import sys
import threading
import time

from . import _counters, _cuda, _env, _flops, _log, _stack
from ._sender import Sender

__all__ = ["Scope", "PHASES", "CloseResult"]

PHASES = ("data", "h2d", "compute", "eval")
_WAKE_AT = 1024  # queued records that wake the sender before its timer does (a 16th of the default queue)
# ... or the first, while the sender waits for a slow job's next step (stepscope._sender.Pace).

_now = time.perf_counter_ns
_PROVISIONAL = 1  # Scope._pending: see Scope.__init__
_HELD = 2
_scope_ids = itertools.count(1)


class CloseResult:
    """What closing a scope achieved (``scope.close_result``); true only if the sidecar acknowledged
    every record and the end, which is what ``scope.close()`` returns.

    records      step records this scope measured
    delivered    records the sidecar acknowledged
    dropped      records the hook discarded because its bounded buffers were full (the oldest first)
    undelivered  records kept but never acknowledged: still buffered when close() gave up, or never
                 sent because sending was off (bad URL, token or hello refused)
    end_acked    the sidecar acknowledged the `end` message
    reason       why not everything was delivered, in words (None when it was)

    ``delivered + dropped + undelivered == records``. It compares equal to True or False as its
    truth value does.
    """

    __slots__ = ("records", "delivered", "dropped", "undelivered", "end_acked", "reason")

    def __init__(self, records=0, delivered=0, dropped=0, undelivered=0, end_acked=False, reason=None):
        self.records = records
        self.delivered = delivered
        self.dropped = dropped
        self.undelivered = undelivered
        self.end_acked = end_acked
        self.reason = reason

    @property
    def ok(self) -> bool:
        return bool(self.end_acked and not self.dropped and not self.undelivered)

    def __bool__(self) -> bool:
        return self.ok

    def __eq__(self, other):
        if isinstance(other, bool):
            return self.ok is other
        if isinstance(other, CloseResult):
            return self.as_dict() == other.as_dict()
        return NotImplemented

    def __ne__(self, other):
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self):
        return hash(self.ok)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self):
        return "CloseResult(%s)" % ", ".join("%s=%r" % item for item in self.as_dict().items())


class _Phase:
    """The context manager of one phase name; cached, so ``with scope.phase(...)`` allocates nothing.

    It adds wall-clock time to ``total``. A nested ``with`` of the same phase is timed as part of
    the outer one. With a GpuTimer attached (``time_on_gpu``: h2d and compute once CUDA is in use)
    it becomes a ``_TimedPhase``, which also records a CUDA event at enter and exit: the class is
    swapped rather than the timer checked, so a CPU-only ``with`` tests nothing it does not need.
    """

    __slots__ = ("total", "t0", "depth", "timer", "kind", "start_event", "scope")

    def __init__(self, scope, kind=None):
        self.scope = scope
        self.kind = kind
        self.total = 0
        self.t0 = 0
        self.depth = 0
        self.timer = None
        self.start_event = _UNTIMED

    def time_on_gpu(self, timer):
        """Attach a GpuTimer, or detach with None: enter and exit record CUDA events from now on, or stop."""
        self.timer = timer
        self.__class__ = _Phase if timer is None else _TimedPhase

    def __enter__(self):
        if self.depth:
            self.depth += 1
            return self
        self.depth = 1
        self.t0 = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.depth != 1:
            if self.depth > 1:
                self.depth -= 1
            return False
        self.depth = 0
        self.total += _now() - self.t0
        return False


class _TimedPhase(_Phase):
    """A phase with a GpuTimer attached (see ``_Phase.time_on_gpu``)."""

    __slots__ = ()

    # The plain phase's bookkeeping, with the CUDA events of the outermost enter and exit around it:
    # a call more than the plain phase, on a path that records events anyway.
    def __enter__(self):
        if not self.depth:
            self.start_event = self.timer.record()
        return _Phase.__enter__(self)

    def __exit__(self, exc_type, exc, tb):
        outermost = self.depth == 1
        _Phase.__exit__(self, exc_type, exc, tb)
        if not outermost:
            return False
        start = self.start_event
        timer = self.timer
        # Not timed where entered before GPU timing was switched on, or left after it was switched off
        # (``with`` calls the __exit__ of the class the phase had when it was entered).
        if start is not _UNTIMED and timer is not None:
            self.start_event = _UNTIMED
            # timer.record(): a just-recorded event from the pool; None if the pool is empty or CUDA failed.
            timer.mark(self.kind, start, timer.record() if start is not None else None)
        return False


_UNTIMED = object()  # start_event of a phase entered without GPU timing


class _NullPhase:
    """Returned for unknown phase names: their time stays in the step's "other"."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False


_NULL_PHASE = _NullPhase()


class _Loader:
    """What ``scope.loader(x)`` returns: iterates ``x`` through the scope, else behaves like ``x``."""

    __slots__ = ("_scope", "_iterable")

    def __init__(self, scope, iterable):
        self._scope = scope
        self._iterable = iterable

    def __iter__(self):
        return self._scope._iterate(iter(self._iterable))

    def __len__(self):
        return len(self._iterable)

    def __getattr__(self, name):
        if name in _Loader.__slots__:
            raise AttributeError(name)
        return getattr(self._iterable, name)


class Scope:
    """Per-process step timing; create it with :func:`stepscope.init`.

    Steps: a step starts at the first ``next()`` of ``scope.loader(...)`` (or at ``init``
    without it) and at the end of the previous step; ``step()`` ends it. A ``next()`` that
    follows a batch without ``step()`` ends that batch's step at the moment it is entered,
    and so does leaving the loop. Time blocked in the loader's ``next()`` is "data".

    Phases: ``with scope.phase(name)`` for "data", "h2d" and "compute"; other names are
    accepted and ignored (their time is "other"). Phases do not nest: a nested ``with`` of
    the same name is timed as part of the outer one, overlapping different names are both
    counted and then scaled down to fit in the step.

    No method raises into the caller, blocks on I/O, or synchronizes CUDA.
    """

    def __init__(
        self,
        connection=None,
        *,
        cuda=None,
        gpu_event_pairs: int = 256,
        buffer_size: int = 16384,
        exit_timeout: float = 2.0,
        disabled=None,
    ):
        """``connection``: keyword arguments of :class:`Sender` (url, identity, env, ...), or
        None for a scope that records but sends nothing (``disabled`` says why, for close())."""
        self._queue = collections.deque(maxlen=max(1, buffer_size))
        self._wake = threading.Event()
        self._wake_at = _WAKE_AT  # queued records at which step() wakes the sender (set by it)
        self._sender = None
        self._cuda = cuda
        self._gpu_event_pairs = gpu_event_pairs
        self._exit_timeout = exit_timeout
        self._seq = 0  # records so far; the step index of a record is its seq - 1
        self._start = _now()
        # What the loader's next next() must do first: _PROVISIONAL (the step start is init time
        # until the loader's first next()), _HELD (a batch's step that step() has not ended), or nothing.
        self._pending = _PROVISIONAL
        self._data = _Phase(self)
        self._h2d = _Phase(self, _cuda.H2D)
        self._compute = _Phase(self, _cuda.COMPUTE)
        # Evaluation inside the loop: its own cause of time outside the step's work. Sent only once
        # measured (the first phase("eval"), or the zero-code path), else None: not measured.
        self._eval = _Phase(self)
        self._eval_on = False
        # h2d/compute are added at their first lookup, which decides CUDA timing.
        self._phases = {"data": self._data}
        self._gpu = None
        self._gpu_mode = "undecided"
        self._gpu_env = {}
        self._loader_seen = False
        self._closed = False
        self._close_result = None
        self._errors = 0
        self._id = next(_scope_ids)
        self._disabled = disabled if connection is None else None
        self._on_close = None  # the zero-code path ends the step it holds back (stepscope._auto)
        self._stack_watcher = None  # the stack and compile groups, polled by the sender thread
        self._flops_from = None  # "user" or "flop_counter" once a step's FLOPs are known
        self._profiling = None  # a torch.profiler window the sidecar asked for (stepscope._profile)
        if connection is not None:
            self._stack_watcher = _stack.Watcher(connection.get("env") or {})
            self._sender = Sender(self._queue, self._wake, tick=self._background_tick, wake_on_first=self._wake_on_first, **connection)
            # The thread that makes the scope is the one that trains: a `capture` reads its stack,
            # and the process sampler its CPU and its wait for a CPU.
            self._sender.training_thread = threading.get_ident()
            native_id = getattr(threading, "get_native_id", None)
            if native_id is not None:
                _counters.set_training_thread(native_id())
            self._sender.on_profile = self._profile_request
            self._sender.start()

    # --- public API ----------------------------------------------------------

    def loader(self, iterable):
        """Wrap a data loader (any iterable); time blocked in its ``next()`` counts as data."""
        try:
            if not self._loader_seen and _env.looks_like_dataloader(iterable):
                self._loader_seen = True
                if self._sender is not None:
                    self._sender.add_env({"loader": _env.loader_fingerprint(iterable)})
        except Exception:
            self._internal_error()
        return _Loader(self, iterable)

    def phase(self, name):
        """Context manager timing a phase of the current step: "data", "h2d", "compute" or "eval"
        (evaluation inside the training loop: its time is told apart from the rest of "other")."""
        try:
            return self._phases[name]
        except Exception:
            return self._phase_slow(name)

    def step(self, samples=None, _at=None):
        """End the current step; ``samples`` (an int) is how many samples it processed."""
        # Every way in ends steps here (``_at``: when the step ended, else now); one call, not two,
        # as this is the hot path of every step: one tuple appended, its fields in _record's order.
        t = _now() if _at is None else _at
        try:
            self._pending = 0
            data = self._data
            h2d = self._h2d
            compute = self._compute
            evaluation = None
            if self._eval_on:  # else its total stays 0: nothing enters the eval phase before turning it on
                evaluation = self._eval.total
                self._eval.total = 0
            gpu = self._gpu
            seq = self._seq + 1
            self._seq = seq
            queue = self._queue
            queue.append(
                (
                    seq,  # SEQ
                    t,  # END_NS
                    t - self._start,  # DUR_NS
                    data.total,  # DATA_NS
                    h2d.total,  # H2D_NS
                    compute.total,  # COMPUTE_NS
                    samples,  # SAMPLES
                    None if gpu is None else gpu.end_step(seq),  # GPU
                    evaluation,  # EVAL_NS
                )
            )
            if gpu is not None:
                sender = self._sender
                if sender is not None and sender.disabled is not None:
                    self._gpu_off()  # sending stopped for good: nothing will read the events
            data.total = h2d.total = compute.total = 0
            self._start = t
            if self._profiling is not None:
                self._profile_step()
                # The profiler's start and stop (a device sync, an export on older torch) are not the next step's.
                self._start = _now()
            if len(queue) == self._wake_at:
                self._wake.set()
        except Exception:
            self._internal_error()

    def set_flops_per_step(self, flops) -> bool:
        """The FLOPs of one training step of this rank (forward, backward and optimizer), for MFU.
        Overrides a count by ``count_flops``; a value that is not a positive number up to 1e22 is
        refused with a warning (False)."""
        value = _flops.valid_flops(flops)
        if value is None:
            _log.warn_once("flops-value", "set_flops_per_step(%r) ignored: give the FLOPs of one step, a number above 0 and up to 1e22" % (flops,))
            return False
        self._send_flops(value, "user")
        return True

    def count_flops(self):
        """``with scope.count_flops():`` around one step's work counts its FLOPs once with
        torch.utils.flop_counter (that step runs slower); later uses, or after
        ``set_flops_per_step``, do nothing."""
        if self._flops_from is not None:
            return _flops.NULL
        self._flops_from = "counting"
        return _flops.Counter(self._counted, self._count_again)

    def _count_again(self):
        if self._flops_from == "counting":
            self._flops_from = None

    def _counted(self, flops):
        value = _flops.valid_flops(flops)
        if value is None:
            _log.warn_once("flops", "FLOPs not counted: the counter saw no floating-point work in the step (%r); MFU not measured" % (flops,))
        elif self._flops_from != "user":
            self._send_flops(value, "flop_counter")

    def _send_flops(self, value, source):
        self._flops_from = source
        if self._sender is not None:
            self._sender.add_env({"model": {"flops_per_step": value, "flops_from": source}})

    def stats(self) -> dict:
        """Delivery counters, for tests and diagnostics."""
        try:
            stats = self._sender.snapshot() if self._sender is not None else _idle_stats(self._disabled)
            stats["records"] = self._seq
            stats["warnings"] = _log.count()
            stats["errors"] += self._errors
            stats["closed"] = self._closed
            stats["gpu"] = self._gpu_mode == "on"
            gpu = self._gpu
            if gpu is not None:
                stats["gpu_pool_exhausted"] = gpu.exhausted
                stats["gpu_timeouts"] = gpu.timeouts
                stats["errors"] += gpu.errors
            return stats
        except Exception:
            self._internal_error()
            return {}

    def close(self, timeout: float = 5.0) -> bool:
        """Deliver what is buffered, send `end` and wait up to ``timeout`` s for its ack.

        Returns True only when the sidecar acknowledged every record and the end: False when
        any record was dropped or not delivered. :attr:`close_result` then says how many of
        each and why, and one line is printed when records were lost. Never raises; later
        calls return the first result.
        """
        return bool(self._close("close", timeout))

    @property
    def close_result(self):
        """The :class:`CloseResult` of the close (``close()``, ``init()`` again, or exit); None before."""
        return self._close_result

    # --- training-thread internals ----------------------------------------

    def _iterate(self, iterator):
        now = _now
        data = self._data
        next_item = iterator.__next__
        while True:
            t0 = now()
            pending = self._pending
            if pending:
                if pending == _HELD:
                    self.step(None, t0)
                else:
                    self._begin(t0)
            try:
                item = next_item()
            except StopIteration:
                data.total += now() - t0
                return
            data.total += now() - t0
            self._pending = _HELD
            try:
                yield item
            except GeneratorExit:
                # The loop was left (break, exception): that ends the batch's step.
                if self._pending == _HELD:
                    self.step(None, now())
                raise

    def _begin(self, t0):
        self._pending = 0
        self._start = t0
        self._data.total = self._h2d.total = self._compute.total = self._eval.total = 0

    def _profile_request(self, window):
        """Sender thread: the window starts at the training thread's next step end; or why not."""
        if self._profiling is not None:
            return "a capture is already being recorded"
        self._profiling = window
        return None

    def _profile_step(self):
        """Training thread, at a step end: start, count or stop the window (never raises)."""
        window = self._profiling
        try:
            done = window.step()
        except Exception as exc:
            window.fail(exc)
            done = True
        if done:
            self._profiling = None
            sender = self._sender
            if sender is not None:
                sender.profile_done(window)

    def _phase_slow(self, name):
        if type(name) is str and name == "eval":
            self._eval_on = True
            self._phases["eval"] = self._eval
            return self._eval
        try:
            gpu_phase = name in ("h2d", "compute")
        except Exception:
            gpu_phase = False
        if gpu_phase:
            try:
                mode = self._decide_gpu()
            except Exception:
                self._internal_error()
                mode = "off"
            phases = self._phases
            phases["h2d"] = self._h2d
            phases["compute"] = self._compute
            # Published last: the sender thread watches for "waiting" (see _background_tick).
            self._gpu_mode = mode
            return self._h2d if name == "h2d" else self._compute
        try:
            shown = repr(name)[:40]
        except Exception:
            shown = "of type %s" % type(name).__name__
        _log.warn_once(
            _log.USAGE, "unknown phase %s: its time is counted as 'other' (phases: %s)" % (shown, ", ".join(PHASES))
        )
        return _NULL_PHASE

    def _decide_gpu(self) -> str:
        """Turn CUDA event timing on for h2d/compute if torch has CUDA in use (training thread)."""
        mode = self._gpu_mode
        if mode not in ("undecided", "recheck"):
            return mode
        if self._disabled is not None:
            return "off"  # this scope sends nothing: nothing would read the events
        torch = sys.modules.get("torch")
        if torch is None:
            if self._cuda:
                _log.warn_once(_log.USAGE, "cuda=True but torch is not imported: timing phases on the CPU only")
            return "off"
        initialized = torch.cuda.is_initialized()
        if self._cuda is False or (not initialized and self._cuda is None):
            if initialized:
                self._add_gpu_env(torch)
            return "off" if initialized or self._cuda is False else "waiting"
        if not initialized and not torch.cuda.is_available():
            _log.warn_once(_log.USAGE, "cuda=True but CUDA is not available: timing phases on the CPU only")
            return "off"
        timer = _cuda.torch_timer(torch, pairs=self._gpu_event_pairs)
        self._add_gpu_env(torch)
        self._use_gpu_timer(timer)
        return "on"

    def _gpu_for_marks(self):
        """The GpuTimer for the marks of the zero-code path and the callbacks, decided as a phase
        lookup decides it; None while CUDA is not in use or timing is off (training thread)."""
        mode = self._gpu_mode
        if mode == "on":
            return self._gpu
        if mode not in ("undecided", "recheck"):
            return None
        try:
            mode = self._decide_gpu()
        except Exception:
            self._internal_error()
            mode = "off"
        if mode != "on":
            self._gpu_mode = mode
            return None
        return self._gpu

    def _gpu_off(self):
        gpu, self._gpu = self._gpu, None
        if gpu is not None:
            gpu.on = False  # the Markers that hold it record nothing more
        self._h2d.time_on_gpu(None)
        self._compute.time_on_gpu(None)
        self._gpu_mode = "off"

    def _use_gpu_timer(self, timer):
        self._gpu = timer
        if self._sender is not None:
            self._sender.gpu = timer
        self._h2d.time_on_gpu(timer)
        self._compute.time_on_gpu(timer)
        self._phases["h2d"] = self._h2d
        self._phases["compute"] = self._compute
        self._gpu_mode = "on"

    def _add_gpu_env(self, torch):
        env = _env.gpu_fingerprint(torch)
        if env and env != self._gpu_env:
            self._gpu_env = env
            if self._sender is not None:
                self._sender.add_env(env)

    def _internal_error(self):
        self._errors += 1
        _log.warn_once(_log.INTERNAL, "internal error (training continues; timing may be incomplete)")

    # --- other threads ----------------------------------------------------

    def _wake_on_first(self, on: bool) -> None:
        """The sender's: whether step() wakes it at the first record queued (it waits for a slow
        job's next step) or at _WAKE_AT."""
        self._wake_at = 1 if on else _WAKE_AT

    def _background_tick(self):
        """Sender thread: notice CUDA coming into use after the first h2d/compute lookup; send the
        stack and compile groups when they change (at most once per _stack.INTERVAL_S)."""
        self._poll_stack(False)
        if self._gpu_mode == "waiting":
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                self._gpu_mode = "recheck"
                self._phases.pop("h2d", None)
                self._phases.pop("compute", None)

    def _poll_stack(self, force: bool) -> None:
        watcher = self._stack_watcher
        if watcher is None or self._sender is None:
            return
        try:
            update = watcher.poll(time.monotonic(), self._seq, force)
        except Exception:
            update = None
        if update:
            self._sender.add_env(update)

    def _close(self, reason: str, timeout: float) -> CloseResult:
        try:
            if self._closed:
                result = self._close_result
                return result if result is not None else CloseResult(reason="closed")
            self._closed = True
            if self._on_close is not None:
                self._on_close()
            if self._pending == _HELD:
                self.step()
            self._poll_stack(True)  # the final state, whatever the interval: what the summary keeps
            sender = self._sender
            window, self._profiling = self._profiling, None
            if window is not None:
                # Training ended inside a window: stop the profiler (it would record on, unbounded) and say why.
                window.fail(RuntimeError("the scope closed before the window's steps were done"))
                if sender is not None:
                    sender.profile_done(window)
            if sender is not None:
                sender.close(reason, timeout)
            result = self._close_result = self._result(sender, timeout)
            if result.dropped or result.undelivered:
                self._report_loss(result, reason)
            return result
        except Exception:
            self._internal_error()
            if self._close_result is None:
                self._close_result = CloseResult(records=self._seq, undelivered=self._seq, reason="internal error")
            return self._close_result

    def _result(self, sender, timeout) -> CloseResult:
        records = self._seq
        if sender is None:
            why = self._disabled or "sending is off"
            return CloseResult(records=records, undelivered=records, reason=why)
        delivered = min(sender.acked, records)
        dropped = min(sender.dropped, records - delivered)
        undelivered = records - delivered - dropped
        end_acked = sender.end_acked and sender.disabled is None
        if sender.disabled is not None:
            reason = sender.disabled
        elif undelivered:
            reason = sender.last_problem or "the sidecar did not acknowledge them within %.1f s" % max(0.0, float(timeout))
        elif dropped:
            reason = "the hook's buffers were full while the sidecar was away or slow (buffer_size, max_unacked)"
        elif not end_acked:
            reason = sender.last_problem or "the sidecar did not acknowledge the end within %.1f s" % max(0.0, float(timeout))
        else:
            reason = None
        return CloseResult(records, delivered, dropped, undelivered, end_acked, reason)

    def _report_loss(self, result: CloseResult, how: str) -> None:
        parts = []
        if result.dropped:
            parts.append("%d dropped (buffers full)" % result.dropped)
        if result.undelivered:
            parts.append("%d not delivered" % result.undelivered)
        _log.warn_once(
            "close:%d" % self._id,
            "%s: %d of %d step records delivered to the sidecar; %s: %s"
            % ("close" if how == "close" else "at exit", result.delivered, result.records, ", ".join(parts), result.reason),
        )

    def _close_at_exit(self):
        self._close("exit", self._exit_timeout)

    def _after_fork_in_child(self):
        """In a forked child (a DataLoader worker) the scope goes inert: no thread, no socket, no CUDA.

        The sender thread does not exist here, and the socket was already pointed away (see
        ``_ws``); the scope becomes a :class:`_ForkedScope`, whose methods do nothing.
        """
        sender = self._sender
        self._sender = None
        self._closed = True
        self._seq = 0
        self._close_result = CloseResult(reason="this scope belongs to the parent process (forked child)")
        self._queue = collections.deque(maxlen=1)
        self._wake = threading.Event()  # the parent's sender thread may have held its lock
        self._gpu = None
        self._stack_watcher = None
        self._h2d.time_on_gpu(None)
        self._compute.time_on_gpu(None)
        self._gpu_mode = "off"
        self._pending = 0
        self.__class__ = _ForkedScope
        if sender is not None:
            sender.abandon()


class _ForkedScope(Scope):
    """A scope inherited by a forked child: every call is a cheap no-op (the parent reports)."""

    def loader(self, iterable):
        return iterable

    def phase(self, name):
        return _NULL_PHASE

    def step(self, samples=None, _at=None):
        pass

    def set_flops_per_step(self, flops) -> bool:
        return False

    def count_flops(self):
        return _flops.NULL

    def stats(self) -> dict:
        stats = _idle_stats(None)
        stats.update(records=0, warnings=_log.count(), closed=True, gpu=False)
        return stats

    def close(self, timeout: float = 5.0) -> bool:
        return False

    def _close(self, reason, timeout):
        return self._close_result

    def _iterate(self, iterator):
        return iterator


def _idle_stats(disabled) -> dict:
    return {
        "disabled": disabled,
        "sent": 0,
        "acked": 0,
        "ack_seq": 0,
        "dropped": 0,
        "resent": 0,
        "pending": 0,
        "connected": False,
        "connects": 0,
        "reconnects": 0,
        "errors": 0,
        "bg_cpu_s": 0.0,
    }
