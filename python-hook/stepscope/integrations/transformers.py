"""stepscope for Hugging Face ``transformers.Trainer``: a ``TrainerCallback`` timing each optimizer step.

    from stepscope.integrations.transformers import StepscopeCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[StepscopeCallback()])

- **data**: from the end of the previous step (or the epoch's start, or the end of a log, an
  evaluation or a save: ``on_log``, ``on_evaluate``, ``on_save``) to ``on_step_begin``: the Trainer reads
  the step's batches (all ``gradient_accumulation_steps`` of them) in between.
- **compute**: ``on_step_begin`` to ``on_step_end``: forward and backward of every micro-batch, gradient
  clipping, ``on_pre_optimizer_step``, the optimizer step, the scheduler.
- One step per ``on_step_end``, as ``state.global_step`` counts.
- **samples**: ``per_device_train_batch_size × gradient_accumulation_steps`` (the Trainer's callbacks do
  not see the batches).

Scope: as for the Lightning callback (the program's, else the zero-code path's, else its own, closed
at ``on_train_end``).
"""

from __future__ import annotations

from transformers import TrainerCallback

from ._timer import HookTimer

__all__ = ["StepscopeCallback"]


class StepscopeCallback(TrainerCallback):
    """Times Trainer optimizer steps for stepscope; see the module's documentation.

    scope         a scope to drive (default: the program's, else one made at ``on_train_begin``)
    close_at_end  close the scope at ``on_train_end`` (default: only one this callback made)
    """

    def __init__(self, scope=None, close_at_end=None):
        self._timer = HookTimer("transformers", scope=scope, close_at_end=close_at_end)
        self._samples = None
        # Inside Trainer.evaluate(): its metrics are logged (on_log) before on_evaluate, so a log must
        # not end the span there, or the evaluation would count as nearly nothing.
        self._evaluating = False

    @property
    def scope(self):
        return self._timer.scope

    def on_train_begin(self, args, state, control, **kwargs):
        try:
            self._samples = int(args.per_device_train_batch_size) * max(1, int(args.gradient_accumulation_steps))
        except Exception:
            self._samples = None
        self._timer.start(has_optimizer=True)

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._timer.epoch_start()

    def on_step_begin(self, args, state, control, **kwargs):
        self._timer.batch_start(self._samples)

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._timer.optimizer_step()

    def on_step_end(self, args, state, control, **kwargs):
        self._timer.batch_end(force=True)

    def on_prediction_step(self, args, state, control, **kwargs):
        self._evaluating = True

    def on_log(self, args, state, control, **kwargs):
        if not self._evaluating:
            self._timer.resume()

    def on_evaluate(self, args, state, control, **kwargs):
        self._evaluating = False
        self._timer.resume(evaluation=True)

    def on_save(self, args, state, control, **kwargs):
        self._timer.resume()

    def on_train_end(self, args, state, control, **kwargs):
        self._timer.finish()
