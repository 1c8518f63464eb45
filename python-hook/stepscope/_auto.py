"""The zero-code path: time an unmodified PyTorch training loop from PyTorch's own seams.

``stepscope run``, ``python -m stepscope run`` and ``STEPSCOPE_AUTO=1`` (through the
``_boot/sitecustomize.py`` start-up file) call :func:`install` once the script has imported torch.
Nothing here imports torch itself, and importing stepscope never imports this module.

What is watched (torch 1.13 through 2.x):

- **data**: time blocked in ``__next__`` of a DataLoader's iterator (``_BaseDataLoaderIter``),
  on the training thread, with autograd on. A loader read under ``torch.no_grad()`` or
  ``inference_mode()`` (an evaluation loop) is left in "other".
- **the step boundary**: the end of ``optimizer.step()`` (the global optimizer step post-hook from
  torch 2.0, ``Optimizer._optimizer_step_code`` on 1.13), or the end of ``loss.backward()`` in a
  program that never creates an optimizer. Where batches come from a DataLoader, a step ends at the
  last optimizer step before the next batch is read, so several optimizers stepped on one batch
  (a GAN) and gradient accumulation make one step each, as the training loop means them.
- **h2d**: on CUDA only, ``Tensor.to(..., non_blocking=True)`` and ``Tensor.cuda(..., non_blocking=True)``
  from the CPU to the GPU, on the training thread (a blocking copy waits for the GPU's queue, so its
  time is the GPU's compute: it stays in "compute").
- **compute**: from a batch's arrival to the optimizer step, less the copies in between; the time
  after the step until the next batch is read (logging, checkpoints, evaluation) is "other".
- **loops without a DataLoader**: the training forward -- the first module called on the training
  thread after a step, with autograd on and the module in train mode -- starts the step's compute;
  what lies between the end of a step and the next training forward is "other". The call is seen by
  a global forward pre-hook registered only while a forward is awaited (it removes itself at the
  first call), so the forward passes themselves run untouched.
- **evaluation** (``eval_ns``): a ``torch.no_grad()`` or ``torch.inference_mode()`` block (or
  decorated function) on the training thread in which a module is called, from its entry to its
  exit; and forward passes in eval mode with autograd on, until the next training forward (unless a
  backward pass follows them: then they were training). A ``no_grad`` block without a forward pass
  right after a step (a hand-written SGD update after ``backward()``) is that step's compute. A
  program that calls ``torch.compile`` gets no probe (it would be traced into the graphs): its
  evaluation is the span from ``model.eval()`` to ``model.train()``.
- **on the GPU**: once torch has CUDA in use, CUDA events are recorded on the current stream at a
  batch's arrival, at the end of its optimizer step(s) and around each non-blocking copy
  (``_cuda.Marker``), and read by the sender thread once completed, as the explicit API's phases are:
  the GPU's compute and copy times of each step and its idle gap before the step's first work.
- **DDP**: a ``DistributedDataParallel`` model built while this path is armed is watched
  (``stepscope._comm``): its gradient all-reduce is timed, on gloo and on NCCL.
- **samples**: the first dimension of each batch (a tensor, the first item of a tuple or list, the
  first value of a mapping).
- **rank and world size**: from the launcher's environment (``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``), else from ``torch.distributed`` once it is initialized (``mp.spawn``).

The scope is created at the first step event, not at import: a process that imports torch but never
trains (the torchrun launcher, a DataLoader worker) sends nothing. A program that calls
``stepscope.init()`` itself is timed by the explicit API alone: the zero-code path stands down for
good (after ending the step in progress), so the two never count the same time.

Every wrapper here is a few attribute reads on the hot path and never raises into the training loop.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time

from . import _comm, _cuda, _log

__all__ = ["install", "uninstall", "installed", "scope_for", "batch_samples", "SUPPORTED"]

SUPPORTED = ((1, 13), (3, 0))  # torch versions instrumented: from 1.13 up to, not including, 3.0
TOPIC = "auto"
_NO_STEP_AFTER = 64  # batches read with no step boundary before saying the loop cannot be followed
_CUDA_CHECKS = 200  # steps during which the hook looks for CUDA coming into use (for h2d)

_now = time.perf_counter_ns
_get_ident = threading.get_ident
_UNTIMED = _cuda.UNTIMED_MODES


def batch_samples(batch):
    """The number of samples in a batch: the first dimension of its first tensor; None if unknown."""
    # Fast path, every step: a tensor, or a tuple or list that starts with one (a type seen before).
    first = batch[0] if type(batch) in _SEQUENCES and batch else batch
    if type(first) in _SHAPED:
        try:
            shape = first.shape
            return shape[0] if shape else None  # an int for a tensor; the sender checks it as any samples
        except Exception:
            pass
    return _batch_samples(batch)


_SEQUENCES = (tuple, list)
_SHAPED = set()  # types whose instances had a shape: the fast path above (a few types at most)


def _batch_samples(batch):
    try:
        for _ in range(4):
            shape = getattr(batch, "shape", None)
            if shape is not None:
                if len(shape) and len(_SHAPED) < 16:
                    _SHAPED.add(type(batch))
                return int(shape[0]) if len(shape) else None
            if isinstance(batch, (list, tuple)):
                if not batch:
                    return None
                batch = batch[0]
                continue
            values = getattr(batch, "values", None)
            if callable(values) and not isinstance(batch, (str, bytes)):
                batch = next(iter(values()), None)
                continue
            return None
    except Exception:
        return None
    return None


def torch_version(torch):
    """(major, minor) of ``torch.__version__``; None if it cannot be read."""
    match = re.match(r"\s*(\d+)\.(\d+)", str(getattr(torch, "__version__", "")))
    return (int(match.group(1)), int(match.group(2))) if match else None


class _Driver:
    """The state of the zero-code path for this process; its methods run on the training thread."""

    def __init__(self):
        self.on = False  # instrumenting now
        self.retired = None  # why it stood down for good, else None
        self.installed = False
        self.scope = None
        self.scope_factory = None  # tests: a callable returning the scope to drive
        self.creating = False  # stepscope.init() is being called from here
        self.tid = None  # the training thread
        self.armed_at = 0  # when torch was instrumented (the first step's start without loader or optimizer)
        self.optimizer_at = 0  # when the last optimizer was created before the first step
        self.optimizer_seen = False  # an optimizer exists: backward passes are not step boundaries
        self.loader_seen = False  # batches come from a DataLoader: steps end at the next batch
        self.loader_env_sent = False
        self.started = False  # the first step has begun
        self.window = 0  # start of the open compute window (ns), 0 when closed
        self.excl = 0  # h2d time inside the open window
        self.pending = 0  # end of the step awaiting the next batch (ns), 0 when none
        self.samples = None  # samples of the batches of the step in progress
        self.boundaries = 0  # optimizer steps or backward passes seen
        self.reads_before_boundary = 0  # batches read before the first boundary
        self.cuda_checks = _CUDA_CHECKS
        self.errors = 0
        self.undo = []  # (owner, attribute name, original value or _MISSING) to restore at uninstall
        self.handles = []  # hook handles to remove at uninstall
        self.torch = None
        self.stepper = ""  # how optimizer steps are seen: "post-hook" (torch >= 2.0), "step-code" (1.13)
        self.marker = None  # the GPU marks (a _cuda.Marker) once the scope exists
        self.register_probe = None  # torch's register_module_forward_pre_hook, where it has one
        self.probe_hook = None  # the global forward pre-hook (make_probe)
        self.probe = None  # its handle while registered
        self.probe_handle = None  # the handle of its first registration, whose entry later arms put back
        self.forward_seen = False  # a training forward started a step: steps end at the next one
        self.eval_depth = 0  # nesting of no_grad / inference_mode blocks on the training thread
        self.eval_t0 = 0  # entry of the outermost such block
        self.eval_forward = False  # a module was called inside it: it is evaluation
        self.eval_mode_at = 0  # eval-mode forwards with autograd on began here (ns), 0 when none
        self.eval_carry = 0  # evaluation measured after the pending step's end: the next step's
        self.compiled = False  # torch.compile in use: no probe (see compiling())
        self.in_train_call = False  # inside a Module.train() call (its recursion into submodules)

    # --- scope ---------------------------------------------------------------

    def start_scope(self):
        """The scope to drive, made at the first step event; None when the path stands down."""
        if not self.on:
            return None
        try:
            if self.scope_factory is not None:
                scope = self.scope_factory()
            else:
                import stepscope

                current = stepscope._current
                if current is not None and not current._closed:
                    self.retire("the program made its own scope (stepscope.init())")
                    return None
                self.creating = True
                try:
                    scope = stepscope.init(**_identity_from_torch())
                finally:
                    self.creating = False
            scope._on_close = self.flush
            scope._eval_on = True  # evaluation is measured here: eval_ns is sent, 0 when there was none
            self.marker = _cuda.Marker(scope)
            sender = scope._sender
            if sender is not None:
                sender.add_env({"instrumentation": "auto"})
            self.scope = scope
            return scope
        except Exception as exc:
            self.retire("could not start (%s: %s)" % (type(exc).__name__, exc), warn=True)
            return None

    def retire(self, why, warn=False):
        """Stand down for good: end the step awaiting its end, touch nothing from now on."""
        if self.retired is None:
            self.retired = why
        self.on = False
        try:
            self.unprobe()
            if self.scope is not None and self.pending:
                self._end(self.pending)
            if self.marker is not None:
                self.marker.discard()
        except Exception:
            pass
        self.window = self.pending = 0
        if warn:
            _log.warn_once(TOPIC, "zero-code: %s; the script runs untouched" % why)

    def flush(self):
        """The scope is closing: end the step that waits for its end; record nothing more."""
        try:
            self.unprobe()
            if self.pending:
                self._end(self.pending)
        except Exception:
            self._error()
        self.on = False
        self.window = self.pending = 0

    # --- events (training thread) -------------------------------------------

    def boundary(self, optimizer=None, args=None, kwargs=None):
        """An optimizer step (or a backward pass where there is no optimizer) ended just now.

        Also torch's global optimizer step post-hook itself (``optimizer, args, kwargs``; see
        make_post_hook): no wrapper frame around it, as it runs every step."""
        if not self.on or (_get_ident() != self.tid and not self.adopt_thread()):
            return
        scope = self.scope or self.start_scope()
        if scope is None:
            return
        try:
            if self.eval_mode_at:
                # Eval-mode forwards that a backward pass followed were training (dropout off, say).
                at, self.eval_mode_at = self.eval_mode_at, 0
                if self.awaiting_forward():
                    self.unprobe()
                    self.training_forward(at)
            t = _now()
            self.boundaries += 1
            if not self.started:
                start = max(self.armed_at, self.optimizer_at) or t
                self._begin(start)
                self.window = start
                self.excl = 0
            pending = self.pending
            if pending and not self.loader_seen:
                # No training forward seen since the last step ended (the model called past
                # Module.__call__, its forward compiled whole): each boundary ends a step, as before.
                self._end(pending)
                scope._compute.total += t - pending
            elif pending:
                # Another optimizer stepped on the same batch: its work is this step's compute.
                scope._compute.total += t - pending
            elif self.window:
                scope._compute.total += t - self.window - self.excl
                self.window = 0
            marker = self.marker
            if marker.timer is not None:
                marker.close_now()
            if self.loader_seen:
                self.pending = t
            elif self.forward_seen:
                self.pending = t  # the compute ends here; the next training forward starts the next step
                self.arm_probe()
            else:
                self._end(t)
                self.window = t
                self.excl = 0
                self.marker.open()
        except Exception:
            self._error()

    # --- forwards and evaluation (training thread) ---------------------------

    def arm_probe(self):
        """Await the next module call: a training forward, or evaluation inside a no_grad block.

        Registered once through torch's API; later arms put the same entry back into torch's dict of
        global hooks (the handle's ``hooks_dict_ref`` and ``id``, torch 1.13 to 2.x): a loop without a
        DataLoader arms it every step, and a new handle costs 0.9-1.5 us, the entry ~0.1 us."""
        if self.probe is None and self.register_probe is not None and not self.compiled:
            handle = self.probe_handle
            ref = getattr(handle, "hooks_dict_ref", None)
            hooks = ref() if ref is not None else None
            if hooks is None:
                handle = self.probe_handle = self.register_probe(self.probe_hook)
            else:
                hooks[handle.id] = self.probe_hook
            self.probe = handle

    def compiling(self):
        """The program uses torch.compile: a global hook that comes and goes would be traced into its
        graphs (graph breaks) and change their guards (recompiles). The probe stands down for good:
        steps end at each optimizer step (or backward pass), and evaluation is the span between
        ``model.eval()`` and ``model.train()`` on the training thread."""
        self.compiled = True
        self.unprobe()

    def mode_switch(self, training):
        """``Module.train(mode)`` was called at the top level on the training thread (compiled programs)."""
        try:
            t = _now()
            if not training:
                if not self.eval_mode_at:
                    self.eval_mode_at = t
            elif self.eval_mode_at:
                self._add_eval(t - self.eval_mode_at)
                self.eval_mode_at = 0
        except Exception:
            self._error()

    def unprobe(self):
        probe, self.probe = self.probe, None
        if probe is not None:
            probe.remove()

    def awaiting_forward(self):
        """Whether the next training forward is what ends the step (a loop without a DataLoader)."""
        return not self.loader_seen and (not self.started or (self.forward_seen and bool(self.pending)))

    def forward(self, module):
        """A module was called on the training thread while the probe was armed."""
        try:
            t = _now()
            if self.eval_depth and self.eval_t0:
                self.eval_forward = True  # a forward inside no_grad / inference_mode: evaluation
                self.unprobe()
                return
            if not self.awaiting_forward():
                self.unprobe()
                return
            if not getattr(module, "training", True):
                if not self.eval_mode_at:
                    self.eval_mode_at = t  # the probe stays: the next training forward ends it
                return
            self.unprobe()
            if self.eval_mode_at:
                self._add_eval(t - self.eval_mode_at)
                self.eval_mode_at = 0
            self.training_forward(t)
        except Exception:
            self._error()

    def training_forward(self, t):
        """A training forward began at ``t``: the step's compute starts; a pending step ends."""
        scope = self.scope or self.start_scope()
        if scope is None:
            return
        self.forward_seen = True
        if not self.started:
            self._begin(t)
        elif self.pending:
            self._end(self.pending)
        self.window = t
        self.excl = 0
        self.marker.open()

    def eval_enter(self):
        """A no_grad / inference_mode block is entered on the training thread."""
        depth = self.eval_depth
        self.eval_depth = depth + 1
        if depth:
            return
        try:
            self.eval_forward = False
            # Inside the step's compute (a frozen teacher's forward, a model's own no_grad parts) it is compute.
            self.eval_t0 = 0 if self.window else _now()
            if self.eval_t0:
                self.arm_probe()
        except Exception:
            self._error()

    def eval_exit(self):
        depth = self.eval_depth - 1
        if depth < 0:
            return
        self.eval_depth = depth
        if depth:
            return
        if not self.eval_t0:
            return
        try:
            t = _now()
            if self.eval_forward:
                self.eval_forward = False
                self._add_eval(t - self.eval_t0)
            elif self.pending and self.eval_t0 >= self.pending and self.scope is not None:
                # No forward inside, after the step's end: weights updated by hand after backward()
                # (or an EMA of them). That is the step's compute, not "other".
                self.scope._compute.total += t - self.pending
                self.pending = t
            if not self.awaiting_forward():
                self.unprobe()
            else:
                self.arm_probe()
        except Exception:
            self._error()

    def _add_eval(self, took):
        scope = self.scope
        if scope is None or took <= 0:
            return
        scope._eval.total += took
        if self.window:
            self.excl += took  # evaluation is not the step's compute
        elif self.pending:
            self.eval_carry += took  # after the step's end: the next step holds this time

    def copy_wanted(self):
        """Whether a non-blocking copy to the GPU starting now is this loop's h2d (training thread)."""
        try:
            # An evaluation's copies, like its batches, stay in "other".
            return self.scope is not None and self.started and self.torch.is_grad_enabled()
        except Exception:
            return False

    def h2d(self, t0, t1, begun=None):
        """A non-blocking copy to the GPU took the training thread from t0 to t1 (``begun``: the GPU
        event recorded before it)."""
        scope = self.scope
        try:
            if self.pending:
                self._end(self.pending)
            took = t1 - t0
            scope._h2d.total += took
            if self.window:
                self.excl += took
            self.marker.copy_end(begun)
        except Exception:
            self._error()

    def optimizer_created(self):
        self.optimizer_seen = True
        if not self.started:
            self.optimizer_at = _now()

    def adopt_thread(self):
        """An optimizer stepped on another thread than the one assumed: it is the training thread
        if nothing has been timed yet."""
        if self.started:
            return False
        self.tid = _get_ident()
        return True

    # --- internals --------------------------------------------------------------

    def _begin(self, t):
        self.started = True
        self.scope._begin(t)

    def _end(self, t):
        scope = self.scope
        if t <= scope._start:
            t = scope._start + 1  # a step lasts at least 1 ns
        samples = self.samples
        self.samples = None
        self.pending = 0
        marker = self.marker
        if marker.timer is not None:
            marker.flush()
        carry = self.eval_carry
        if carry:
            self.eval_carry = 0
            scope._eval.total -= carry
            scope.step(samples, t)
            scope._eval.total = carry
        else:
            scope.step(samples, t)
        if self.cuda_checks:
            self.cuda_checks -= 1
            _maybe_patch_h2d(self)

    def _send_loader_env(self, iterator):
        self.loader_env_sent = True
        sender = self.scope._sender
        if sender is None:
            return
        env = {}
        for key, attr in (
            ("num_workers", "_num_workers"),
            ("pin_memory", "_pin_memory"),
            ("prefetch_factor", "_prefetch_factor"),
            ("persistent_workers", "_persistent_workers"),
        ):
            value = getattr(iterator, attr, None)
            if isinstance(value, (bool, int)):
                env[key] = value
        batch_size = getattr(getattr(iterator, "_index_sampler", None), "batch_size", None)
        if isinstance(batch_size, int) and not isinstance(batch_size, bool):
            env["batch_size"] = batch_size
        if env:
            sender.add_env({"loader": env})

    def _error(self):
        self.errors += 1
        _log.warn_once(_log.INTERNAL, "internal error in the zero-code path (training continues; timing may be incomplete)")


_driver = _Driver()
_lock = threading.Lock()
_MISSING = object()


def installed() -> bool:
    return _driver.installed


def install(torch=None) -> bool:
    """Instrument torch (already imported by the script) for the zero-code path; idempotent.

    Returns True if the loop will be timed. Never raises: what cannot be instrumented is said once
    and left untouched.
    """
    with _lock:
        d = _driver
        if d.installed:
            return True
        if d.retired is not None:
            return False
        try:
            torch = torch or sys.modules.get("torch")
            if torch is None:
                return False
            version = torch_version(torch)
            if version is None or not SUPPORTED[0] <= version < SUPPORTED[1]:
                d.retire(
                    "torch %s is outside the versions it knows (1.13 to 2.x)" % getattr(torch, "__version__", "?")
                    + ": use the explicit API (stepscope.init, scope.loader, scope.step)",
                    warn=True,
                )
                return False
            d.torch = torch
            missing = []
            if not _patch_loader(d, torch):
                missing.append("DataLoader waits (no _BaseDataLoaderIter.__next__)")
            stepper = d.stepper = _patch_optimizer(d, torch)
            if not stepper:
                missing.append("optimizer steps")
            if not _patch_backward(d, torch):
                missing.append("backward passes")
            if not _patch_forwards(d, torch):
                missing.append("forward passes and evaluation (no global module forward pre-hook)")
            _patch_compile(d, torch)
            if not stepper and "backward passes" in missing:
                _unpatch(d)
                d.retire("torch %s offers neither an optimizer step nor a backward pass to follow" % torch.__version__, warn=True)
                return False
            if missing:
                _log.warn_once(
                    TOPIC + ":partial",
                    "zero-code: torch %s: cannot see %s; timing the rest" % (torch.__version__, " nor ".join(missing)),
                )
            d.armed_at = _now()
            d.tid = threading.main_thread().ident
            d.installed = True
            d.on = True
            d.arm_probe()  # the first training forward may start the first step (no DataLoader)
            _comm.arm()  # DDP models built before the first step are watched as they are built
            if hasattr(os, "register_at_fork") and not getattr(d, "_fork_registered", False):
                os.register_at_fork(after_in_child=_off_in_child)
                d._fork_registered = True
            return True
        except Exception as exc:
            try:
                _unpatch(d)
            except Exception:
                pass
            d.retire("could not instrument torch (%s: %s)" % (type(exc).__name__, exc), warn=True)
            return False


def uninstall() -> None:
    """Undo :func:`install` (tests): restore what was patched and forget the state."""
    global _driver
    with _lock:
        d = _driver
        d.on = False
        _unpatch(d)
        _comm.disarm()
        _driver = _Driver()
        # The wrappers hold the old driver: it is off, so they only call the originals.


def explicit_init():
    """``stepscope.init()`` was called by the program (or an integration): the explicit API wins."""
    d = _driver
    if d.creating or not (d.on or d.installed):
        return
    d.retire("the program uses the explicit API")


def scope_for(kind: str):
    """The scope an integration (``kind``: "lightning", "transformers") drives, and whether it made it.

    The zero-code path's scope if it has one (it stands down; the same session goes on), else the
    program's own scope (``stepscope.init()`` called before), else a new one.
    """
    import stepscope

    d = _driver
    scope = d.scope
    if scope is not None and not scope._closed and stepscope._current is scope:
        d.retire("the %s integration takes over" % kind)
        scope._on_close = None
        owned = True
    elif stepscope._current is not None and not stepscope._current._closed:
        return stepscope._current, False
    else:
        scope = stepscope.init(**_identity_from_torch())
        owned = True
    sender = scope._sender
    if sender is not None:
        sender.add_env({"instrumentation": kind})
    return scope, owned


def _off_in_child():
    _driver.on = False
    _driver.scope = None


def _identity_from_torch() -> dict:
    """Rank and world size from torch.distributed where the launcher's environment has none
    (processes started by ``mp.spawn``); {} otherwise."""
    if os.environ.get("RANK", "").strip():
        return {}
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return {}
        world_size = int(dist.get_world_size())
        if world_size <= 1:
            return {}
        rank = int(dist.get_rank())
    except Exception:
        return {}
    found = {"rank": rank, "world_size": world_size}
    if not os.environ.get("LOCAL_RANK", "").strip():
        found["local_rank"] = rank
    if not os.environ.get("STEPSCOPE_JOB") and os.environ.get("TORCHELASTIC_RUN_ID", "none").lower() == "none":
        # The ranks are children of one process (mp.spawn): the job is named after it, as for torchrun.
        from . import _env

        import socket

        host = (socket.gethostname() or "unknown-host").split(".")[0]
        parent = os.getppid()
        started = _env.process_start_time(parent)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started)) if started is not None else "launcher"
        found["job"] = "%s-%s-%d" % (host, stamp, parent)
    return found


