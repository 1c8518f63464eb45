"""The software stack fingerprint: the settings that change a job's speed without changing its code.

Two groups of the rank's ``env`` (docs/stack.md lists every key, where it comes from and its cost):

- ``stack``: mixed precision seen in the steps, TF32, cuDNN and determinism flags, the CPUs the
  process may run on, the ranks sharing the host. Global flags, read with a few C calls, never
  initialising CUDA.
- ``compile``: whether torch.compile ran, how often it recompiled (in all and over the last
  minute), its graph breaks and compile time, from ``torch._dynamo.utils`` (only once the program
  imported it: never imported from here).

Mixed precision is thread-local and usually entered and left inside the step, so it cannot be read
from outside: ``install`` wraps ``autocast.__enter__`` (one dict lookup per entry) and
``GradScaler.scale`` (one attribute read per call) to note what the training loop uses.

``Watcher.poll`` runs on the sender thread: it reads at most once per ``INTERVAL_S`` and returns the
groups that changed since the last it returned, so a run sends at most one env update per interval.
"""

from __future__ import annotations

import os
import sys
import threading

from ._scalar import put

__all__ = ["install", "uninstall", "settings", "nccl_version", "compile_totals", "Watcher", "INTERVAL_S"]

INTERVAL_S = 10.0  # at most one env update this often, and only on change
_RECENT_S = 60.0  # "the last minute" of recompiles and compile time

# Written by the wrappers on the training thread, read by the sender thread (plain dict and list
# operations are atomic under the GIL).
_amp_seen = {}  # "bfloat16" -> the device type it was first seen on
_scaler_seen = [False]
_lock = threading.Lock()
_undo = []  # (owner, name, original) restored by uninstall()


def _new_lock_in_child():
    global _lock
    _lock = threading.Lock()  # the sender thread may have held it at the fork: it is gone in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def install(torch) -> bool:
    """Note autocast and GradScaler use from now on (idempotent; never raises). True if watching."""
    with _lock:
        if _undo:
            return True
        try:
            _wrap_autocast(torch)
        except Exception:
            pass
        try:
            _wrap_scaler(torch)
        except Exception:
            pass
        return bool(_undo)


def uninstall() -> None:
    """Undo :func:`install` and forget what was seen (tests)."""
    with _lock:
        while _undo:
            owner, name, original = _undo.pop()
            try:
                setattr(owner, name, original)
            except Exception:
                pass
        _amp_seen.clear()
        _scaler_seen[0] = False


def _wrap_autocast(torch) -> None:
    cls = torch.amp.autocast_mode.autocast
    original = cls.__dict__.get("__enter__")
    if not callable(original):
        return
    seen = _amp_seen

    def __enter__(self):
        result = original(self)
        try:
            if self._enabled:
                dtype = self.fast_dtype
                if dtype not in seen:
                    seen[dtype] = str(self.device)
        except Exception:
            pass
        return result

    __enter__.__wrapped__ = original
    __enter__.__doc__ = original.__doc__
    _undo.append((cls, "__enter__", original))
    cls.__enter__ = __enter__


def _wrap_scaler(torch) -> None:
    # torch >= 2.3: torch.amp.GradScaler (torch.cuda.amp.GradScaler derives from it); 1.13: torch.cuda.amp's.
    amp = getattr(torch, "amp", None)
    cls = getattr(getattr(amp, "grad_scaler", None), "GradScaler", None)
    if cls is None or "scale" not in cls.__dict__:
        cls = torch.cuda.amp.GradScaler
    original = cls.__dict__.get("scale")
    if not callable(original):
        return
    flag = _scaler_seen

    def scale(self, outputs):
        if not flag[0]:
            try:
                if self.is_enabled():
                    flag[0] = True
                    cls.scale = original  # said once and for all: the steps go back to the original
            except Exception:
                pass
        return original(self, outputs)

    scale.__wrapped__ = original
    scale.__doc__ = original.__doc__
    _undo.append((cls, "scale", original))
    cls.scale = scale


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def amp_in_use(steps_seen: bool, compiled: bool):
    """The autocast dtypes seen ("bfloat16", "float16,bfloat16"); "off" once steps ran without any;
    None while unknown. Autocast entered inside compiled code is not seen: with torch.compile in use
    and none seen, it stays unknown rather than "off"."""
    if _amp_seen:
        return ",".join(sorted(_dtype_name(d) for d in list(_amp_seen)))
    if steps_seen and not compiled:
        return "off"
    return None


def settings(torch) -> dict:
    """The ``stack`` group's global settings: a few C calls, safe from any thread, no CUDA init."""
    stack = {}
    put(stack, "matmul_precision", lambda: torch.get_float32_matmul_precision())
    put(stack, "cudnn_tf32", lambda: bool(torch.backends.cudnn.allow_tf32))
    put(stack, "cudnn_benchmark", lambda: bool(torch.backends.cudnn.benchmark))
    put(stack, "cudnn_deterministic", lambda: bool(torch.backends.cudnn.deterministic))
    put(stack, "deterministic_algorithms", lambda: bool(torch.are_deterministic_algorithms_enabled()))
    put(stack, "cuda_in_use", lambda: bool(torch.cuda.is_initialized()))
    put(stack, "cpu_affinity", lambda: len(os.sched_getaffinity(0)))
    put(stack, "local_world_size", lambda: int(os.environ["LOCAL_WORLD_SIZE"]))
    return stack


