"""Where a stalled rank is: read by the sender thread, never the training thread, when the sidecar asks.

A ``capture`` request from the sidecar (sent when it judges the rank stalled: no step for a while,
its process alive) is answered with one ``stack`` frame:

- the training thread's Python stack, from ``sys._current_frames()``: file, line and function of
  each frame, innermost first, at most ``MAX_FRAMES`` (the innermost and the outermost kept, the
  middle counted); each frame says whether it is the script's own code, a library's (the standard
  library, site-packages) or the hook's. No local variable, argument or source line is read: a
  source line would mean reading a file, which on a stalled filesystem would stall this thread too.
- each other thread's innermost frame (all frames of every thread with ``deep``);
- how long the training thread's stack has not moved (``Stillness``), so that a rank stuck at one
  line is told from one busy outside its steps (an evaluation, a checkpoint);
- its DataLoader workers (the process's children) as ``/proc`` shows them: state, what the kernel
  waits on (``wchan``), CPU time; and each worker's own Python stack, where it can tell: once captures
  are on, every child the training process forks (a DataLoader worker) has ``faulthandler`` dump its
  threads to a file of its own on ``SIGUSR2`` (only where nothing else handles that signal there),
  and the sender signals those still alive, checked by their start time, and reads what they wrote;
- PyTorch's Flight Recorder, where the torch in use has it and a process group exists: per process
  group, the sequence number of the last collective enqueued, started and completed, and the
  collectives still pending. Compared across ranks, it names the rank that never joined.

Everything is bounded (frames, threads, characters, bytes) and nothing here raises.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import re
import signal
import sys
import sysconfig
import tempfile
import threading
import time

__all__ = ["capture", "Stillness", "flight_recorder", "workers", "worker_stacks", "arm_children", "parse_faulthandler", "stack_key", "frame_kind", "MAX_FRAMES", "MAX_BYTES"]

MAX_FRAMES = 48  # of the training thread: the innermost 40 and the outermost 8
_OUTER_KEPT = 8
MAX_DEEP_FRAMES = 64  # of every thread, with `deep`
MAX_THREADS = 32
MAX_TEXT = 200  # characters of a file path (its end is kept) or a function or thread name
MAX_BYTES = 16 * 1024  # the frames of one capture, roughly as encoded; past it outer frames go
MAX_DEEP_BYTES = 64 * 1024
MAX_WORKERS = 16
MAX_PENDING = 4  # pending collectives listed per process group
MAX_GROUPS = 8
_KEY_DEPTH = 64

USER, LIB, HOOK = "user", "lib", "hook"

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs():
    dirs = set()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            path = sysconfig.get_paths().get(name)
        except Exception:
            path = None
        if path:
            dirs.add(os.path.abspath(path) + os.sep)
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        dirs.add(os.path.join(os.path.abspath(prefix), "lib") + os.sep)
    return tuple(sorted(dirs, key=len, reverse=True))


_LIB_DIRS = _library_dirs()
_LIB_MARKS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def frame_kind(filename: str) -> str:
    """``hook`` for stepscope's own files, ``lib`` for the standard library and installed packages
    (and frozen or generated code), ``user`` for the rest: the script's own code."""
    if filename.startswith(_HOOK_DIR):
        return HOOK
    if filename.startswith("<"):
        return USER if filename in ("<stdin>", "<string>") or filename.startswith("<ipython-input") else LIB
    if any(mark in filename for mark in _LIB_MARKS) or filename.startswith(_LIB_DIRS):
        return LIB
    return USER


def _text(value, limit=MAX_TEXT, keep_end=False) -> str:
    text = str(value)
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1):] if keep_end else text[: limit - 1] + "…"


def _frames(frame, limit: int, outer: int):
    """[file, line, function, kind] of ``frame`` and its callers, innermost first, with the number
    of frames left out between the innermost ``limit - outer`` and the outermost ``outer``."""
    chain = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    if len(chain) > limit:
        kept = chain[: limit - outer] + chain[-outer:] if outer else chain[:limit]
        skipped = len(chain) - limit
    else:
        kept, skipped = chain, 0
    out = []
    for f in kept:
        code = f.f_code
        filename = code.co_filename
        line = f.f_lineno
        out.append([_text(filename, keep_end=True), line if isinstance(line, int) and line >= 0 else 0, _text(code.co_name), frame_kind(filename)])
    return out, skipped, (limit - outer if skipped and outer else None)


def _cost(frames) -> int:
    return sum(len(f[0]) + len(f[2]) + 12 for f in frames)


def stack_key(frame):
    """What tells one moment's stack from another's, cheaply: each frame's code and line."""
    key = []
    while frame is not None and len(key) < _KEY_DEPTH:
        key.append((id(frame.f_code), frame.f_lineno))
        frame = frame.f_back
    return tuple(key)


