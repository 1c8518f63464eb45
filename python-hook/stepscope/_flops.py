"""The FLOPs of one training step, for MFU: given by the user, or counted once by PyTorch's own
counter (torch.utils.flop_counter.FlopCounterMode, torch >= 2.1) around one step the user marks.

The count is sent in the rank's env as ``model.flops_per_step`` (and ``model.flops_from``); the
sidecar divides it by the step time and the GPU's peak for its dtype. Counting runs the marked
step under a dispatch mode (that one step is slower); every later ``count_flops()`` is a shared
no-op context, so a loop may keep the ``with`` in it.
"""

from __future__ import annotations

import math
import sys

from . import _log

__all__ = ["valid_flops", "Counter", "NULL"]

#: Above any step a machine runs today (10^22 FLOPs is hours of a 1000-GPU cluster).
MAX_FLOPS = 1e22


def valid_flops(n):
    """``n`` as a float if it is a FLOP count the sidecar accepts, else None."""
    if isinstance(n, bool):
        return None
    try:
        value = float(n)
    except Exception:
        return None
    return value if math.isfinite(value) and 0 < value <= MAX_FLOPS else None


class _Null:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False


NULL = _Null()


class Counter:
    """One FlopCounterMode window; ``report(flops)`` is called with its total on a clean exit, and
    ``retry()`` when the step raised (a later step may be counted instead)."""

    def __init__(self, report, retry):
        self._report = report
        self._retry = retry
        self._mode = None

    def __enter__(self):
        try:
            torch = sys.modules.get("torch")
            flop_counter = getattr(getattr(torch, "utils", None), "flop_counter", None) if torch is not None else None
            if flop_counter is None and torch is not None:
                import torch.utils.flop_counter as flop_counter  # noqa: F811 (imported on first use only)
            mode = flop_counter.FlopCounterMode(display=False)
            mode.__enter__()
            self._mode = mode
        except Exception:
            self._mode = None
            _log.warn_once("flops", "FLOPs not counted: torch.utils.flop_counter needs torch >= 2.1 (give them with scope.set_flops_per_step(n)); MFU not measured")
        return self

    def __exit__(self, exc_type, exc, tb):
        mode, self._mode = self._mode, None
        if mode is None:
            return False
        try:
            mode.__exit__(exc_type, exc, tb)
            if exc_type is None:
                self._report(mode.get_total_flops())
            else:
                self._retry()
        except Exception:
            _log.warn_once("flops", "FLOPs not counted: the FLOP counter failed; MFU not measured")
        return False
