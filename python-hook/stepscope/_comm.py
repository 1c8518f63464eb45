"""Time spent in collective communication, per step, measured without synchronising anything.

Two sources, both turned on without touching the training loop:

- **torch.distributed's collectives** (``install``, which ``stepscope.init()`` calls): the
  functions ``all_reduce``, ``all_gather``, ``all_gather_single`` / ``all_gather_into_tensor`` /
  ``_all_gather_base``, ``reduce_scatter``, ``reduce_scatter_single`` / ``reduce_scatter_tensor`` /
  ``_reduce_scatter_base``, ``broadcast``, ``reduce`` and ``barrier`` of ``torch.distributed`` (and of
  ``torch.distributed.distributed_c10d``) are replaced by wrappers: FSDP's all-gathers and
  reduce-scatters go through them too. Code that bound a function before ``init()`` (``from
  torch.distributed import all_reduce``) keeps the unwrapped one.
- **DDP's gradient all-reduce**: every ``DistributedDataParallel`` model is watched without a call --
  one built after ``stepscope.init()`` (or while the zero-code path is armed) at its construction,
  one built before ``init()`` found then -- by a communication hook that runs DDP's own default
  all-reduce (``allreduce_hook``, or the hook the script registers itself later) and timestamps each
  bucket's launch and completion. ``watch_ddp(model)`` does the same by hand.

Where the CPU sees a collective complete (gloo, MPI) it is timed on the host's clock: a synchronous
call where it runs, an asynchronous one (``async_op=True``) from its launch to its completion, which
the backend reports on its own thread through ``work.get_future().then(...)``, and ``Work.wait()`` on
the training thread. On a GPU backend (NCCL) the CPU-side call returns at once and the collective
runs on its own CUDA stream, so it is timed on the GPU's clock with CUDA events, read later by the
sender thread (never synchronised): one recorded on the calling stream before the call (the
collective cannot start before the work queued there), and one after it on a stream that waits for
the collective -- the calling stream after a synchronous call (NCCL's ``work.wait()`` inside it makes
that stream wait), or, for an asynchronous call and a DDP bucket, the stream the future's callback
runs on (PyTorch runs ``fut.then`` callbacks of CUDA futures on streams synchronised with the
collective's end). ``Work.wait()`` on the training thread is bracketed by two events on the current
stream: the time that stream waited.

Everything that runs on the training thread (or on autograd's and the backend's threads) appends one
tuple to a bounded deque; the sender thread turns the tuples into per-step figures:

    comm_ns       wall time during the step in which at least one collective of this process was in
                  flight (from its call or launch to its return or completion), overlaps merged.
    comm_wait_ns  the part of comm_ns in which the training thread (on a GPU backend: its GPU
                  stream) was waiting for communication: the whole of a synchronous collective (or a
                  Work.wait()) called on the training thread (on a GPU backend: on its default
                  stream; FSDP's collectives on side streams overlap compute and are not waits), and
                  for DDP the time from the end of the backward computation (the launch of the
                  backward pass's last bucket) to the completion of its last bucket, which DDP waits
                  for before backward() returns (on the GPU: the stream waits).
    comm_bytes    bytes this rank had to send for the collectives launched during the step, counted
                  as nccl-tests' bus bandwidth counts them, so that comm_bytes / time compares with
                  the link's bandwidth: all_reduce 2(n-1)/n x S, all_gather and reduce_scatter
                  (n-1)/n x S with S the gathered (unscattered) size, broadcast and reduce S,
                  barrier 0 (S the tensor's bytes, n the group's size).

A step gets nil in all three when nothing is tracked (``install`` not called, no process group yet),
when the step began before tracking did, or when events were lost (the sender thread fell more than
131072 events behind); and nil in ``comm_ns`` and ``comm_wait_ns`` (``comm_bytes`` still counted)
when a collective launched in it could not be timed: a GPU backend without CUDA events to spare (the
pool of 512 ran dry), events that did not complete within 10 s, or a Work without a future: never a
made-up figure. A step in which no tracked collective ran gets 0, 0, 0.

Each collective is also noted as it is entered and as it returns (or, asynchronous, completes), so
that for a rank that stalls the sender can say how many collectives the current step entered and
completed, and which one it is still inside of (``progress``): compared across ranks, the one that
never entered the collective the others wait in is named.

On the host's clock, an asynchronous collective still in flight when its step ended counts as in
flight to the step's end (the sender waits up to 20 ms after a step for completions on their way);
the rest of it lands in the next steps. On the GPU's clock a collective belongs whole to the step
that launched it (the GPU runs behind the host: the step's rows wait for its events to complete).
A step with both (a gloo group beside an NCCL one) adds the two clocks' figures. Nothing here
synchronises a device or blocks the training thread: the training thread pays a few microseconds
per collective (two CUDA event records on a GPU backend), and DDP a Python communication hook instead
of its C++ default all-reduce.
"""

from __future__ import annotations

import collections
import gc
import itertools
import os
import sys
import threading
import time
import weakref

from . import _cuda, _log

__all__ = ["CommTracker", "install", "watch_ddp", "current", "WRAPPED"]

_now = time.perf_counter_ns

