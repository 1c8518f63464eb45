"""The zero-code path's wrappers around stand-ins that cost nothing, for the benchmarks that time the
hook's own code on the training thread (bench_auto.py, bench_hot.py, bench_floor.py): built by the
hook's own ``make_*`` functions, with a scope that has no connection (nothing is encoded or sent);
the explicit API's loop of steps that do nothing, with a phase that does nothing beside it; and
that loop's floor: its shape written with the least Python can do (bench_hook.py, bench_floor.py)."""

from __future__ import annotations

import collections
import threading
import time
from types import SimpleNamespace


class Empty:
    """A context manager that does nothing: a bare loop's phase."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return False


class Timed:
    """A `with` that reads the clock at both ends and adds the difference: a phase's least work."""

    __slots__ = ("t0", "total")

    def __init__(self):
        self.t0 = self.total = 0

    def __enter__(self):
        self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.total += time.perf_counter_ns() - self.t0
        return False


class Appender:
    """A step() with the least work: a clock read, a count, a tuple appended to a bounded deque."""

    __slots__ = ("queue", "seq")

    def __init__(self):
        self.queue = collections.deque(maxlen=16384)
        self.seq = 0

    def step(self, samples=None):
        now = time.perf_counter_ns()
        self.seq += 1
        self.queue.append((self.seq, now, 0, 0, 0, 0, samples, None, None))


def generator(data):
    yield from data


def readme_hooked(scope, data):
    """The README loop (loader, two phases, step) through the hook, each phase's body a move."""
    result = None
    for batch in scope.loader(data):
        with scope.phase("h2d"):
            moved = batch
        with scope.phase("compute"):
            result = moved
        scope.step(samples=8)
    return result


def readme_floor(data, timed, appender):
    """readme_hooked's shape with the least each piece can do: the floor of the explicit API, against
    which bench_hook.py and bench_floor.py judge the hook's own cost."""
    result = None
    for batch in generator(data):
        with timed:
            moved = batch
        with timed:
            result = moved
        appender.step(samples=8)
    return result


def explicit_steps(scope, n):
    """The explicit API over ``n`` steps that do nothing: its loader, two phases and step(); the
    scope's queue emptied as it fills, as nothing sends it."""
    queue = scope._queue
    for _ in scope.loader(range(n)):
        with scope.phase("h2d"):
            pass
        with scope.phase("compute"):
            pass
        scope.step(samples=32)
        if len(queue) > 8192:
            queue.clear()


def _driver(scope_cls, auto):
    d = auto._Driver()
    d.on = d.installed = True
    d.tid = threading.get_ident()
    scope = scope_cls(None)
    d.scope_factory = lambda: scope
    return d, scope


def loader_path(torch):
    """A DataLoader and optimizer loop: ``__next__``, ``Tensor.backward`` and the optimizer post-hook.

    ``bare`` and ``hooked`` are each (next, backward, post-hook); the stand-in next returns a batch of
    two tensors."""
    from stepscope import _auto
    from stepscope._scope import Scope

    batch = (torch.ones(32, 64), torch.zeros(32))

    def original_next(iterator):
        return batch

    def original_backward(tensor):
        return None

    def no_hook(optimizer, args, kwargs):
        return None

    d, scope = _driver(Scope, _auto)
    d.optimizer_seen = True
    hooked = (_auto.make_next(d, original_next, torch.is_grad_enabled), _auto.make_backward(d, original_backward), _auto.make_post_hook(d))
    return SimpleNamespace(driver=d, queue=scope._queue, batch=batch, bare=(original_next, original_backward, no_hook), hooked=hooked)


def no_loader_path(torch):
    """A loop without a DataLoader or optimizer (issue 26): the forward probe (torch's real global
    forward pre-hook registry, armed here), the backward pass ending the step, and the hand-written
    update's ``no_grad`` block (enter, exit).

    ``bare`` is (backward, enter, exit); ``hooked`` is (probe, backward, enter, exit), the probe called
    with ``module``."""
    from stepscope import _auto
    from stepscope._scope import Scope

    def original_backward(tensor):
        return None

    def original_enter(ctx):
        return None

    def original_exit(ctx, *exc):
        return None

    d, scope = _driver(Scope, _auto)
    d.register_probe = torch.nn.modules.module.register_module_forward_pre_hook
    d.probe_hook = _auto.make_probe(d, torch.is_grad_enabled)
    hooked = (d.probe_hook, _auto.make_backward(d, original_backward), _auto.make_grad_mode(d, original_enter, True), _auto.make_grad_mode(d, original_exit, False))
    d.arm_probe()
    queue, module = scope._queue, torch.nn.Identity()
    probe, backward, enter, leave = hooked

    def steps_bare(n):
        for _ in range(n):
            original_backward(None)
            original_enter(None)
            original_exit(None, None, None, None)
            if len(queue) > 8192:
                queue.clear()

    def steps_hooked(n):
        for _ in range(n):
            probe(module, ())
            backward(None)
            enter(None)
            leave(None, None, None, None)
            if len(queue) > 8192:
                queue.clear()

    # steps_bare / steps_hooked: n steps, the stand-ins called bare or through the wrappers.
    return SimpleNamespace(driver=d, queue=queue, module=module, bare=(original_backward, original_enter, original_exit), hooked=hooked, steps_bare=steps_bare, steps_hooked=steps_hooked)
