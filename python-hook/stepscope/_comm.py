"""Time spent in collective communication, per step, measured without synchronising anything.

Two sources, both turned on without touching the training loop:

- **torch.distributed's collectives** (``install``, which ``stepscope.init()`` calls): the
  functions ``all_reduce``, ``all_gather``, ``all_gather_into_tensor`` / ``_all_gather_base``,
  ``reduce_scatter``, ``reduce_scatter_tensor`` / ``_reduce_scatter_base``, ``broadcast``,
  ``reduce`` and ``barrier`` of ``torch.distributed`` (and of ``torch.distributed.distributed_c10d``)
  are replaced by wrappers that read the clock around the call. A synchronous call is timed where it
  runs; an asynchronous one (``async_op=True``) from its launch to its completion, which the
  backend reports on its own thread through ``work.get_future().then(...)``. ``Work.wait()`` called
  on the training thread is timed too (that is where the training thread waits for an asynchronous
  collective). Code that bound a function before ``init()`` (``from torch.distributed import
  all_reduce``) keeps the unwrapped one.
- **DDP's gradient all-reduce** (``watch_ddp(model)``, one call after wrapping the model): a
  communication hook that runs DDP's own default all-reduce (``allreduce_hook``, or the hook the
  script registers itself later) and timestamps each bucket's completion with ``fut.then(...)``.

Everything that runs on the training thread (or on autograd's and the backend's threads) appends one
tuple to a bounded deque; the sender thread turns the tuples into per-step figures:

    comm_ns       wall time during the step in which at least one collective of this process was in
                  flight (from its call or launch to its return or completion), overlaps merged.
    comm_wait_ns  the part of comm_ns in which the training thread was waiting for communication:
                  the whole of a synchronous collective (or a Work.wait()) called on the training
                  thread, and for DDP the time from the end of the backward computation (the launch
                  of the backward pass's last bucket) to the completion of its last bucket, which
                  DDP waits for before backward() returns.
    comm_bytes    bytes this rank had to send for the collectives launched during the step, counted
                  as nccl-tests' bus bandwidth counts them, so that comm_bytes / time compares with
                  the link's bandwidth: all_reduce 2(n-1)/n x S, all_gather and reduce_scatter
                  (n-1)/n x S with S the gathered (unscattered) size, broadcast and reduce S,
                  barrier 0 (S the tensor's bytes, n the group's size).

A step gets nil in all three when nothing is tracked (``install`` not called, no process group yet),
when the step began before tracking did, or when events were lost (the sender thread fell more than
131072 events behind); and nil in ``comm_ns`` and ``comm_wait_ns`` (``comm_bytes`` still counted)
when a collective launched in it ran on a backend whose completion the CPU does not see (NCCL and
other GPU backends complete on a CUDA stream: the CPU-side call returns at once), or whose Work has
no future: never a made-up figure. Times are measured where the backend completes on the CPU:
gloo and MPI. A step in which no tracked collective ran gets 0, 0, 0.

Each collective is also noted as it is entered and as it returns (or, asynchronous, completes), so
that for a rank that stalls the sender can say how many collectives the current step entered and
completed, and which one it is still inside of (``progress``): compared across ranks, the one that
never entered the collective the others wait in is named.

An asynchronous collective still in flight when its step ended counts as in flight to the step's end
(the sender waits up to 20 ms after a step for completions on their way); the rest of it lands in the
next steps. Nothing here synchronises a device or blocks the training thread: the training thread
pays a few microseconds per collective (and DDP a Python communication hook instead of its C++
default all-reduce), and nothing per step.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time

from . import _log

__all__ = ["CommTracker", "install", "watch_ddp", "current", "WRAPPED"]

_now = time.perf_counter_ns

# Events, appended by any thread and drained by the sender thread (tuples: append is atomic):
#   ("S", t0, t1, bus_bytes, wait, timed)  a synchronous collective, or a Work.wait(), timed where it ran
#   ("L", op, t0, bus_bytes, timed, pass)  an asynchronous collective launched (a DDP bucket: pass is set)
#   ("C", op, t1)                          ... completed (the backend's completion callback ran)
#   ("X", op)                              ... launch failed (raised), or its completion cannot be seen
#   ("E", pass, t)                         DDP launched the last bucket of a backward pass at t
_MAX_EVENTS = 1 << 17
_MAX_CALLS = 4096
# A step whose collectives are still in flight when the sender first sees it waits this long for
# their completion callbacks (which run on the backend's thread, just after it wakes its waiters).
_GRACE_NS = 20_000_000
_NONE = (None, None, None)

WRAPPED = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "broadcast",
    "reduce",
    "barrier",
)
_CPU_BACKENDS = ("gloo", "mpi")

_current = None  # the tracker of the live scope; None: collectives pass through untouched
_local = threading.local()  # .depth > 0 inside a timed collective or a DDP hook: inner calls are not counted again
_wrapped_modules = set()


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
        self._groups = {}  # id(group) -> (size, timed)
        # Sender thread only:
        self._open = {}  # op -> (t0, pass)
        self._done = []  # (t0, t1, wait) completed timed intervals
        self._bytes = []  # (t, bus bytes)
        self._untimed = []  # launch times of collectives whose time cannot be seen
        self._passes = {}  # DDP backward pass -> [open ops, end of compute, last completion, all timed]
        self.want_wrappers = False
        self.errors = 0
        self._lost_until = -1  # steps that began before this get nil: events were lost

    # --- any thread -----------------------------------------------------------

    def activate(self, at=None):
        if self.active_since is None:
            self.active_since = self._clock() if at is None else at

    def group_info(self, group):
        """(size, timed) of a process group, cached: timed when the CPU sees its collectives complete
        (gloo, MPI), None when that depends on the tensors' device (a backend per device type)."""
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
                timed = True
            elif "cpu:gloo" in backend:
                timed = None
            else:
                timed = False
            info = (size, timed)
            if backend:  # not before the group exists (the call would fail anyway)
                self._groups[key] = info
        return info

    def timed(self, group):
        return self.group_info(group)[1] is True

    def group_size(self, group):
        return self.group_info(group)[0]

    # --- sender thread --------------------------------------------------------

    def step_columns(self, start_ns, end_ns, final=False):
        """``(comm_ns, comm_wait_ns, comm_bytes)`` of the step ``(start_ns, end_ns]`` (hook clock,
        before the sender's origin), or None to ask again later: a collective launched before the
        step's end has not reported its completion yet and the step ended under ``_GRACE_NS`` ago.
        Steps must be asked for in order; each answer forgets what lies before the step's end.
        Never raises (an internal error gives nil figures)."""
        try:
            return self._step_columns(start_ns, end_ns, final)
        except Exception:
            self.errors += 1
            _log.warn_once(_log.INTERNAL + ":comm", "internal error in communication timing (training continues)")
            return _NONE

    def _step_columns(self, start_ns, end_ns, final):
        self.drain()
        if self.active_since is None:
            self._forget(end_ns)
            return _NONE
        if not final and self._open and self._clock() - end_ns < _GRACE_NS:
            for t0, _ in self._open.values():
                if t0 < end_ns:
                    return None
        if start_ns < self.active_since or start_ns < self._lost_until:
            self._forget(end_ns)
            return _NONE
        untimed = any(start_ns < t <= end_ns for t in self._untimed)
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
        return (_measure(comm), _measure(wait), int(sent))

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
        tracker.drain()  # activates at once if a process group already exists
        return tracker
    except Exception as exc:
        _log.warn_once(_log.INTERNAL + ":comm", "communication timing is off (%s: %s)" % (type(exc).__name__, exc))
        return None


