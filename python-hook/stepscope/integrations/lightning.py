"""stepscope for PyTorch Lightning: a ``Callback`` that times each training step from Lightning's hooks.

    from stepscope.integrations.lightning import StepscopeCallback
    trainer = lightning.Trainer(..., callbacks=[StepscopeCallback()])

- **data**: from the end of the previous batch (or the epoch's start, or the end of a validation
  run) to ``on_train_batch_start``: Lightning reads the batch and moves it to the device in between.
- **compute**: ``on_train_batch_start`` to ``on_train_batch_end`` (forward, ``on_before_backward`` /
  ``on_after_backward``, ``on_before_optimizer_step``, the step).
- A step ends at ``on_train_batch_end`` of a batch whose optimizer stepped
  (``on_before_optimizer_step``), so ``accumulate_grad_batches=k`` gives one step per k batches, as
  ``trainer.global_step`` counts; in manual optimization without an optimizer, a batch with a backward
  pass ends a step.
- **samples**: the first dimension of the batch. Validation during fit stays in "other".

The callback uses the scope the program made with ``stepscope.init()`` if there is one (and leaves it
open), else the zero-code path's (``STEPSCOPE_AUTO=1``, which then stands down so nothing is counted
twice), else a new one that it closes at ``on_train_end``. Works with ``lightning`` (2.x) and, when
that is not installed, ``pytorch_lightning``.
"""

from __future__ import annotations

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from .._auto import batch_samples
from ._timer import HookTimer

__all__ = ["StepscopeCallback"]


class StepscopeCallback(Callback):
    """Times Lightning training steps for stepscope; see the module's documentation.

    scope         a scope to drive (default: the program's, else one made at ``on_train_start``)
    close_at_end  close the scope at ``on_train_end`` (default: only one this callback made)
    """

    def __init__(self, scope=None, close_at_end=None):
        super().__init__()
        self._timer = HookTimer("lightning", scope=scope, close_at_end=close_at_end)

    @property
    def scope(self):
        return self._timer.scope

    def on_train_start(self, trainer, pl_module):
        try:
            has_optimizer = bool(trainer.optimizers)
        except Exception:
            has_optimizer = False
        self._timer.start(has_optimizer)

    def on_train_epoch_start(self, trainer, pl_module):
        self._timer.epoch_start()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx, *args):
        self._timer.batch_start(batch_samples(batch))

    def on_before_backward(self, trainer, pl_module, loss):
        pass

    def on_after_backward(self, trainer, pl_module):
        self._timer.backward()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer, *args):
        self._timer.optimizer_step()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args):
        self._timer.batch_end()

    def on_validation_end(self, trainer, pl_module):
        self._timer.resume(evaluation=True)

    def on_train_end(self, trainer, pl_module):
        self._timer.finish()