# Events, appended by any thread and drained by the sender thread (tuples: append is atomic):
#   ("S", t0, t1, bus_bytes, wait, timed)  a synchronous collective, or a Work.wait(), timed where it ran
#   ("L", op, t0, bus_bytes, timed, pass)  an asynchronous collective launched (a DDP bucket: pass is set)
#   ("C", op, t1)                          ... completed (the backend's completion callback ran)
#   ("X", op)                              ... launch failed (raised), or its completion cannot be seen
#   ("E", pass, t)                         DDP launched the last bucket of a backward pass at t
# and on a GPU backend, with CUDA events (None where none could be recorded):
#   ("GS", t0, bus_bytes, start, end, wait)       a synchronous collective
#   ("GL", op, t0, bus_bytes, start, role, pass)  an asynchronous one launched (role: "async", or a
#                                                  DDP "bucket" / "last" bucket of a backward pass)
#   ("GC", op, end)                               ... its end recorded (in the future's callback)
#   ("GW", t0, before, after)                     a Work.wait() on the training thread
_MAX_EVENTS = 1 << 17
_MAX_CALLS = 4096
# A step whose collectives are still in flight when the sender first sees it waits this long for
# their completion callbacks (which run on the backend's thread, just after it wakes its waiters).
_GRACE_NS = 20_000_000
_NONE = (None, None, None)
# CUDA events for GPU collectives (two each, back to the pool once their step is measured), and how
# long a step waits for them to complete before its times are given up as unknown.
_GPU_EVENTS = 512
_GPU_TIMEOUT_NS = 10_000_000_000

WRAPPED = (
    "all_reduce",
    "all_gather",
    "all_gather_single",
    "all_gather_into_tensor",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "broadcast",
    "reduce",
    "barrier",
)
_CPU_BACKENDS = ("gloo", "mpi")
# How a group's collectives are timed: on the host's clock, on the GPU's, or by the tensor's device.
CPU, GPU, BY_DEVICE = "cpu", "gpu", "device"

_current = None  # the tracker of the live scope; None: collectives pass through untouched
_local = threading.local()  # .depth > 0 inside a timed collective or a DDP hook: inner calls are not counted again
# Weak: a module or class that is gone must not be taken for one made later at the same address.
_wrapped_modules = weakref.WeakSet()
_ddp_models = weakref.WeakSet()  # DistributedDataParallel models built since the class was wrapped
_armed = False  # the zero-code path is on: models are watched as they are built, before its scope
_scanned = weakref.WeakSet()  # DistributedDataParallel classes whose live instances were looked for once


def current():
    return _current