class Stillness:
    """How long the training thread's stack has stayed the same, sampled by the sender thread.

    Sampled only once no step has ended for ``after_s`` (so never while a job steps faster than
    that), at most every ``every_s``: one ``sys._current_frames()`` and a tuple per sample.
    """

    def __init__(self, after_s: float = 1.0, every_s: float = 0.5):
        self.after_s = after_s
        self.every_s = every_s
        self._key = None
        self._since = None  # monotonic time the stack took its current shape (as first seen)
        self._next = 0.0

    def reset(self) -> None:
        self._key = None
        self._since = None

    def sample(self, tid, now: float, quiet_s: float) -> None:
        """``quiet_s``: seconds since the last step ended (as the sender saw it)."""
        if quiet_s < self.after_s:
            self.reset()
            return
        if now < self._next:
            return
        self._next = now + self.every_s
        frame = sys._current_frames().get(tid)
        if frame is None:
            self.reset()
            return
        key = stack_key(frame)
        del frame
        if self._key is None:
            # First look since the last step: unmoved, as far as can be told, since that step ended.
            self._key = key
            self._since = now - quiet_s
        elif key != self._key:
            self._key = key
            self._since = now

    def still_ms(self, now: float):
        """ms the stack has not moved, as sampled (from the last step's end while it never changed); None before a sample."""
        if self._since is None:
            return None
        return int(max(0.0, now - self._since) * 1000)


def capture(training_tid, *, exclude=(), deep: bool = False) -> dict:
    """The threads of this process: the training thread's stack and each other thread's innermost
    frame (every frame with ``deep``). ``exclude``: thread ids left out (the sender itself)."""
    names = {}
    try:
        for thread in threading.enumerate():
            names[thread.ident] = thread.name
    except Exception:
        pass
    frames = sys._current_frames()
    budget = MAX_DEEP_BYTES if deep else MAX_BYTES
    threads = []
    training = frames.get(training_tid)
    if training is not None:
        stack, skipped, at = _frames(training, MAX_FRAMES, _OUTER_KEPT)
        while _cost(stack) > budget // 2 and len(stack) > 1:
            stack.pop(len(stack) // 2)
            skipped += 1
        entry = {"name": _text(names.get(training_tid, "training")), "training": True, "frames": stack, "skipped": skipped}
        if at is not None:
            entry["skipped_at"] = at
        threads.append(entry)
        budget -= _cost(stack)
    for tid, frame in sorted(frames.items(), key=lambda item: str(names.get(item[0], ""))):
        if tid == training_tid or tid in exclude:
            continue
        if len(threads) >= MAX_THREADS:
            break
        if deep:
            stack, skipped, at = _frames(frame, MAX_DEEP_FRAMES, _OUTER_KEPT)
        else:
            stack, skipped, at = _frames(frame, 1, 0)
        cost = _cost(stack)
        if cost > budget:
            break
        budget -= cost
        entry = {"name": _text(names.get(tid, "thread-%d" % tid)), "training": False, "frames": stack, "skipped": skipped}
        if at is not None:
            entry["skipped_at"] = at
        threads.append(entry)
    del frames, training
    return {"threads": threads, "training_found": any(t["training"] for t in threads)}


def workers(pid=None, proc_root: str = "/proc") -> list:
    """The process's children (DataLoader workers) as /proc shows them: pid, state, wchan, CPU s."""
    pid = pid or os.getpid()
    out = []
    try:
        names = os.listdir(proc_root)
    except OSError:
        return out
    tick = _ticks()
    for name in names:
        if not name.isdigit():
            continue
        stat = _read(os.path.join(proc_root, name, "stat"))
        if stat is None:
            continue
        close = stat.rfind(")")
        fields = stat[close + 2:].split()
        if len(fields) < 13:
            continue
        try:
            if int(fields[1]) != pid:
                continue
            cpu_s = (int(fields[11]) + int(fields[12])) / tick
        except ValueError:
            continue
        wchan = _read(os.path.join(proc_root, name, "wchan"))
        out.append(
            {
                "pid": int(name),
                "name": _text(stat[stat.find("(") + 1:close], 32),
                "state": fields[0][:1],
                "wchan": _text(wchan.strip(), 64) if wchan and wchan.strip() not in ("", "0") else None,
                "cpu_s": round(cpu_s, 2),
            }
        )
        if len(out) >= MAX_WORKERS:
            break
    return sorted(out, key=lambda w: w["pid"])


# --- the DataLoader workers' own stacks ------------------------------------------------------

_ARMED = "stepscope-armed"
_WORKER_FRAMES = 32
_arming = hasattr(signal, "SIGUSR2")  # children forked from this process are armed (not theirs)
_child_dump = None  # in an armed child: the file faulthandler writes to (kept open)


def stacks_dir(pid=None) -> str:
    """Where the children of process ``pid`` (this one) dump their stacks: a folder only its user reads."""
    return os.path.join(tempfile.gettempdir(), "stepscope-stacks-%d" % (pid or os.getpid()))


def _start_ticks(pid) -> str:
    stat = _read("/proc/%s/stat" % pid) or ""
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""


def _arm_in_child() -> None:
    """A forked child of the training process (a DataLoader worker): dump every thread on SIGUSR2.

    An open, a write and a ``faulthandler.register`` in the child, once, as it starts; the parent pays
    nothing. Only where nothing else handles SIGUSR2 in the child; a child of a child is not armed."""
    global _arming, _child_dump
    if not _arming:
        return
    _arming = False
    try:
        if signal.getsignal(signal.SIGUSR2) != signal.SIG_DFL:
            return  # something else handles it here: leave it alone, and never send it
        folder = stacks_dir(os.getppid())
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, str(os.getpid()))
        with open(path, "w") as f:  # whatever an earlier process of this pid left
            f.write("%s %d %s\n" % (_ARMED, os.getpid(), _start_ticks("self")))
        _child_dump = open(path, "a")  # appends: after the parent empties it, dumps land at its start
        faulthandler.register(signal.SIGUSR2, file=_child_dump, all_threads=True, chain=False)
    except Exception:
        _child_dump = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_arm_in_child)