# --- patches -------------------------------------------------------------------


def _set(d, owner, name, value):
    d.undo.append((owner, name, owner.__dict__.get(name, _MISSING)))
    setattr(owner, name, value)


def _unpatch(d):
    try:
        d.unprobe()
    except Exception:
        pass
    while d.handles:
        handle = d.handles.pop()
        try:
            handle.remove()
        except Exception:
            pass
    while d.undo:
        owner, name, original = d.undo.pop()
        try:
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        except Exception:
            pass
    d.installed = False


def _patch_loader(d, torch) -> bool:
    try:
        from torch.utils.data import dataloader
    except Exception:
        return False
    base = getattr(dataloader, "_BaseDataLoaderIter", None)
    original = getattr(base, "__dict__", {}).get("__next__")
    if base is None or not callable(original):
        return False
    _set(d, base, "__next__", make_next(d, original, torch.is_grad_enabled))
    return True


def make_next(d, original, grad_enabled):
    """The ``__next__`` of DataLoader iterators: ``original``, timed as data on the training thread;
    the batch opens the step's compute. One Python frame around ``original``: this runs every step."""
    get_ident = _get_ident

    def __next__(self):
        if not (d.on and get_ident() == d.tid and grad_enabled()):
            return original(self)
        scope = d.scope or d.start_scope()
        if scope is None:
            return original(self)
        try:
            t0 = _now()
            if d.pending:
                d._end(d.pending)
            elif d.window:
                scope._compute.total += t0 - d.window - d.excl
                d.window = 0
                marker = d.marker
                if marker.timer is not None:
                    marker.close_if_open()  # another batch of the same step follows (accumulation)
                    marker.flush()
            if not d.loader_seen:  # the first batch (a step has begun from here on: one check a step)
                if not d.started:
                    d._begin(t0)
                d.loader_seen = True
                d.unprobe()  # batches from a DataLoader start the steps: no forward to await
        except Exception:
            d._error()
            return original(self)
        try:
            batch = original(self)
        except StopIteration:
            scope._data.total += _now() - t0
            raise
        t1 = _now()
        try:
            scope._data.total += t1 - t0
            d.window = t1
            d.excl = 0
            marker = d.marker
            if marker.timer is not None or scope._gpu_mode not in _UNTIMED:
                marker.open()
            n = batch_samples(batch)
            if n is not None:
                d.samples = n if d.samples is None else d.samples + n
            if not d.loader_env_sent:
                d._send_loader_env(self)
            if not d.boundaries:
                d.reads_before_boundary += 1
                if d.reads_before_boundary == _NO_STEP_AFTER:
                    _log.warn_once(
                        TOPIC + ":no-step",
                        "zero-code: %d DataLoader batches read but no optimizer.step() or backward() seen on "
                        "this thread yet: no step is timed until one comes; a loop with neither needs the "
                        "explicit API (scope.loader / scope.step)" % _NO_STEP_AFTER,
                    )
        except Exception:
            d._error()
        return batch

    __next__.__wrapped__ = original
    __next__.__doc__ = original.__doc__
    return __next__