class CommTracker:
    """Collective intervals of one scope, and their per-step figures (``step_columns``)."""

    def __init__(self, *, modules=None, clock=None, training_thread=None):
        self._modules = sys.modules if modules is None else modules
        self._clock = clock or _now
        self.events = collections.deque(maxlen=_MAX_EVENTS)
        # Each collective as it is entered: [name, t0, t1 or None until it returned or completed],
        # for ``progress`` (what a stalled rank is inside of). Appended by any thread.
        self.calls = collections.deque(maxlen=_MAX_CALLS)
        self.ids = itertools.count(1)
        self.training_thread = threading.get_ident() if training_thread is None else training_thread
        self.active_since = None  # hook clock when tracking began (a process group existed)
        self._groups = {}  # id(group) -> (size, how: CPU, GPU or BY_DEVICE)
        self._pool = None  # CUDA events for GPU collectives, made at the first one (_cuda.EventPool)
        self._pool_failed = False
        self._bind = None  # sets the sender thread's CUDA device before it reads events
        # Sender thread only:
        self._open = {}  # op -> (t0, pass)
        self._done = []  # (t0, t1, wait) completed timed intervals
        self._bytes = []  # (t, bus bytes)
        self._untimed = []  # launch times of collectives whose time cannot be seen
        self._passes = {}  # DDP backward pass -> [open ops, end of compute, last completion, all timed]
        self._gpu = []  # GPU-timed entries, launch order: [t0, start, end, wait, role, pass]; end False: none coming
        self._gpu_open = {}  # op -> its entry, until its end is reported
        self._gpu_since = None  # (step end, clock) of the step waiting for its GPU events
        self.want_wrappers = False
        self.errors = 0
        self._lost_until = -1  # steps that began before this get nil: events were lost

    # --- any thread -----------------------------------------------------------

    def activate(self, at=None):
        if self.active_since is None:
            self.active_since = self._clock() if at is None else at

    def group_info(self, group):
        """(size, how) of a process group, cached: CPU where the CPU sees its collectives complete
        (gloo, MPI), GPU where they complete on a CUDA stream (NCCL and other GPU backends), BY_DEVICE
        where that depends on the tensors' device (a backend per device type, "cpu:gloo,cuda:nccl")."""
        key = id(group)
        info = self._groups.get(key)
        if info is None:
            dist = self._modules.get("torch.distributed")
            size = 1
            backend = ""
            try:
                size = max(1, int(dist.get_world_size(group)))
            except Exception:
                pass
            try:
                backend = str(dist.get_backend(group)).lower()
            except Exception:
                pass
            if backend in _CPU_BACKENDS:
                how = CPU
            elif "cpu:" in backend and "cuda:" in backend:
                how = BY_DEVICE
            else:
                how = GPU
            info = (size, how)
            if backend:  # not before the group exists (the call would fail anyway)
                self._groups[key] = info
        return info

    def how(self, group, tensor):
        """CPU or GPU: the clock a collective of ``group`` on ``tensor`` is timed on."""
        how = self.group_info(group)[1]
        if how == BY_DEVICE:
            how = GPU if getattr(tensor, "is_cuda", False) else CPU
        return how

    def group_size(self, group):
        return self.group_info(group)[0]

    def gpu_record(self):
        """A CUDA event just recorded on this thread's current stream; None where none can be (never
        raises, never blocks)."""
        pool = self._pool
        if pool is None:
            pool = self._make_pool()
        if pool is None:
            return None
        try:
            event = pool.take()
            if event is not None:
                event.record()
            return event
        except Exception:
            self.errors += 1
            return None

    def on_default_stream(self):
        """Whether this thread's current CUDA stream is its device's default stream (the compute's)."""
        try:
            cuda = self._modules.get("torch").cuda
            return cuda.current_stream() == cuda.default_stream()
        except Exception:
            return True

    def _make_pool(self):
        if self._pool_failed:
            return None
        try:
            torch = self._modules.get("torch")
            if torch is None or not torch.cuda.is_initialized():
                return None  # never initialise CUDA here; a GPU collective means it soon is
            device = torch.cuda.current_device()
            self._bind = lambda: torch.cuda.set_device(device)
            self._pool = _cuda.EventPool(_cuda.torch_event_factory(torch), _GPU_EVENTS)
        except Exception:
            self._pool_failed = True
            return None
        return self._pool

    # --- sender thread --------------------------------------------------------

    def step_columns(self, start_ns, end_ns, final=False, give_up=None):
        """``(comm_ns, comm_wait_ns, comm_bytes)`` of the step ``(start_ns, end_ns]`` (hook clock,
        before the sender's origin), or None to ask again later: a collective launched before the
        step's end has not reported its completion yet and the step ended under ``_GRACE_NS`` ago,
        or the GPU has yet to complete the events of one (``give_up``, at close: do not wait for them;
        by default as ``final``).
        Steps must be asked for in order; each answer forgets what lies before the step's end.
        Never raises (an internal error gives nil figures)."""
        try:
            return self._step_columns(start_ns, end_ns, final, final if give_up is None else give_up)
        except Exception:
            self.errors += 1
            _log.warn_once(_log.INTERNAL + ":comm", "internal error in communication timing (training continues)")
            return _NONE

    def _step_columns(self, start_ns, end_ns, final, give_up):
        self.drain()
        if self.active_since is None:
            self._forget(end_ns)
            return _NONE
        if not final and self._open and self._clock() - end_ns < _GRACE_NS:
            for t0, _ in self._open.values():
                if t0 < end_ns:
                    return None
        gpu = self._gpu_figures(start_ns, end_ns, give_up)
        if gpu is None:
            return None  # the GPU has yet to run the step's collectives
        if start_ns < self.active_since or start_ns < self._lost_until:
            self._forget(end_ns)
            return _NONE
        untimed = gpu is _UNTIMED or any(start_ns < t <= end_ns for t in self._untimed)
        sent = 0
        for t, nbytes in self._bytes:
            if start_ns < t <= end_ns:
                sent += nbytes
        if untimed:
            self._forget(end_ns)
            return (None, None, int(sent))
        comm = []
        wait = []
        for t0, t1, waited in self._done:
            if t1 > start_ns and t0 < end_ns:
                segment = (max(t0, start_ns), min(t1, end_ns))
                comm.append(segment)
                if waited:
                    wait.append(segment)
        for t0, _ in self._open.values():  # still in flight: it was, all through to the step's end
            if t0 < end_ns:
                comm.append((max(t0, start_ns), end_ns))
        self._forget(end_ns)
        return (_measure(comm) + gpu[0], _measure(wait) + gpu[1], int(sent))

    def _gpu_figures(self, start_ns, end_ns, give_up):
        """(comm, wait) ns on the GPU's clock of the collectives launched in the step; None to ask
        again later (their events have not completed), _UNTIMED where they cannot be known."""
        entries = [op for op in self._gpu if start_ns < op.t0 <= end_ns]
        if not entries:
            return (0, 0)
        if self._bind is not None:
            bind, self._bind = self._bind, None
            try:
                bind()  # a fresh thread is on device 0: reading from there could make a context there
            except Exception:
                self.errors += 1
        pending = False
        try:
            for op in entries:
                if op.start is None or op.end is False:
                    return _UNTIMED
                if op.end is None or not (op.end.query() and op.start.query()):
                    pending = True
                    break
        except Exception:
            self.errors += 1
            return _UNTIMED
        if pending:
            now = self._clock()
            if self._gpu_since is None or self._gpu_since[0] != end_ns:
                self._gpu_since = (end_ns, now)
            if not give_up and now - self._gpu_since[1] < _GPU_TIMEOUT_NS:
                return None
            return _UNTIMED
        try:
            return _gpu_intervals(entries)
        except Exception:
            self.errors += 1
            return _UNTIMED

    def progress(self, since_ns, now_ns=None):
        """The collectives entered since ``since_ns`` (the end of the last step, hook clock): how
        many, how many returned or completed, and the first still in flight (name, its place in the
        step, ns since it was entered), or None where none is. Sender thread; never raises."""
        try:
            calls = self.calls
            while calls and calls[0][2] is not None and calls[0][2] <= since_ns:
                calls.popleft()
            entered = completed = 0
            waiting = None
            for name, t0, t1 in list(calls):
                if t0 <= since_ns:
                    continue
                entered += 1
                if t1 is not None:
                    completed += 1
                elif waiting is None:
                    waiting = {"op": name, "index": entered, "for_ns": max(0, (now_ns or self._clock()) - t0)}
            return {"entered": entered, "completed": completed, "waiting": waiting}
        except Exception:
            return None

    def drain(self):
        """Turn the events appended so far into intervals (sender thread)."""
        if self.active_since is None:
            dist = self._modules.get("torch.distributed")
            try:
                if dist is not None and dist.is_initialized():
                    self.activate()
            except Exception:
                pass
        if self.want_wrappers:
            _wrap_loaded(self._modules)
        events = self.events
        if len(events) >= _MAX_EVENTS:
            # The deque overflowed (the sender thread fell far behind): events were lost, so what is
            # in flight is unknown. Forget it; steps up to now get nil times.
            self._lost_until = self._clock()
            self._open.clear()
            self._passes.clear()
            for entry in self._gpu:
                self._release(entry)
            self._gpu = []
            self._gpu_open.clear()
        opened = self._open
        passes = self._passes
        while True:
            try:
                event = events.popleft()
            except IndexError:
                break
            kind = event[0]
            if kind == "S":
                _, t0, t1, nbytes, waited, timed = event
                if self.active_since is None:
                    self.activate(t0)
                if timed:
                    self._done.append((t0, t1, waited))
                else:
                    self._untimed.append(t0)
                if nbytes:
                    self._bytes.append((t0, nbytes))
            elif kind == "L":
                _, op, t0, nbytes, timed, ddp_pass = event
                if self.active_since is None:
                    self.activate(t0)
                if timed:
                    opened[op] = (t0, ddp_pass)
                else:
                    self._untimed.append(t0)
                if nbytes:
                    self._bytes.append((t0, nbytes))
                if ddp_pass is not None:
                    state = passes.get(ddp_pass)
                    if state is None:
                        state = passes[ddp_pass] = [0, None, None, True]
                    if timed:
                        state[0] += 1
                    else:
                        state[3] = False
            elif kind == "C":
                _, op, t1 = event
                entry = opened.pop(op, None)
                if entry is None:
                    continue
                t0, ddp_pass = entry
                self._done.append((t0, t1, False))
                if ddp_pass is not None:
                    state = passes.get(ddp_pass)
                    if state is not None:
                        state[0] -= 1
                        state[2] = t1 if state[2] is None else max(state[2], t1)
                        self._pass_done(ddp_pass, state)
            elif kind == "X":
                gpu_entry = self._gpu_open.pop(event[1], None)
                if gpu_entry is not None:
                    gpu_entry.end = False
                    if gpu_entry.dropped:
                        self._release(gpu_entry)
                entry = opened.pop(event[1], None)
                if entry is not None:
                    self._untimed.append(entry[0])
                    state = passes.get(entry[1]) if entry[1] is not None else None
                    if state is not None:
                        state[0] -= 1
                        state[3] = False
                        self._pass_done(entry[1], state)
            elif kind == "E":
                _, ddp_pass, t = event
                state = passes.get(ddp_pass)
                if state is None:
                    state = passes[ddp_pass] = [0, None, None, True]
                state[1] = t
                self._pass_done(ddp_pass, state)
            elif kind == "GS":
                _, t0, nbytes, start, end, waited = event
                if self.active_since is None:
                    self.activate(t0)
                self._gpu.append(_GpuOp(t0, start, end if end is not None else False, waited, "sync", None))
                if nbytes:
                    self._bytes.append((t0, nbytes))
            elif kind == "GL":
                _, op, t0, nbytes, start, role, ddp_pass = event
                if self.active_since is None:
                    self.activate(t0)
                entry = _GpuOp(t0, start, None, False, role, ddp_pass)
                self._gpu.append(entry)
                self._gpu_open[op] = entry
                if nbytes:
                    self._bytes.append((t0, nbytes))
            elif kind == "GC":
                _, op, end = event
                entry = self._gpu_open.pop(op, None)
                if entry is not None:
                    entry.end = end if end is not None else False
                    if entry.dropped:
                        self._release(entry)
            elif kind == "GW":
                _, t0, before, after = event
                self._gpu.append(_GpuOp(t0, before, after if after is not None else False, True, "wait", None))
        if len(passes) > 64:  # passes that never finished (an exception in backward)
            for key in sorted(passes)[: len(passes) - 64]:
                del passes[key]

    def _pass_done(self, ddp_pass, state):
        opened, end_compute, last_done, all_timed = state
        if opened > 0 or end_compute is None:
            return
        del self._passes[ddp_pass]
        if all_timed and last_done is not None and last_done > end_compute:
            self._done.append((end_compute, last_done, True))

    def _forget(self, end_ns):
        self._done = [entry for entry in self._done if entry[1] > end_ns]
        self._bytes = [entry for entry in self._bytes if entry[0] > end_ns]
        self._untimed = [t for t in self._untimed if t > end_ns]
        if self._gpu and self._gpu[0].t0 <= end_ns:
            kept = []
            for op in self._gpu:
                if op.t0 > end_ns:
                    kept.append(op)
                else:
                    self._release(op)
            self._gpu = kept

    def _release(self, op):
        """Give a measured (or abandoned) GPU entry's events back to the pool; one whose end is still
        to be reported gives it back when it is."""
        op.dropped = True
        pool = self._pool
        if pool is not None:
            pool.give(op.start)
            if op.end not in (None, False):
                pool.give(op.end)
        op.start = None