_OWNER = os.getpid()


@atexit.register
def _remove_dumps_at_exit() -> None:
    if os.getpid() == _OWNER:  # not in a forked child that exits
        forget_dead_children(remove_folder=True)


_FRAME_LINE = re.compile(r'^\s+File "(.*)", line (\d+) in (.+)$')


def parse_faulthandler(text: str):
    """The frames of the main thread (the one that handled the signal, else the last listed), innermost first."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith(("Current thread ", "Thread ")):
            current = {"current": line.startswith("Current thread "), "frames": []}
            blocks.append(current)
            continue
        match = _FRAME_LINE.match(line)
        if match and current is not None and len(current["frames"]) < _WORKER_FRAMES:
            filename = match.group(1)
            current["frames"].append([_text(filename, keep_end=True), int(match.group(2)), _text(match.group(3)), frame_kind(filename)])
    if not blocks:
        return None
    chosen = next((b for b in blocks if b["current"]), blocks[-1])
    return chosen["frames"]


def worker_stacks(workers, wait_s: float = 0.3) -> None:
    """Adds its Python stack (``frames``) to each worker that was armed and is still the process it was."""
    folder = stacks_dir()
    if not workers or not os.path.isdir(folder):
        return
    asked = {}
    for worker in workers:
        path = os.path.join(folder, str(worker["pid"]))
        head = (_read(path) or "").split("\n", 1)[0]
        parts = head.split()
        if len(parts) != 3 or parts[0] != _ARMED or parts[1] != str(worker["pid"]) or parts[2] != _start_ticks(worker["pid"]):
            continue  # not armed, or another process now has its pid: never signalled
        if worker["state"] == "Z":
            continue
        try:
            with open(path, "r+") as f:
                f.truncate(len(head) + 1)
            os.kill(worker["pid"], signal.SIGUSR2)
            asked[worker["pid"]] = (worker, path, len(head) + 1)
        except OSError:
            continue
    deadline = time.monotonic() + wait_s
    seen = {}
    while asked and time.monotonic() < deadline:
        time.sleep(0.02)
        for pid, (worker, path, start) in list(asked.items()):
            text = (_read(path, 65536) or "")[start:]
            # Done once what it wrote stopped growing: the handler writes the whole dump at once.
            if text and seen.get(pid) == len(text):
                frames = parse_faulthandler(text)
                if frames is not None:
                    worker["frames"] = frames
                    del asked[pid]
            seen[pid] = len(text)
    for worker, _, _ in asked.values():
        worker["stack_error"] = "no answer in %.1f s (state %s: a process in uninterruptible I/O answers no signal)" % (wait_s, worker["state"])


def forget_dead_children(remove_folder: bool = False) -> None:
    """Removes the dump files of children that are gone (the sender does it now and then), or all of them."""
    folder = stacks_dir()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.isdigit() and (remove_folder or not os.path.exists("/proc/%s" % name) or _parent(name) != os.getpid()):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
    if remove_folder:
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _parent(pid) -> int:
    stat = _read("/proc/%s/stat" % pid) or ""
    fields = stat[stat.rfind(")") + 2:].split()
    return _int(fields[1], -1) if len(fields) > 1 else -1


def _ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK")) or 100
    except (ValueError, OSError, AttributeError):
        return 100


def _read(path: str, limit: int = 4096):
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


# --- PyTorch's Flight Recorder -----------------------------------------------------------------

# (function, whether it takes a backend) in the order tried: the generic recorder of recent torch
# releases (gloo among others), then NCCL's own (torch 2.x builds with NCCL).
_DUMPS = (("_dump_fr_trace_json", True), ("_dump_nccl_trace_json", False))


def flight_recorder(modules=None):
    """A summary of PyTorch's Flight Recorder for this process, or None where there is nothing to
    read (no torch.distributed, no process group); ``{"error": why}`` where it cannot be read."""
    modules = sys.modules if modules is None else modules
    dist = modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not dist.is_available() or not dist.is_initialized():
            return None
        backend = str(dist.get_backend()).lower()
    except Exception as exc:
        return {"error": _text("%s: %s" % (type(exc).__name__, exc))}
    c10d = modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return {"backend": _text(backend, 32), "error": "this torch has no Flight Recorder"}
    last_error = "this torch has no Flight Recorder"
    for name, generic in _DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        if not generic and "nccl" not in backend:
            continue
        try:
            raw = dump(True, True, backend=_recorder_backend(backend)) if generic else dump(True, True)
        except TypeError:
            try:
                raw = dump(True, True)
            except Exception as exc:
                last_error = _text("%s: %s" % (type(exc).__name__, exc))
                continue
        except Exception as exc:
            last_error = _text("%s: %s" % (type(exc).__name__, exc))
            continue
        summary = summarize_flight_recorder(raw, backend)
        if summary is not None and summary.get("groups"):
            return summary
        last_error = "the Flight Recorder holds nothing for this backend (off: TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE=0?)"
    return {"backend": _text(backend, 32), "error": last_error}


def _recorder_backend(backend: str) -> str:
    """The recorder instance to dump for a process group's backend string ("gloo", "cpu:gloo,cuda:nccl")."""
    return "nccl" if "nccl" in backend else "gloo"


