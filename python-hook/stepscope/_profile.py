"""Deep capture: a torch.profiler window of K steps, asked for by the sidecar (a `profile` request).

The training thread only starts and stops the profiler at step ends (one attribute read a step when
no capture is asked for); the sender thread exports the trace, gzips it within the sidecar's bound
and sends it in chunks. Anything that fails is answered with the reason, and training goes on.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import tempfile

__all__ = ["Window", "MAX_STEPS", "trace_chunks"]

#: The most steps one window may hold (the sidecar asks for 20 by default).
MAX_STEPS = 1000


class Window:
    """One request: ``step()`` at each step end on the training thread, True once the window is done."""

    __slots__ = ("id", "steps", "max_bytes", "chunk_bytes", "left", "prof", "error")

    def __init__(self, request_id: int, steps: int, max_bytes: int, chunk_bytes: int):
        self.id = request_id
        self.steps = steps
        self.max_bytes = max_bytes
        self.chunk_bytes = chunk_bytes
        self.left = steps
        self.prof = None
        self.error = None

    def step(self) -> bool:
        if self.prof is None:
            self.prof = _start()
            return False
        self.left -= 1
        if self.left > 0:
            return False
        self.prof.stop()
        return True

    def fail(self, exc) -> None:
        self.error = "%s: %s" % (type(exc).__name__, str(exc)[:200])
        prof, self.prof = self.prof, None
        if prof is not None:
            try:
                prof.stop()
            except Exception:
                pass


def _start():
    torch = sys.modules.get("torch")
    if torch is None:
        raise RuntimeError("torch is not imported in this process: no torch.profiler")
    profiler = torch.profiler
    activities = [profiler.ProfilerActivity.CPU]
    if torch.cuda.is_initialized():
        activities.append(profiler.ProfilerActivity.CUDA)
    prof = profiler.profile(activities=activities)
    prof.start()
    return prof


def trace_chunks(window: Window) -> list:
    """Sender thread: the window's Chrome trace, gzipped, in chunks; raises with the reason if it cannot."""
    fd, path = tempfile.mkstemp(prefix="stepscope-trace-", suffix=".json")
    os.close(fd)
    try:
        window.prof.export_chrome_trace(path)
        out = io.BytesIO()
        with open(path, "rb") as source, gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0) as packed:
            while True:
                block = source.read(1 << 20)
                if not block:
                    break
                packed.write(block)
                if out.tell() > window.max_bytes:
                    raise ValueError("the trace passes the sidecar's bound of %d bytes: ask for fewer steps" % window.max_bytes)
        data = out.getvalue()
        if len(data) > window.max_bytes:
            raise ValueError("the trace is %d bytes gzipped, over the sidecar's bound of %d bytes: ask for fewer steps" % (len(data), window.max_bytes))
    finally:
        window.prof = None
        try:
            os.unlink(path)
        except OSError:
            pass
    size = max(1024, window.chunk_bytes)
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]