class _GpuOp:
    """A collective (or a Work.wait()) timed with CUDA events; end None until reported, False if none."""

    __slots__ = ("t0", "start", "end", "wait", "role", "ddp_pass", "dropped")

    def __init__(self, t0, start, end, wait, role, ddp_pass):
        self.t0 = t0
        self.start = start
        self.end = end
        self.wait = wait
        self.role = role
        self.ddp_pass = ddp_pass
        self.dropped = False


_UNTIMED = object()


def _gpu_intervals(entries):
    """(comm, wait) ns of GPU-timed entries whose events all completed: the union of their intervals
    on the GPU's clock, and of the waited ones (synchronous calls and waits on the default stream, and
    for each DDP backward pass the time from its last bucket's launch to its last completion)."""
    origin = entries[0].start

    def at(event):
        return int(round(origin.elapsed_time(event) * 1_000_000))

    comm = []
    wait = []
    passes = {}
    for op in entries:
        interval = (at(op.start), at(op.end))
        comm.append(interval)
        if op.wait:
            wait.append(interval)
        if op.ddp_pass is not None:
            state = passes.setdefault(op.ddp_pass, [None, None])
            if op.role == "last":
                state[0] = interval[0]
            state[1] = interval[1] if state[1] is None else max(state[1], interval[1])
    for last_launch, last_done in passes.values():
        if last_launch is not None and last_done > last_launch:
            wait.append((last_launch, last_done))
    return (_measure(comm), _measure(wait))