def summarize_flight_recorder(raw, backend: str):
    """The JSON dump of a Flight Recorder (``_dump_fr_trace_json``, ``_dump_nccl_trace_json``),
    reduced to what tells ranks apart: per process group, the last collective enqueued, started and
    completed, and the collectives not yet completed. None where it is not such a dump."""
    try:
        if isinstance(raw, (bytes, bytearray)):
            raw = raw.decode("utf-8", "replace")
        dump = json.loads(raw) if isinstance(raw, str) else raw
    except Exception:
        return None
    if not isinstance(dump, dict):
        return None
    status = dump.get("pg_status") or {}
    config = dump.get("pg_config") or {}
    entries = dump.get("entries") or []
    if not isinstance(status, dict) or not isinstance(entries, list):
        return None
    names = {}
    for entry in entries:
        if isinstance(entry, dict):
            group = entry.get("process_group")
            if isinstance(group, (list, tuple)) and len(group) >= 2:
                names.setdefault(str(entry.get("pg_id", group[0])), str(group[1]))
    groups = []
    for pg_id, state in sorted(status.items(), key=lambda item: _int(item[0], 1 << 30)):
        if not isinstance(state, dict) or len(groups) >= MAX_GROUPS:
            continue
        pending = []
        for entry in entries:
            if not isinstance(entry, dict) or str(entry.get("pg_id")) != str(pg_id):
                continue
            if entry.get("state") == "completed" or entry.get("is_p2p"):
                continue
            seq = _int(entry.get("collective_seq_id"), None)
            done = _int(state.get("last_completed_collective"), -1)
            if seq is None or seq <= done:
                continue
            pending.append({"seq": seq, "op": _text(entry.get("profiling_name", "?"), 64), "state": _text(entry.get("state", "?"), 16)})
        pending.sort(key=lambda p: p["seq"])
        ranks = None
        for key, value in config.items() if isinstance(config, dict) else ():
            if isinstance(value, dict) and (value.get("name") == names.get(str(pg_id)) or (key == "" and str(pg_id) == "0")):
                ranks = _text(value.get("ranks", ""), 120) or None
                break
        groups.append(
            {
                "id": _text(pg_id, 32),
                "name": _text(names.get(str(pg_id), "default_pg" if str(pg_id) == "0" else ""), 64),
                "ranks": ranks,
                "enqueued": _int(state.get("last_enqueued_collective"), -1),
                "started": _int(state.get("last_started_collective"), -1),
                "completed": _int(state.get("last_completed_collective"), -1),
                "pending": pending[:MAX_PENDING],
            }
        )
    return {"backend": _text(backend, 32), "version": _text(dump.get("version", ""), 16), "groups": groups}


def _int(value, default):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