def make_post_hook(d):
    """The global optimizer step post-hook: the end of an optimizer step is a step boundary (on the
    training thread, or on the first thread that steps before anything was timed)."""
    return d.boundary


def make_backward(d, original):
    """``Tensor.backward``: the end of a backward pass is a step boundary where there is no optimizer."""
    get_ident = _get_ident

    def backward(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if d.on:
            # With an optimizer and no GPU timing (the common case) there is nothing to do: the
            # attribute checks come before the thread's.
            if not d.optimizer_seen:
                if get_ident() == d.tid:
                    d.boundary()
            else:
                marker = d.marker
                if marker is not None and marker.timer is not None and get_ident() == d.tid:
                    marker.close_if_open()  # the batch's GPU work so far ends here (accumulation)
        return result

    backward.__wrapped__ = original
    backward.__doc__ = original.__doc__
    return backward


def _patch_optimizer(d, torch) -> str:
    """Follow optimizer steps; the way used ("post-hook", "step-code"), or "" if none."""
    optim = getattr(torch, "optim", None)
    optimizer_cls = getattr(optim, "Optimizer", None)
    if optimizer_cls is None:
        return ""
    get_ident = _get_ident

    original_init = optimizer_cls.__dict__.get("__init__")
    if callable(original_init):

        def __init__(self, *args, **kwargs):
            original_init(self, *args, **kwargs)
            if d.on and get_ident() == d.tid:
                d.optimizer_created()
            else:
                d.optimizer_seen = True

        __init__.__wrapped__ = original_init
        __init__.__doc__ = original_init.__doc__
        _set(d, optimizer_cls, "__init__", __init__)

    post_hook = make_post_hook(d)
    # torch.optim deletes the name of its submodule: find it where the import system keeps it.
    register = getattr(sys.modules.get("torch.optim.optimizer"), "register_optimizer_step_post_hook", None)
    if callable(register):
        d.handles.append(register(post_hook))
        return "post-hook"
    step_code = optimizer_cls.__dict__.get("_optimizer_step_code")
    if callable(step_code):
        # torch 1.13: called by the wrapper Optimizer.__init__ puts around every optimizer's step().

        def _optimizer_step_code(self):
            step_code(self)
            if d.on:
                post_hook(self, (), {})

        _optimizer_step_code.__wrapped__ = step_code
        _set(d, optimizer_cls, "_optimizer_step_code", _optimizer_step_code)
        return "step-code"
    return ""


def make_probe(d, grad_enabled):
    """The global forward pre-hook armed while a forward is awaited (see the module's docstring)."""
    get_ident = _get_ident

    def probe(module, args):
        if d.on and get_ident() == d.tid:
            if grad_enabled() or d.eval_depth:
                d.forward(module)
        return None

    return probe


def make_grad_mode(d, original, entering):
    """``__enter__`` / ``__exit__`` of ``torch.no_grad`` and ``torch.inference_mode``: evaluation's bounds."""
    get_ident = _get_ident

    if entering:

        def __enter__(self):
            result = original(self)
            if d.on and get_ident() == d.tid:
                d.eval_enter()
            return result

        wrapper = __enter__
    else:

        def __exit__(self, *exc):
            if d.on and get_ident() == d.tid:
                d.eval_exit()
            return original(self, *exc)

        wrapper = __exit__
    wrapper.__wrapped__ = original
    wrapper.__doc__ = original.__doc__
    return wrapper


def _patch_forwards(d, torch) -> bool:
    """Arm the forward probe and watch no_grad / inference_mode blocks; False if torch has no
    global forward pre-hook (the steps are then found as before, without evaluation)."""
    register = getattr(sys.modules.get("torch.nn.modules.module"), "register_module_forward_pre_hook", None)
    if not callable(register):
        return False
    d.register_probe = register
    d.probe_hook = make_probe(d, torch.is_grad_enabled)
    for name in ("no_grad", "inference_mode"):
        cls = getattr(torch, name, None)
        enter = getattr(cls, "__dict__", {}).get("__enter__")
        leave = getattr(cls, "__dict__", {}).get("__exit__")
        if callable(enter) and callable(leave):
            _set(d, cls, "__enter__", make_grad_mode(d, enter, True))
            _set(d, cls, "__exit__", make_grad_mode(d, leave, False))
    return True


def _patch_compile(d, torch):
    """``torch.compile`` (and ``Module.train``, for evaluation where the probe stands down)."""
    get_ident = _get_ident
    original = getattr(torch, "__dict__", {}).get("compile")
    if callable(original):

        def compile(*args, **kwargs):
            d.compiling()
            return original(*args, **kwargs)

        compile.__wrapped__ = original
        compile.__doc__ = original.__doc__
        _set(d, torch, "compile", compile)
    module_cls = getattr(getattr(torch, "nn", None), "Module", None)
    original_train = getattr(module_cls, "__dict__", {}).get("train")
    if not callable(original_train):
        return

    def train(self, mode=True):
        if not d.compiled or d.in_train_call or not d.on or get_ident() != d.tid:
            return original_train(self, mode)
        d.in_train_call = True
        try:
            return original_train(self, mode)
        finally:
            d.in_train_call = False
            d.mode_switch(bool(mode))

    train.__wrapped__ = original_train
    train.__doc__ = original_train.__doc__
    _set(d, module_cls, "train", train)


def _patch_backward(d, torch) -> bool:
    tensor = getattr(torch, "Tensor", None)
    original = getattr(tensor, "__dict__", {}).get("backward")
    if not callable(original):
        return False
    _set(d, tensor, "backward", make_backward(d, original))
    return True


def _maybe_patch_h2d(d):
    """Once CUDA is in use, time non-blocking copies from the CPU to the GPU (never on a CPU-only run)."""
    torch = d.torch
    try:
        if torch is None or not torch.cuda.is_initialized():
            return
    except Exception:
        d.cuda_checks = 0
        return
    d.cuda_checks = 0
    try:
        patch_h2d(d, torch.Tensor)
    except Exception:
        _log.warn_once(TOPIC + ":h2d", "zero-code: cannot time copies to the GPU in this torch; they stay in compute")


def patch_h2d(d, tensor_cls):
    """Wrap ``tensor_cls.to`` and ``.cuda``: a non-blocking copy from a non-CUDA tensor that returns a
    CUDA tensor is h2d time (training thread only)."""
    get_ident = _get_ident
    original_to = tensor_cls.to
    original_cuda = tensor_cls.cuda

    def to(self, *args, **kwargs):
        if (
            not d.on
            or not (kwargs.get("non_blocking") or (len(args) > 1 and (args[1] is True or (len(args) > 2 and args[2] is True))))
            or self.is_cuda
            or get_ident() != d.tid
            or not d.copy_wanted()
        ):
            return original_to(self, *args, **kwargs)
        begun = d.marker.copy_begin()
        t0 = _now()
        out = original_to(self, *args, **kwargs)
        t1 = _now()
        if out.is_cuda:
            d.h2d(t0, t1, begun)
        else:
            d.marker.cancel(begun)
        return out

    def cuda(self, *args, **kwargs):
        if (
            not d.on
            or not (kwargs.get("non_blocking") or (len(args) > 1 and args[1] is True))
            or self.is_cuda
            or get_ident() != d.tid
            or not d.copy_wanted()
        ):
            return original_cuda(self, *args, **kwargs)
        begun = d.marker.copy_begin()
        t0 = _now()
        out = original_cuda(self, *args, **kwargs)
        d.h2d(t0, _now(), begun)
        return out

    to.__wrapped__ = original_to
    to.__doc__ = original_to.__doc__
    cuda.__wrapped__ = original_cuda
    cuda.__doc__ = original_cuda.__doc__
    _set(d, tensor_cls, "to", to)
    _set(d, tensor_cls, "cuda", cuda)