def _measure(segments):
    """Length of the union of ``(start, end)`` segments."""
    if not segments:
        return 0
    segments.sort()
    total = 0
    start, end = segments[0]
    for s, e in segments[1:]:
        if s > end:
            total += end - start
            start, end = s, e
        elif e > end:
            end = e
    return total + max(0, end - start)


# --- wiring --------------------------------------------------------------------


def install(scope, *, wrap=True, modules=None):
    """Time collectives for ``scope``'s steps: its sender adds the ``comm_*`` columns from now on.

    ``wrap``: also wrap torch.distributed's collective functions (now if torch.distributed is
    loaded, else as soon as the sender thread sees it loaded). Returns the tracker, or None for a
    scope that sends nothing. Never raises.
    """
    global _current
    try:
        sender = getattr(scope, "_sender", None)
        if sender is None:
            return None
        tracker = CommTracker(modules=modules)
        tracker.want_wrappers = bool(wrap)
        _current = tracker
        sender.comm = tracker
        if wrap:
            _wrap_loaded(tracker._modules)
            _watch_existing(tracker._modules)
        tracker.drain()  # activates at once if a process group already exists
        return tracker
    except Exception as exc:
        _log.warn_once(_log.INTERNAL + ":comm", "communication timing is off (%s: %s)" % (type(exc).__name__, exc))
        return None


def _wrap_loaded(modules):
    """Wrap the collectives of torch.distributed (and its distributed_c10d), once per module, and
    DistributedDataParallel's construction."""
    for name in ("torch.distributed", "torch.distributed.distributed_c10d"):
        module = modules.get(name)
        if module is None or module in _wrapped_modules:
            continue
        _wrapped_modules.add(module)
        _wrap_ddp_class(modules)
        try:
            if hasattr(module, "is_available") and not module.is_available():
                continue
        except Exception:
            continue
        for fname in WRAPPED:
            original = getattr(module, fname, None)
            if original is None or not callable(original):
                continue
            if getattr(original, "__stepscope_wrapped__", None) is not None:
                continue
            try:
                setattr(module, fname, _wrapper(fname, original))
            except Exception:
                pass
        _wrap_work_wait(module)


def _wrapper(name, original):
    spec = _spec(name, original)

    def collective(*args, **kwargs):
        tracker = _current
        if tracker is None or getattr(_local, "depth", 0):
            return original(*args, **kwargs)
        try:
            plan = _plan(tracker, spec, args, kwargs)
        except Exception:
            plan = None
        if plan is None:
            return original(*args, **kwargs)
        is_async, nbytes, how = plan
        start = tracker.gpu_record() if how == GPU else None  # the calling stream's work queued so far
        _local.depth = 1
        if is_async:
            op = next(tracker.ids)
            t0 = _now()
            call = [name, t0, None]
            tracker.calls.append(call)
            if how == GPU:
                tracker.events.append(("GL", op, t0, nbytes, start, "async", None))
            else:
                tracker.events.append(("L", op, t0, nbytes, how == CPU, None))
            try:
                work = original(*args, **kwargs)
            except BaseException:
                tracker.events.append(("X", op))
                call[2] = _now()
                raise
            finally:
                _local.depth = 0
            if how == CPU:
                _on_completion(tracker, op, work, call)
            else:
                call[2] = _now()  # its completion is not seen on the CPU (a CUDA stream): counted as it returns
                if how == GPU:
                    _on_gpu_completion(tracker, op, work)
            _remember_launch(work, how)
            return work
        t0 = _now()
        call = [name, t0, None]
        tracker.calls.append(call)
        try:
            result = original(*args, **kwargs)
        finally:
            _local.depth = 0
            call[2] = _now()
        t1 = call[2]
        on_training_thread = threading.get_ident() == tracker.training_thread
        if how == GPU:
            # NCCL's wait() inside the call made this stream wait for the collective: an event here ends it.
            end = tracker.gpu_record() if start is not None else None
            tracker.events.append(("GS", t0, nbytes, start, end, on_training_thread and tracker.on_default_stream()))
        else:
            tracker.events.append(("S", t0, t1, nbytes, on_training_thread, how == CPU))
        return result

    collective.__stepscope_wrapped__ = original
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(collective, attribute, getattr(original, attribute))
        except Exception:
            pass
    collective.__wrapped__ = original
    return collective


