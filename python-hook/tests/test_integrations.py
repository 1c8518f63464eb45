"""The framework callbacks: their step logic on a fake clock (any Python), and real Lightning and
Transformers runs in this process where they are installed and STEPSCOPE_TEST_FRAMEWORKS is set."""

import importlib.util
import io
import os
import subprocess
import sys
import unittest
from unittest import mock

import stepscope
from stepscope import _auto, _log
from stepscope._scope import Scope
from stepscope._record import EVAL_NS, GPU
from stepscope.integrations import _timer

from .test_steps import FakeClock

HOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(stepscope.__file__)))
FRAMEWORKS = bool(os.environ.get("STEPSCOPE_TEST_FRAMEWORKS"))
HAS_LIGHTNING = FRAMEWORKS and (importlib.util.find_spec("lightning") or importlib.util.find_spec("pytorch_lightning")) is not None
HAS_TRANSFORMERS = FRAMEWORKS and importlib.util.find_spec("transformers") is not None

SEQ, END, DUR, DATA, H2D, COMPUTE, SAMPLES = range(7)
MS = 1_000_000


class HookTimerTest(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        for module in (_timer, stepscope._scope):
            patcher = mock.patch.object(module, "_now", self.clock)
            patcher.start()
            self.addCleanup(patcher.stop)
        _log.reset()
        self.addCleanup(_log.reset)
        self.scope = Scope(None)
        self.timer = _timer.HookTimer("test", scope=self.scope)
        self.timer.start(has_optimizer=True)

    def rows(self):
        return [row[:GPU] for row in self.scope._queue]

    def batch(self, data_ms, compute_ms, samples=8, optimizer=True, end=True):
        self.clock.advance(data_ms * MS)
        self.timer.batch_start(samples)
        self.clock.advance(compute_ms * MS)
        self.timer.backward()
        if optimizer:
            self.timer.optimizer_step()
        if end:
            self.timer.batch_end()

    def test_data_until_the_batch_starts_compute_until_it_ends(self):
        self.timer.epoch_start()
        self.batch(3, 10)
        self.batch(2, 10)
        self.assertEqual([r[DUR:] for r in self.rows()], [(13 * MS, 3 * MS, 0, 10 * MS, 8), (12 * MS, 2 * MS, 0, 10 * MS, 8)])

    def test_accumulated_batches_make_one_step(self):
        self.timer.epoch_start()
        for i in range(6):
            self.batch(1, 4, optimizer=i % 3 == 2)
        self.assertEqual([(r[DUR], r[DATA], r[COMPUTE], r[SAMPLES]) for r in self.rows()], [(15 * MS, 3 * MS, 12 * MS, 24)] * 2)

    def test_validation_logging_saving_between_batches_are_other(self):
        self.timer.epoch_start()
        self.batch(1, 5)
        self.clock.advance(20 * MS)  # a validation run
        self.timer.resume()
        self.batch(1, 5)
        self.assertEqual([(r[DUR], r[DATA], r[COMPUTE]) for r in self.rows()], [(6 * MS, MS, 5 * MS), (26 * MS, MS, 5 * MS)])

    def test_a_validation_is_the_steps_evaluation_a_log_is_not(self):
        self.timer.epoch_start()
        self.batch(1, 5)
        self.clock.advance(20 * MS)  # a validation run (Lightning's on_validation_end, the Trainer's on_evaluate)
        self.timer.resume(evaluation=True)
        self.batch(1, 5)
        self.clock.advance(3 * MS)  # a log
        self.timer.resume()
        self.batch(1, 5)
        evals = [row[EVAL_NS] for row in self.scope._queue]
        self.assertEqual(evals, [0, 20 * MS, 0])

    @unittest.skipUnless(HAS_TRANSFORMERS, "the Trainer's callback runs with STEPSCOPE_TEST_FRAMEWORKS=1 where transformers is installed")
    def test_the_trainers_evaluation_is_evaluation_though_its_metrics_are_logged_first(self):
        from stepscope.integrations.transformers import StepscopeCallback

        callback = StepscopeCallback(scope=self.scope)
        callback._timer = self.timer
        self.timer.epoch_start()
        self.batch(1, 5)
        # Trainer._maybe_log_save_evaluate: the training logs, then evaluate(): prediction steps, its
        # metrics logged (self.log, on_log), and only then on_evaluate.
        self.clock.advance(2 * MS)
        callback.on_log(None, None, None)
        for _ in range(4):
            self.clock.advance(5 * MS)
            callback.on_prediction_step(None, None, None)
        self.clock.advance(MS)
        callback.on_log(None, None, None)
        callback.on_evaluate(None, None, None)
        self.batch(1, 5)
        self.assertEqual([row[EVAL_NS] for row in self.scope._queue], [0, 21 * MS])

    def test_backward_without_optimizer_ends_the_step_and_force_always_does(self):
        self.timer.start(has_optimizer=False)  # manual optimization without an optimizer
        self.timer.epoch_start()
        self.batch(1, 2, optimizer=False)
        self.batch(1, 2, optimizer=False)
        self.assertEqual(len(self.rows()), 2)
        self.clock.advance(MS)
        self.timer.batch_start(None)  # neither backward nor optimizer: the step goes on...
        self.clock.advance(MS)
        self.timer.batch_end()
        self.assertEqual(len(self.rows()), 2)
        self.timer.batch_start(None)
        self.clock.advance(MS)
        self.timer.batch_end(force=True)  # ...unless the framework says a step ended
        self.assertEqual([r[DUR] for r in self.rows()][2:], [3 * MS])

    def test_finish_closes_only_what_it_made(self):
        self.timer.finish()
        self.assertFalse(self.scope._closed)
        self.timer.batch_start(1)  # after finish: ignored
        self.assertEqual(self.rows(), [])

    def test_never_raises(self):
        self.timer.scope = None  # broken state: every call is caught, said once
        with mock.patch.object(sys, "stderr", io.StringIO()) as stderr:
            self.timer.batch_start(1)
            self.timer.batch_end()
            self.timer.epoch_start()
            self.timer.finish()
        self.assertEqual(stderr.getvalue().count("internal error in the test callback"), 1)


class ScopeForTest(unittest.TestCase):
    def setUp(self):
        _log.reset()
        self.addCleanup(_log.reset)
        self.addCleanup(_auto.uninstall)
        self.env = mock.patch.dict(os.environ, {"STEPSCOPE_URL": "ws://127.0.0.1:9/v1/ingest"})
        self.env.start()
        self.addCleanup(self.env.stop)
        self.stderr = mock.patch.object(sys, "stderr", io.StringIO())
        self.stderr.start()
        self.addCleanup(self.stderr.stop)

    def tearDown(self):
        if stepscope._current is not None:
            stepscope._current.close(timeout=0)

    def test_the_programs_scope_is_used_and_left_open(self):
        mine = stepscope.init(exit_timeout=0)
        scope, owned = _auto.scope_for("test")
        self.assertIs(scope, mine)
        self.assertFalse(owned)

    def test_otherwise_a_new_one_it_owns(self):
        if stepscope._current is not None:
            stepscope._current.close(timeout=0)
        scope, owned = _auto.scope_for("test")
        self.assertIs(scope, stepscope._current)
        self.assertTrue(owned)

    def test_the_zero_code_paths_scope_is_taken_over(self):
        d = _auto._driver
        d.on = d.installed = True
        self.assertIsNotNone(d.start_scope())
        auto_scope = d.scope
        scope, owned = _auto.scope_for("test")
        self.assertIs(scope, auto_scope)
        self.assertTrue(owned)
        self.assertFalse(d.on)
        self.assertIn("test integration takes over", d.retired)


@unittest.skipUnless(HAS_LIGHTNING, "Lightning runs with STEPSCOPE_TEST_FRAMEWORKS=1 where it is installed")
class LightningTest(unittest.TestCase):
    def test_import_is_lazy_and_a_fit_is_timed(self):
        code = "import sys, stepscope, stepscope.integrations; print(any(m in sys.modules for m in ('torch', 'lightning', 'transformers')))"
        lazy = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=HOOK_DIR), capture_output=True, text=True, timeout=60)
        self.assertEqual(lazy.stdout.strip(), "False", lazy.stderr)

        import torch

        try:
            import lightning as L
        except ImportError:
            import pytorch_lightning as L
        from stepscope.integrations.lightning import StepscopeCallback

        class Tiny(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 2)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return torch.nn.functional.cross_entropy(self.layer(x), y)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        scope = Scope(None)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(48, 4), torch.arange(48) % 2), batch_size=4)
        trainer = L.Trainer(
            max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, accumulate_grad_batches=2, callbacks=[StepscopeCallback(scope=scope)],
        )
        trainer.fit(Tiny(), train_dataloaders=data)
        rows = list(scope._queue)
        self.assertEqual(trainer.global_step, 12)
        self.assertEqual(len(rows), 12)
        self.assertEqual({r[SAMPLES] for r in rows}, {8})
        self.assertFalse(scope._closed)


