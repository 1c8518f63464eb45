"""The hook's only output: at most one stderr line per topic for the life of the process."""

from __future__ import annotations

import sys
import threading

__all__ = ["warn_once", "count", "reset"]

SIDECAR = "sidecar"
USAGE = "usage"
INTERNAL = "internal"

_lock = threading.Lock()
_warned = set()


def warn_once(topic: str, message: str) -> bool:
    """Print ``stepscope: <message>`` unless ``topic`` was already warned about; never raises."""
    with _lock:
        if topic in _warned:
            return False
        _warned.add(topic)
    try:
        sys.stderr.write("stepscope: %s\n" % message)
        sys.stderr.flush()
    except Exception:
        pass
    return True


def count() -> int:
    """How many lines the hook has printed in this process."""
    return len(_warned)


def reinit_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


def reset() -> None:
    """Forget what was warned about (tests)."""
    with _lock:
        _warned.clear()