_launched = collections.OrderedDict()  # id(work) -> how, for the Work.wait() that follows its launch


def _remember_launch(work, how):
    _launched[id(work)] = how
    while len(_launched) > 1024:
        _launched.popitem(last=False)


def _on_gpu_completion(tracker, op, work):
    """The end of a GPU collective: an event recorded in its future's callback, which PyTorch runs on
    a stream synchronised with the collective (the callback itself runs at once, on the CPU)."""
    events = tracker.events

    def completed(future):
        events.append(("GC", op, tracker.gpu_record()))
        return None

    try:
        work.get_future().then(completed)
    except Exception:
        events.append(("X", op))


def _on_completion(tracker, op, work, call=None):
    events = tracker.events

    def completed(future):
        t1 = _now()
        events.append(("C", op, t1))
        if call is not None:
            call[2] = t1
        return None

    try:
        work.get_future().then(completed)
    except Exception:
        events.append(("X", op))  # this backend's work has no future: its time is not seen
        if call is not None:
            call[2] = _now()


def _spec(name, original):
    """(kind, position of async_op, position of group) of a collective, from its signature."""
    import inspect

    try:
        params = list(inspect.signature(original).parameters)
    except Exception:
        params = []
    kind = {
        "all_reduce": _ALL_REDUCE,
        "broadcast": _WHOLE,
        "reduce": _WHOLE,
        "all_gather": _GATHER_LIST,
        "all_gather_single": _GATHER_TENSOR,
        "all_gather_into_tensor": _GATHER_TENSOR,
        "_all_gather_base": _GATHER_TENSOR,
        "reduce_scatter": _SCATTER_LIST,
        "reduce_scatter_single": _SCATTER_TENSOR,
        "reduce_scatter_tensor": _SCATTER_TENSOR,
        "_reduce_scatter_base": _SCATTER_TENSOR,
    }.get(name, _NOTHING)
    return (
        kind,
        params.index("async_op") if "async_op" in params else 99,
        params.index("group") if "group" in params else 99,
        tuple(params[:2]),
    )


_ALL_REDUCE, _WHOLE, _GATHER_LIST, _GATHER_TENSOR, _SCATTER_LIST, _SCATTER_TENSOR, _NOTHING = range(7)


def _plan(tracker, spec, args, kwargs):
    """(async, bus bytes, how) of one collective call: the bytes each rank has to send, as nccl-tests
    counts them for its bus bandwidth (S the tensor's, or the gathered, bytes), and the clock it is
    timed on (CPU or GPU)."""
    kind, async_at, group_at, names = spec
    n_args = len(args)
    if kwargs:
        is_async = kwargs["async_op"] if "async_op" in kwargs else (args[async_at] if async_at < n_args else False)
        group = kwargs["group"] if "group" in kwargs else (args[group_at] if group_at < n_args else None)
        first = kwargs[names[0]] if names and names[0] in kwargs else (args[0] if n_args else None)
        second = kwargs[names[1]] if len(names) > 1 and names[1] in kwargs else (args[1] if n_args > 1 else None)
    else:
        is_async = args[async_at] if async_at < n_args else False
        group = args[group_at] if group_at < n_args else None
        first = args[0] if n_args else None
        second = args[1] if n_args > 1 else None
    n, how = tracker.group_info(group)
    if kind == _ALL_REDUCE:
        nbytes = _nbytes(first) * 2 * (n - 1) // n
        tensor = first
    elif kind == _WHOLE:
        nbytes = _nbytes(first)
        tensor = first
    elif kind == _GATHER_LIST:  # (tensor_list, tensor): the gathered size is n tensors
        nbytes = _nbytes(second) * (n - 1)
        tensor = second
    elif kind == _GATHER_TENSOR:  # (output, input)
        nbytes = _nbytes(first) * (n - 1) // n
        tensor = second
    elif kind == _SCATTER_LIST:  # (output, input_list)
        nbytes = sum(_nbytes(t) for t in (second or ())) * (n - 1) // n
        tensor = first
    elif kind == _SCATTER_TENSOR:  # (output, input)
        nbytes = _nbytes(second) * (n - 1) // n
        tensor = second
    else:  # barrier
        nbytes = 0
        tensor = None
    if how == BY_DEVICE:  # a group with a backend per device type: the tensor's device decides
        how = CPU if tensor is None or getattr(tensor, "is_cuda", True) is False else GPU
    return bool(is_async), max(0, int(nbytes)), how


def _nbytes(tensor):
    try:
        return int(tensor.numel()) * int(tensor.element_size())
    except Exception:
        return 0


