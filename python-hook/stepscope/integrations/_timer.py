"""Steps timed from a framework's hooks, shared by the Lightning and Transformers callbacks.

A step's **data** is the time from the end of the previous batch (or the epoch's start, or the end of
a validation, log or save) to the framework's "batch starts" hook: the framework reads the batch in
between (and, for Lightning, moves it to the device). **compute** runs from that hook to "batch ends".
The rest of the step -- validation, logging, checkpoints between batches -- is "other". A step ends at
the first "batch ends" after an optimizer step (or after a backward pass, where no optimizer ever
steps), so accumulated gradients make one step. Once torch has CUDA in use, CUDA events recorded at
"batch starts" and "batch ends" give each step's GPU compute time and the GPU's idle gap before it
(``_cuda.Marker``), read off the training thread as the explicit API's are.

Every method runs on the training thread, costs a few attribute updates and never raises.
"""

from __future__ import annotations

import time

from .. import _cuda, _log
from .._scope import _PROVISIONAL

_now = time.perf_counter_ns


class HookTimer:
    def __init__(self, kind: str, scope=None, close_at_end=None):
        self.kind = kind
        self.scope = scope  # given, or found at start()
        self.given = scope is not None
        self.close_at_end = close_at_end  # None: close what this timer started itself
        self.owned = False
        self.active = False
        self.mark = 0  # where the current data interval began
        self.batch_at = 0  # when the current batch's compute began (0: no batch open)
        self.samples = None
        self.stepped_in_step = False
        self.backward_in_step = False
        self.optimizer_ever = False
        self.steps = 0
        self.errors = 0
        self.marker = None

    def start(self, has_optimizer=False):
        """Training begins: find (or make) the scope. ``has_optimizer``: the framework holds an
        optimizer, so a backward pass alone never ends a step (gradients are accumulating)."""
        self.optimizer_ever = bool(has_optimizer)
        try:
            scope = self.scope if self.given else None
            if scope is None or scope._closed:
                from .. import _auto

                scope, self.owned = _auto.scope_for(self.kind)
            self.scope = scope
            self.marker = _cuda.Marker(scope)
            scope._eval_on = True  # the framework's validation is seen (resume(evaluation=True)): eval_ns is sent
            self.active = True
            self.mark = _now()
            self.batch_at = 0
            self.samples = None
            self.stepped_in_step = self.backward_in_step = False
        except Exception as exc:
            self.active = False
            _log.warn_once("integration:" + self.kind, "%s callback could not start (%s: %s); training continues" % (self.kind, type(exc).__name__, exc))

    def epoch_start(self):
        if not self.active:
            return
        try:
            t = _now()
            if self.scope._pending == _PROVISIONAL:
                self.scope._begin(t)
            if not self.batch_at:
                self.mark = t
        except Exception:
            self._error()

    def batch_start(self, samples=None):
        if not self.active:
            return
        try:
            t = _now()
            scope = self.scope
            if scope._pending == _PROVISIONAL:
                scope._begin(self.mark)
            if self.batch_at:  # a batch that never ended: its time is compute
                scope._compute.total += t - self.batch_at
                self.marker.close_now()
                self.marker.flush()
            else:
                scope._data.total += t - self.mark
            self.batch_at = t
            self.marker.open()
            if samples is not None:
                self.samples = samples if self.samples is None else self.samples + samples
        except Exception:
            self._error()

    def optimizer_step(self):
        self.stepped_in_step = True
        self.optimizer_ever = True

    def backward(self):
        self.backward_in_step = True

    def batch_end(self, force=False):
        """The batch is done; the step ends if an optimizer stepped in it (or ``force``)."""
        if not self.active or not self.batch_at:
            return
        try:
            t = _now()
            scope = self.scope
            scope._compute.total += t - self.batch_at
            self.batch_at = 0
            self.mark = t
            self.marker.close_now()
            self.marker.flush()
            if force or self.stepped_in_step or (self.backward_in_step and not self.optimizer_ever):
                if t <= scope._start:
                    t = scope._start + 1
                samples, self.samples = self.samples, None
                self.stepped_in_step = self.backward_in_step = False
                scope.step(samples, t)
                self.steps += 1
        except Exception:
            self._error()

    def resume(self, evaluation=False):
        """A validation, log or save between batches ended: the time it took stays in "other";
        a validation's (``evaluation``) is the step's evaluation, told apart from the rest."""
        if self.active and not self.batch_at:
            t = _now()
            if evaluation:
                try:
                    self.scope._eval.total += max(0, t - self.mark)
                except Exception:
                    self._error()
            self.mark = t

    def finish(self, timeout=5.0):
        """Training ended: close the scope if this timer made it (or was told to)."""
        if not self.active:
            return
        self.active = False
        try:
            close = self.owned if self.close_at_end is None else self.close_at_end
            if close:
                self.scope.close(timeout=timeout)
        except Exception:
            self._error()

    def _error(self):
        self.errors += 1
        _log.warn_once(_log.INTERNAL, "internal error in the %s callback (training continues; timing may be incomplete)" % self.kind)