@unittest.skipUnless(HAS_TRANSFORMERS, "Transformers runs with STEPSCOPE_TEST_FRAMEWORKS=1 where it is installed")
class TransformersTest(unittest.TestCase):
    def test_a_trainer_run_is_timed(self):
        import tempfile

        import torch
        from transformers import Trainer, TrainingArguments

        from stepscope.integrations.transformers import StepscopeCallback

        class Tiny(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(4, 2)

            def forward(self, x, labels=None):
                logits = self.layer(x)
                return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

        class Items(torch.utils.data.Dataset):
            def __len__(self):
                return 40

            def __getitem__(self, i):
                return {"x": torch.full((4,), float(i % 3)), "labels": torch.tensor(i % 2)}

        scope = Scope(None)
        with tempfile.TemporaryDirectory() as out:
            args = TrainingArguments(output_dir=out, max_steps=7, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                     save_strategy="no", report_to="none", disable_tqdm=True)
            trainer = Trainer(model=Tiny(), args=args, train_dataset=Items(), callbacks=[StepscopeCallback(scope=scope)])
            trainer.train()
        rows = list(scope._queue)
        self.assertEqual(trainer.state.global_step, 7)
        self.assertEqual(len(rows), 7)
        self.assertEqual({r[SAMPLES] for r in rows}, {4})


if __name__ == "__main__":
    unittest.main()