def _wrap_work_wait(module):
    """Time ``Work.wait()`` on the training thread: there it waits for an asynchronous collective."""
    work = getattr(module, "Work", None)
    original = getattr(work, "wait", None) if work is not None else None
    if original is None or getattr(original, "__stepscope_wrapped__", None) is not None:
        return

    def wait(self, *args, **kwargs):
        tracker = _current
        if tracker is None or getattr(_local, "depth", 0) or threading.get_ident() != tracker.training_thread:
            return original(self, *args, **kwargs)
        try:
            how = _launched.pop(id(self), None) or tracker.group_info(None)[1]
        except Exception:
            how = None
        if how == GPU:
            # NCCL's wait() makes the current stream wait: what it waited is between these two events.
            before = tracker.gpu_record()
            t0 = _now()
            try:
                return original(self, *args, **kwargs)
            finally:
                after = tracker.gpu_record() if before is not None else None
                tracker.events.append(("GW", t0, before, after))
        t0 = _now()
        try:
            return original(self, *args, **kwargs)
        finally:
            tracker.events.append(("S", t0, _now(), 0, True, how == CPU))

    wait.__stepscope_wrapped__ = original
    wait.__name__ = "wait"
    wait.__doc__ = getattr(original, "__doc__", None)
    try:
        work.wait = wait
    except Exception:
        pass


# --- DDP ---------------------------------------------------------------------------


class _DdpWatch:
    """The communication hook ``watch_ddp`` registers: DDP's own all-reduce (or the script's hook), timed."""

    def __init__(self, model, process_group, inner, inner_state):
        self.model = model
        self.process_group = process_group
        self.inner = inner
        self.inner_state = inner_state
        self.user_registered = False
        self.passes = itertools.count(1)
        self.pass_id = next(self.passes)
        self._timed = None


def _ddp_hook(state, bucket):
    """The hook DDP calls for every bucket (no annotations: DDP checks them against its own types)."""
    watch = state
    tracker = _current
    if tracker is None or getattr(_local, "depth", 0):
        return watch.inner(watch.inner_state, bucket)
    try:
        last = bool(bucket.is_last())
        buffer = bucket.buffer()
        n = tracker.group_size(watch.process_group)
        how = tracker.how(watch.process_group, buffer)
        nbytes = _nbytes(buffer) * 2 * (n - 1) // n if watch.inner is _default_allreduce() else None
        # On a GPU: the bucket's gradients are queued on this (autograd's) stream up to here.
        start = tracker.gpu_record() if how == GPU else None
        t0 = _now()
        op = next(tracker.ids)
        ddp_pass = watch.pass_id
        if last:
            watch.pass_id = next(watch.passes)
    except Exception:
        return watch.inner(watch.inner_state, bucket)
    events = tracker.events
    call = [_DDP_BUCKET, t0, None]
    tracker.calls.append(call)
    if how == GPU:
        events.append(("GL", op, t0, nbytes or 0, start, "last" if last else "bucket", ddp_pass))
    else:
        events.append(("L", op, t0, nbytes or 0, how == CPU, ddp_pass))
        if last:
            events.append(("E", ddp_pass, t0))
    if nbytes is None:  # the script's own hook: its collectives are counted by the wrappers, if on
        future = watch.inner(watch.inner_state, bucket)
    else:
        _local.depth = 1
        try:
            future = watch.inner(watch.inner_state, bucket)
        except BaseException:
            events.append(("X", op))
            call[2] = _now()
            raise
        finally:
            _local.depth = 0

    if how == GPU:

        def completed(fut):
            # Run by PyTorch on a stream that waits for the bucket's collective: an event here ends it.
            events.append(("GC", op, tracker.gpu_record()))
            call[2] = _now()  # on the CPU's clock, as it was handed on
            return fut.value()

    else:

        def completed(fut):
            t1 = _now()
            events.append(("C", op, t1))
            call[2] = t1
            return fut.value()

    try:
        return future.then(completed)
    except Exception:
        events.append(("X", op))
        call[2] = _now()
        return future


_DEFAULT = weakref.WeakKeyDictionary()  # torch -> its DDP allreduce_hook (None if it has none)
_DDP_BUCKET = "all_reduce (DDP gradient bucket)"


def _default_allreduce():
    key = sys.modules.get("torch")
    if key is None:
        return None
    if key not in _DEFAULT:
        try:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # torch is already loaded here

            _DEFAULT[key] = default_hooks.allreduce_hook
        except Exception:
            _DEFAULT[key] = None
    return _DEFAULT[key]


def watch_ddp(model) -> bool:
    """Time the gradient all-reduce of a ``DistributedDataParallel`` model, bucket by bucket.

    ``stepscope.init()`` and the zero-code path watch DDP models without this call (see
    :func:`install`); it is for a model they cannot see (one built before ``init()`` in a process that
    has no process group yet, say). Call it once, after wrapping the model (``model = DDP(...)``): it
    registers a communication hook that runs DDP's default all-reduce and timestamps each bucket's
    completion. A hook the script registers afterwards (``register_comm_hook``,
    ``_register_builtin_comm_hook``) runs inside it, as DDP would run it. A model that already has a
    communication hook cannot get another (DDP allows one): then nothing is timed through DDP and one
    line says so. Returns True when watching; never raises.
    """
    return _watch(model, auto=False)