def _wrap_loaded(modules):
    """Wrap the collectives of torch.distributed (and its distributed_c10d), once per module."""
    for name in ("torch.distributed", "torch.distributed.distributed_c10d"):
        module = modules.get(name)
        if module is None or id(module) in _wrapped_modules:
            continue
        _wrapped_modules.add(id(module))
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
        is_async, nbytes, timed = plan
        _local.depth = 1
        if is_async:
            op = next(tracker.ids)
            t0 = _now()
            call = [name, t0, None]
            tracker.calls.append(call)
            tracker.events.append(("L", op, t0, nbytes, timed, None))
            try:
                work = original(*args, **kwargs)
            except BaseException:
                tracker.events.append(("X", op))
                call[2] = _now()
                raise
            finally:
                _local.depth = 0
            if timed:
                _on_completion(tracker, op, work, call)
            else:
                call[2] = _now()  # its completion cannot be seen here (NCCL): counted as it returns
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
        tracker.events.append(("S", t0, t1, nbytes, threading.get_ident() == tracker.training_thread, timed))
        return result

    collective.__stepscope_wrapped__ = original
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        try:
            setattr(collective, attribute, getattr(original, attribute))
        except Exception:
            pass
    collective.__wrapped__ = original
    return collective


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
        "all_gather_into_tensor": _GATHER_TENSOR,
        "_all_gather_base": _GATHER_TENSOR,
        "reduce_scatter": _SCATTER_LIST,
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
    """(async, bus bytes, timed) of one collective call: the bytes each rank has to send, as
    nccl-tests counts them for its bus bandwidth (S the tensor's, or the gathered, bytes)."""
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
    n, timed = tracker.group_info(group)
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
    if timed is None:  # a group with a backend per device type: timed for CPU tensors (gloo)
        timed = tensor is not None and getattr(tensor, "is_cuda", True) is False
    return bool(is_async), max(0, int(nbytes)), timed


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
        t0 = _now()
        try:
            return original(self, *args, **kwargs)
        finally:
            t1 = _now()
            try:
                timed = tracker.timed(None)
            except Exception:
                timed = False
            tracker.events.append(("S", t0, t1, 0, True, timed))

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
        t0 = _now()
        op = next(tracker.ids)
        last = bool(bucket.is_last())
        buffer = bucket.buffer()
        n, timed = tracker.group_info(watch.process_group)
        nbytes = _nbytes(buffer) * 2 * (n - 1) // n if watch.inner is _default_allreduce() else None
        if timed is None:
            timed = getattr(buffer, "is_cuda", True) is False
        ddp_pass = watch.pass_id
        if last:
            watch.pass_id = next(watch.passes)
    except Exception:
        return watch.inner(watch.inner_state, bucket)
    events = tracker.events
    call = [_DDP_BUCKET, t0, None]
    tracker.calls.append(call)
    events.append(("L", op, t0, nbytes or 0, timed, ddp_pass))
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


_DEFAULT = []
_DDP_BUCKET = "all_reduce (DDP gradient bucket)"


def _default_allreduce():
    if not _DEFAULT:
        try:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # torch is already loaded here

            _DEFAULT.append(default_hooks.allreduce_hook)
        except Exception:
            _DEFAULT.append(None)
    return _DEFAULT[0]


def watch_ddp(model) -> bool:
    """Time the gradient all-reduce of a ``DistributedDataParallel`` model, bucket by bucket.

    Call it once, after wrapping the model (``model = DDP(...)``): it registers a communication
    hook that runs DDP's default all-reduce and timestamps each bucket's completion. A hook the
    script registers afterwards (``register_comm_hook``, ``_register_builtin_comm_hook``) runs inside
    it, as DDP would run it. A model that already has a communication hook cannot get another (DDP
    allows one): then nothing is timed through DDP and one line says so. Returns True when watching;
    never raises.
    """
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
        _log.warn_once(
            _log.USAGE + ":watch_ddp",
            "watch_ddp: DDP's communication is not timed (%s: %s); a model takes one communication hook: "
            "call stepscope.watch_ddp(model) before registering your own" % (type(exc).__name__, str(exc)[:200]),
        )
        return False


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