def nccl_version(torch):
    """"2.21.5", from the NCCL library torch links (ncclGetVersion: no device call); None without NCCL."""
    try:
        nccl = sys.modules.get("torch.cuda.nccl") or getattr(torch.cuda, "nccl", None)
        if nccl is None or not hasattr(torch._C, "_nccl_version"):
            return None
        parts = nccl.version()
        if isinstance(parts, int):  # before 1.x returned the raw code
            return str(parts)
        return ".".join(str(p) for p in parts[:3]) + ("-%s" % parts[3] if len(parts) > 3 else "")
    except Exception:
        return None


def compile_totals(seen_after_us: int = 0):
    """What torch.compile did so far, from torch._dynamo.utils if the program imported it; None if not.

    Returns ``(totals, newest_us, recompiles, compile_s, recompile_s)``: the counters (frames
    compiled, graph breaks, unique graphs), and from the compilation records newer than
    ``seen_after_us`` (a bounded deque of the latest 64), how long they took to compile, how many
    were recompiles (not a frame's first compile) and how long those took. ``recompiles`` and
    ``recompile_s`` are None where the records do not say which compiles were recompiles.
    """
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    # .get, never []: counters is a defaultdict, and a lookup would add a key from this thread.
    frames = counters.get("frames") or {}
    compiles = int(frames.get("total", 0))
    if compiles == 0:
        return None
    breaks = counters.get("graph_break") or {}
    stats = counters.get("stats") or {}
    totals = {
        "compiles": compiles,
        "graph_breaks": int(sum(list(breaks.values()))),
        "unique_graphs": int(stats.get("unique_graphs", 0)),
    }
    newest = seen_after_us
    recompiles = 0
    known = True
    compile_s = 0.0
    recompile_s = 0.0
    get = getattr(utils, "get_compilation_metrics", None)
    records = list(get()) if callable(get) else []
    for record in records:
        start = getattr(record, "start_time_us", None)
        if start is None:
            started = getattr(record, "start_time", None)
            start = int(started * 1e6) if isinstance(started, (int, float)) else None
        if start is None or start <= seen_after_us:
            continue
        newest = max(newest, start)
        seconds = getattr(record, "entire_frame_compile_time_s", None)
        seconds = float(seconds) if isinstance(seconds, (int, float)) else 0.0
        compile_s += seconds
        if not hasattr(record, "recompile_reason"):
            known = False
        elif record.recompile_reason is not None:
            recompiles += 1
            recompile_s += seconds
    if not known:
        return totals, newest, None, compile_s, None
    return totals, newest, recompiles, compile_s, recompile_s


class Watcher:
    """The ``stack`` and ``compile`` groups of one scope, polled from the sender thread."""

    def __init__(self, sent: dict, interval: float = INTERVAL_S):
        self.interval = interval
        self._sent = {name: sent.get(name) for name in ("stack", "compile")}
        self._next = 0.0
        self._seen_us = 0
        self._recompiles = 0
        self._recompiles_known = True
        self._compile_s = 0.0
        self._recompile_s = 0.0
        self._history = []  # (monotonic s, recompiles so far, their compile s so far), over the last minute
        self._watch_from = None  # steps done when autocast started being watched
        self._lock = threading.Lock()  # the sender thread polls; close() polls from the training thread

    def poll(self, now: float, steps: int, force: bool = False):
        """The groups that changed since the last sent, or None; reads nothing before the interval."""
        if not force and now < self._next:
            return None
        with self._lock:
            return self._poll(now, steps, force)

    def _poll(self, now: float, steps: int, force: bool):
        if not force and now < self._next:
            return None
        self._next = now + self.interval
        torch = sys.modules.get("torch")
        if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
            return None  # not imported, or still importing on the training thread
        if install(torch) and self._watch_from is None:
            self._watch_from = steps
        compile_group = self._compile(now)
        current = {"stack": self._stack(torch, steps, bool(compile_group)), "compile": compile_group}
        changed = {name: group for name, group in current.items() if group and group != self._sent.get(name)}
        self._sent.update(changed)
        return changed or None

    def _stack(self, torch, steps: int, compiled: bool) -> dict:
        stack = settings(torch)
        # "off" needs a whole step seen while watching autocast.
        amp = amp_in_use(self._watch_from is not None and steps > self._watch_from, compiled)
        if amp is not None:
            stack["amp"] = amp
        if _scaler_seen[0]:
            stack["grad_scaler"] = True
        return stack

    def _compile(self, now: float):
        try:
            found = compile_totals(self._seen_us)
        except Exception:  # a record or counter mutated under us: read again next time
            return self._sent.get("compile")
        if found is None:
            return None
        totals, self._seen_us, recompiles, compile_s, recompile_s = found
        self._compile_s += compile_s
        group = {"in_use": True}
        group.update(totals)
        group["compile_s"] = round(self._compile_s, 3)
        if recompiles is None or not self._recompiles_known:
            self._recompiles_known = False
            return group
        self._recompiles += recompiles
        self._recompile_s += recompile_s
        history = self._history
        history.append((now, self._recompiles, self._recompile_s))
        # history[0] becomes the newest reading at least a minute old, if there is one.
        while len(history) > 1 and history[1][0] <= now - _RECENT_S:
            history.pop(0)
        _, recompiles_then, seconds_then = history[0] if history[0][0] <= now - _RECENT_S else (now, 0, 0.0)
        group["recompiles"] = self._recompiles
        group["recompiles_1m"] = self._recompiles - recompiles_then
        group["recompile_s_1m"] = round(self._recompile_s - seconds_then, 3)
        return group