def _watch(model, auto):
    try:
        torch = sys.modules.get("torch")
        ddp_class = getattr(getattr(getattr(torch, "nn", None), "parallel", None), "DistributedDataParallel", None)
        if ddp_class is None or not isinstance(model, ddp_class):
            _log.warn_once(_log.USAGE + ":watch_ddp", "watch_ddp: not a torch DistributedDataParallel model; nothing is timed")
            return False
        if getattr(model, "_stepscope_watch", None) is not None:
            return True
        default = _default_allreduce()
        if default is None:
            _log.warn_once(_log.USAGE + ":watch_ddp", "watch_ddp: this torch has no DDP allreduce_hook; nothing is timed")
            return False
        group = getattr(model, "process_group", None)
        watch = _DdpWatch(model, group, default, group)
        original_register = model.register_comm_hook
        model.register_comm_hook(watch, _ddp_hook)
        object.__setattr__(model, "_stepscope_watch", watch)
        _take_over_registration(model, watch, original_register)
        tracker = _current
        if tracker is not None:
            tracker.activate()
        return True
    except Exception as exc:
        if auto:
            _log.warn_once(
                _log.USAGE + ":ddp-auto",
                "DDP's gradient all-reduce is not timed bucket by bucket (%s: %s): the model has a communication "
                "hook of its own (DDP takes one); its collectives are timed through torch.distributed's, without "
                "the wait for the last bucket. Call stepscope.init() before building the model, and register "
                "your hook after" % (type(exc).__name__, str(exc)[:200]),
            )
            return False
        _log.warn_once(
            _log.USAGE + ":watch_ddp",
            "watch_ddp: DDP's communication is not timed (%s: %s); a model takes one communication hook: "
            "call stepscope.watch_ddp(model) before registering your own" % (type(exc).__name__, str(exc)[:200]),
        )
        return False


def _ddp_class(modules):
    torch = modules.get("torch")
    return getattr(getattr(getattr(torch, "nn", None), "parallel", None), "DistributedDataParallel", None)


def _wrap_ddp_class(modules):
    """Watch every DistributedDataParallel model from its construction on (once per class)."""
    ddp_class = _ddp_class(modules)
    original = getattr(ddp_class, "__dict__", {}).get("__init__")
    if original is None or getattr(original, "__stepscope_wrapped__", None) is not None:
        return

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _built(self)

    __init__.__stepscope_wrapped__ = original
    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    try:
        ddp_class.__init__ = __init__
    except Exception:
        pass


def _built(model):
    """A DDP model was just built: watched now if anything will time it (a scope, or the zero-code path)."""
    try:
        _ddp_models.add(model)
        if _current is not None or _armed:
            _watch(model, auto=True)
    except Exception:
        pass


def arm(modules=None):
    """The zero-code path is on: watch DDP models as they are built, before its scope exists."""
    global _armed
    _armed = True
    try:
        _wrap_ddp_class(sys.modules if modules is None else modules)
    except Exception:
        pass


def disarm():
    global _armed
    _armed = False


def _watch_existing(modules):
    """At ``install``: watch the DDP models built before it. Those built since the class was wrapped are
    known; others are looked for once among live objects (0.1-0.3 s with a large program loaded), only
    where a process group exists (DDP needs one), so that a job without torch.distributed pays nothing;
    from then on the wrapped class registers every new model."""
    ddp_class = _ddp_class(modules)
    if ddp_class is None:
        return
    models = list(_ddp_models)
    dist = modules.get("torch.distributed")
    try:
        grouped = dist is not None and dist.is_available() and dist.is_initialized()
    except Exception:
        grouped = False
    if grouped and not _armed and ddp_class not in _scanned:
        _scanned.add(ddp_class)
        # type(), not isinstance(): the latter reads __class__, which some objects answer with a warning
        # (torch 1.13's deprecated torch.distributed.reduce_op does).
        models = [obj for obj in gc.get_objects() if issubclass(type(obj), ddp_class)]
    for model in models:
        _watch(model, auto=True)


def _take_over_registration(model, watch, original_register):
    """Hooks the script registers after ``watch_ddp`` run inside the watching hook (DDP takes one)."""

    def register_comm_hook(state, hook):
        if watch.user_registered:
            return original_register(state, hook)  # a second registration: DDP's own error
        checker = getattr(model, "_check_comm_hook", None)
        if checker is not None:
            checker(hook)
        watch.inner, watch.inner_state = hook, state
        watch.user_registered = True

    def _register_builtin_comm_hook(comm_hook_type):
        hooks = None
        try:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            name = getattr(comm_hook_type, "name", str(comm_hook_type)).rsplit(".", 1)[-1]
            hooks = {"ALLREDUCE": default_hooks.allreduce_hook, "FP16_COMPRESS": default_hooks.fp16_compress_hook}.get(name)
        except Exception:
            hooks = None
        if hooks is None or watch.user_registered:
            return type(model)._register_builtin_comm_hook(model, comm_hook_type)
        watch.inner, watch.inner_state = hooks, watch.process_group
        watch.user_registered = True

    object.__setattr__(model, "register_comm_hook", register_comm_hook)
    object.__setattr__(model, "_register_builtin_comm_hook", _register_builtin_comm_hook)


def _forget_in_child():
    global _current
    _current = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
