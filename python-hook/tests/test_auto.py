"""The zero-code path (stepscope._auto): unmodified loops timed from PyTorch's own seams.

The loops here run on the real torch of the interpreter (Debian's 1.13, a current 2.x from PyPI in
the test environment), in this process, with a scope that records without sending; what needs no
torch (batch sizes, version guard, the start-up file, ``python -m stepscope``) runs everywhere.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
import unittest
from unittest import mock

import stepscope
from stepscope import _auto, _log
from stepscope._scope import Scope

from .fake_sidecar import FakeSidecar
from .quiet import Quiet

HOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(stepscope.__file__)))
BOOT_DIR = os.path.join(HOOK_DIR, "stepscope", "_boot")
HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_ACCELERATE = HAS_TORCH and importlib.util.find_spec("accelerate") is not None

# (seq, end_ns, dur_ns, data_ns, h2d_ns, compute_ns, samples, gpu, eval)
SEQ, END, DUR, DATA, H2D, COMPUTE, SAMPLES, GPU, EVAL = range(9)


def child_env(**env):
    environ = dict(os.environ)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STEPSCOPE_JOB", "STEPSCOPE_TOKEN", "STEPSCOPE_AUTO", "PYTHONPATH"):
        environ.pop(name, None)
    environ.update(env)
    return environ


class BatchSamplesTest(unittest.TestCase):
    def test_first_dimension_of_the_first_tensor(self):
        shaped = lambda *shape: types.SimpleNamespace(shape=shape)  # noqa: E731
        self.assertEqual(_auto.batch_samples(shaped(32, 3, 224, 224)), 32)
        self.assertEqual(_auto.batch_samples((shaped(8, 64), shaped(8))), 8)
        self.assertEqual(_auto.batch_samples([[shaped(4, 2)], shaped(9)]), 4)
        self.assertEqual(_auto.batch_samples({"input_ids": shaped(16, 128), "labels": shaped(16, 128)}), 16)
        self.assertIsNone(_auto.batch_samples(shaped()))  # a scalar
        self.assertIsNone(_auto.batch_samples("text"))
        self.assertIsNone(_auto.batch_samples([]))
        self.assertIsNone(_auto.batch_samples(object()))
        self.assertIsNone(_auto.batch_samples(types.SimpleNamespace(shape=None)))

    def test_never_raises(self):
        class Hostile:
            @property
            def shape(self):
                raise RuntimeError("no")

        self.assertIsNone(_auto.batch_samples(Hostile()))


class VersionGuardTest(Quiet):
    def tearDown(self):
        _auto.uninstall()

    def test_versions(self):
        for text, parsed in (("2.15.0+cu132", (2, 15)), ("1.13.0a0", (1, 13)), ("2.6.0.dev20250101", (2, 6)), ("x", None)):
            self.assertEqual(_auto.torch_version(types.SimpleNamespace(__version__=text)), parsed)

    def test_a_version_outside_the_range_is_said_once_and_left_untouched(self):
        for version in ("1.12.1", "3.0.0"):
            _auto.uninstall()
            _log.reset()
            fake = types.SimpleNamespace(__version__=version)
            self.assertFalse(_auto.install(fake))
            self.assertFalse(_auto.install(fake))
            self.assertFalse(_auto.installed())
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(len(lines), 2, lines)
        self.assertIn("torch 1.12.1 is outside the versions it knows (1.13 to 2.x)", lines[0])
        self.assertIn("the script runs untouched", lines[0])
        self.assertIn("explicit API", lines[0])

    def test_h2d_counts_non_blocking_copies_to_the_gpu_only(self):
        class FakeTensor:
            def __init__(self, cuda=False):
                self.is_cuda = cuda

            def to(self, *args, **kwargs):
                return FakeTensor(cuda=args[:1] == ("cuda",) or kwargs.get("device") == "cuda")

            def cuda(self, *args, **kwargs):
                return FakeTensor(cuda=True)

        d = _auto._Driver()
        seen = []
        d.h2d = lambda t0, t1, begun: seen.append(t1 - t0)
        d.copy_wanted = lambda: True
        d.marker = types.SimpleNamespace(copy_begin=lambda: None, cancel=lambda begun: None)
        d.on = True
        d.tid = threading.get_ident()
        _auto.patch_h2d(d, FakeTensor)
        try:
            cpu = FakeTensor()
            cpu.to("cuda")  # blocking: waits for the GPU's queue, stays in compute
            cpu.to("cuda", non_blocking=True)
            cpu.to(device="cuda", non_blocking=True)
            cpu.to("cpu", non_blocking=True)  # not to the GPU
            FakeTensor(cuda=True).to("cuda", non_blocking=True)  # already there
            cpu.cuda(non_blocking=True)
            cpu.cuda()
            other = threading.Thread(target=lambda: cpu.to("cuda", non_blocking=True))
            other.start()
            other.join()
            d.on = False
            cpu.to("cuda", non_blocking=True)
        finally:
            _auto._unpatch(d)
        self.assertEqual(len(seen), 3)
        self.assertNotIn("to", FakeTensor.__dict__.get("__wrapped__", {}))
        self.assertFalse(hasattr(FakeTensor.to, "__wrapped__"))


def _pythonpath(*extra):
    return os.pathsep.join((BOOT_DIR, HOOK_DIR) + extra)


class BootTest(unittest.TestCase):
    """The start-up file, in child interpreters (no torch needed: a stand-in package is imported)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        fake = os.path.join(self.tmp.name, "fake", "torch")
        os.makedirs(fake)
        with open(os.path.join(fake, "__init__.py"), "w") as f:
            f.write("__version__ = '0.4.1'\nprint('fake torch imported')\n")
        hidden = os.path.join(self.tmp.name, "hidden")
        os.makedirs(hidden)
        with open(os.path.join(hidden, "sitecustomize.py"), "w") as f:
            f.write("print('hidden sitecustomize ran')\n")
        self.fake_dir = os.path.dirname(fake)
        self.hidden_dir = hidden

    def run_child(self, code, **env):
        return subprocess.run([sys.executable, "-c", code], env=child_env(**env), capture_output=True, text=True, timeout=60)

    def test_with_stepscope_auto_it_waits_for_torch_then_instruments_it(self):
        code = "import sys; print('before', 'stepscope' in sys.modules); import torch; print('after', 'stepscope._auto' in sys.modules)"
        result = self.run_child(code, STEPSCOPE_AUTO="1", PYTHONPATH=_pythonpath(self.fake_dir, self.hidden_dir))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split("\n")[:4], ["hidden sitecustomize ran", "before False", "fake torch imported", "after True"])
        # The stand-in's version is outside the range: said once, and the script goes on.
        self.assertEqual(result.stderr.count("stepscope: zero-code: torch 0.4.1 is outside the versions"), 1, result.stderr)

    def test_without_stepscope_auto_it_does_nothing_but_run_the_hidden_one(self):
        code = "import sys, torch; print('auto', 'stepscope' in sys.modules)"
        result = self.run_child(code, PYTHONPATH=_pythonpath(self.fake_dir, self.hidden_dir))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split("\n")[:3], ["hidden sitecustomize ran", "fake torch imported", "auto False"])
        self.assertEqual(result.stderr, "")

    def test_the_installed_pth_line_arms_only_with_stepscope_auto(self):
        # The line pip installs in site-packages (stepscope-auto.pth), read by site.addsitedir as at start-up.
        site_dir = os.path.join(self.tmp.name, "site")
        os.makedirs(site_dir)
        with open(os.path.join(HOOK_DIR, "stepscope-auto.pth")) as src, open(os.path.join(site_dir, "stepscope-auto.pth"), "w") as dst:
            dst.write(src.read())
        code = (
            "import site, sys; site.addsitedir(%r); print(sorted(m for m in ('stepscope', '_stepscope_pth') if m in sys.modules), "
            "any(type(f).__name__ == 'TorchWatcher' for f in sys.meta_path)); import torch; print('stepscope._auto' in sys.modules)" % site_dir
        )
        path = os.pathsep.join((HOOK_DIR, self.fake_dir))
        for env, expected in (({}, ["[] False", "False"]), ({"STEPSCOPE_AUTO": "0"}, ["['_stepscope_pth'] False", "False"]), ({"STEPSCOPE_AUTO": "1"}, ["['_stepscope_pth'] True", "True"])):
            result = self.run_child(code, PYTHONPATH=path, **env)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual([line for line in result.stdout.splitlines() if line != "fake torch imported"], expected, env)

    def test_a_process_that_never_imports_torch_never_imports_stepscope(self):
        code = "import sys, json; print('stepscope' in sys.modules)"
        result = self.run_child(code, STEPSCOPE_AUTO="1", PYTHONPATH=_pythonpath())
        self.assertEqual((result.returncode, result.stdout.strip().splitlines()[-1], result.stderr), (0, "False", ""))

    def test_importing_stepscope_imports_no_framework(self):
        code = "import sys, stepscope, stepscope.integrations; print(sorted(m for m in ('torch', 'lightning', 'transformers', 'accelerate', 'stepscope._auto') if m in sys.modules))"
        result = self.run_child(code, PYTHONPATH=HOOK_DIR)
        self.assertEqual((result.returncode, result.stdout.strip()), (0, "[]"), result.stderr)

    def test_python_m_stepscope(self):
        path = subprocess.run([sys.executable, "-m", "stepscope", "path"], env=child_env(PYTHONPATH=HOOK_DIR), capture_output=True, text=True, timeout=60)
        self.assertEqual(path.stdout.strip(), _pythonpath())
        script = os.path.join(self.tmp.name, "train.py")
        with open(script, "w") as f:
            f.write(
                textwrap.dedent(
                    """
                    import os, sys
                    print(__name__, sys.argv[1:], os.environ["STEPSCOPE_AUTO"], os.environ["STEPSCOPE_JOB"])
                    print(os.environ["PYTHONPATH"].split(os.pathsep)[:2] == [%r, %r])
                    print(os.path.dirname(os.path.abspath(__file__)) == sys.path[0])
                    sys.exit(3)
                    """
                    % (BOOT_DIR, HOOK_DIR)
                )
            )
        result = subprocess.run(
            [sys.executable, "-m", "stepscope", "run", "--job", "j1", script, "--lr", "0.1"],
            env=child_env(PYTHONPATH=HOOK_DIR),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(result.returncode, 3, result.stderr)
        self.assertEqual(result.stdout.splitlines(), ["__main__ ['--lr', '0.1'] 1 j1", "True", "True"])
        bad = subprocess.run([sys.executable, "-m", "stepscope", "run", "--nope", script], env=child_env(PYTHONPATH=HOOK_DIR), capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("unknown option --nope", bad.stderr)


@unittest.skipUnless(HAS_TORCH, "torch is not installed for this interpreter")
class TorchLoopTest(Quiet):
    """Real torch loops in this process: the shapes of loop the zero-code path must follow."""

    @classmethod
    def setUpClass(cls):
        import torch

        cls.torch = torch
        torch.set_num_threads(1)

    def setUp(self):
        super().setUp()
        self.assertTrue(_auto.install(self.torch))
        self.addCleanup(_auto.uninstall)
        self.scope = Scope(None)
        _auto._driver.scope_factory = lambda: self.scope

    def records(self):
        return list(self.scope._queue)

    def loader(self, n=6, batch=4, sleep_s=0.0, workers=0):
        torch = self.torch
        from torch.utils.data import DataLoader, Dataset

        class Items(Dataset):
            def __len__(self):
                return n * batch

            def __getitem__(self, i):
                if sleep_s:
                    time.sleep(sleep_s)
                return torch.full((4,), float(i)), i % 3

        return DataLoader(Items(), batch_size=batch, num_workers=workers)

    def model(self):
        torch = self.torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step(self, model, opt, x, y, step=True):
        loss = self.torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if step:
            opt.step()

    def check_rows(self, rows):
        for row in rows:
            self.assertGreater(row[DUR], 0)
            self.assertLessEqual(row[DATA] + row[H2D] + row[COMPUTE], row[DUR] + 1_000_000, row)

    def test_optimizer_steps_are_seen_through_the_public_hook_where_torch_has_it(self):
        version = _auto.torch_version(self.torch)
        self.assertEqual(_auto._driver.stepper, "post-hook" if version >= (2, 0) else "step-code")

    def test_one_step_per_optimizer_step_with_data_and_samples(self):
        model, opt = self.model()
        started = time.perf_counter_ns()
        for x, y in self.loader(n=6, batch=4, sleep_s=0.004):
            self.train_step(model, opt, x, y)
        elapsed = time.perf_counter_ns() - started
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual([r[SEQ] for r in rows], [1, 2, 3, 4, 5, 6])
        self.assertEqual([r[SAMPLES] for r in rows], [4] * 6)
        self.check_rows(rows)
        for row in rows:
            self.assertGreaterEqual(row[DATA], 4 * 4_000_000)  # four items of 4 ms each
            self.assertGreater(row[COMPUTE], 0)
        # The steps tile the loop: each starts where the one before ended, and all lie within it (how
        # much of the wall time falls before the first and after the last is load's to say).
        self.assertEqual([r[END] - r[DUR] for r in rows[1:]], [r[END] for r in rows[:-1]])
        self.assertLessEqual(sum(r[DUR] for r in rows), elapsed)
        self.assertEqual(self.stderr.getvalue(), "")

    def test_evaluation_under_no_grad_is_not_data_and_ends_no_step(self):
        model, opt = self.model()
        for epoch in range(2):
            for x, y in self.loader(n=3):
                self.train_step(model, opt, x, y)
            with self.torch.no_grad():
                for x, _ in self.loader(n=5, sleep_s=0.003):
                    model(x)
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 6)
        # The first step of the second epoch holds the evaluation: in "other", not in data.
        fourth = rows[3]
        self.assertGreater(fourth[DUR] - fourth[DATA] - fourth[COMPUTE], 5 * 4 * 3_000_000)
        self.check_rows(rows)

    def test_gradient_accumulation_and_two_optimizers_make_one_step_each(self):
        model, opt = self.model()
        for i, (x, y) in enumerate(self.loader(n=8)):
            self.train_step(model, opt, x, y, step=i % 2 == 1)
        self.assertEqual(len(self.records()), 4)
        self.assertEqual([r[SAMPLES] for r in self.records()][:3], [8, 8, 8])
        other, other_opt = self.model()
        for x, y in self.loader(n=5):
            self.train_step(model, opt, x, y)
            self.train_step(other, other_opt, x, y)
        _auto._driver.flush()
        self.assertEqual(len(self.records()), 9)
        self.check_rows(self.records())

    def test_without_a_dataloader_each_optimizer_step_is_a_step(self):
        model, opt = self.model()
        x, y = self.torch.randn(8, 4), self.torch.arange(8) % 3
        for _ in range(7):
            self.train_step(model, opt, x, y)
        # The last step ends at its optimizer step, once the next training forward (or the end) comes.
        self.assertEqual(len(self.records()), 6)
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 7)
        self.assertTrue(all(r[COMPUTE] > 0 and r[SAMPLES] is None and r[EVAL] == 0 for r in rows))
        self.check_rows(rows)

    def sgd_by_hand(self, model, x, y, lr=0.01):
        """A step without torch.optim: backward, then the weights updated under no_grad."""
        torch = self.torch
        loss = torch.nn.functional.cross_entropy(model(x), y)
        for p in model.parameters():
            p.grad = None
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
                time.sleep(0.001)  # a slower update: it must count as compute

    def test_no_dataloader_no_optimizer_periodic_evaluation_is_its_own_phase(self):
        torch = self.torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        x, y = torch.randn(8, 4), torch.arange(8) % 3

        @torch.no_grad()
        def estimate_loss():
            model.eval()
            for _ in range(3):
                model(x)
                time.sleep(0.004)
            model.train()

        for step in range(9):
            self.sgd_by_hand(model, x, y)
            time.sleep(0.002)  # logging between steps: other
            if step % 4 == 0:
                estimate_loss()
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 9)
        self.check_rows(rows)
        # The update under no_grad (2 parameters x 1 ms) is compute; the evaluation (3 x 4 ms) is eval,
        # held by the step after the one it followed; the 2 ms between steps is other.
        for row in rows:
            self.assertGreaterEqual(row[COMPUTE], 2_000_000, row)
        evaluated = [i for i, row in enumerate(rows) if row[EVAL] > 0]
        self.assertEqual(evaluated, [1, 5])
        for i in evaluated:
            self.assertGreaterEqual(rows[i][EVAL], 12_000_000)
            self.assertLessEqual(rows[i][COMPUTE] + rows[i][EVAL], rows[i][DUR])
        for row in rows[1:]:
            self.assertGreaterEqual(row[DUR] - row[COMPUTE] - row[EVAL], 2_000_000, row)

    def test_eval_mode_forwards_with_grad_on_are_evaluation_unless_a_backward_follows(self):
        torch = self.torch
        model, opt = self.model()
        x, y = torch.randn(8, 4), torch.arange(8) % 3
        for step in range(4):
            self.train_step(model, opt, x, y)
            if step == 1:
                model.eval()
                model(x)  # evaluated with autograd on
                time.sleep(0.005)
                model.train()
        model.eval()  # trained in eval mode (dropout off): a backward follows, so these are training
        for _ in range(3):
            self.train_step(model, opt, x, y)
        model.train()
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 7)
        self.assertEqual([i for i, row in enumerate(rows) if row[EVAL] > 0], [2])
        self.assertGreaterEqual(rows[2][EVAL], 5_000_000)
        self.check_rows(rows)

    def test_a_forward_the_probe_cannot_see_still_makes_one_step_per_optimizer_step(self):
        model, opt = self.model()
        x, y = self.torch.randn(8, 4), self.torch.arange(8) % 3
        self.train_step(model, opt, x, y)  # through Module.__call__: the training forward is seen
        for _ in range(4):
            loss = self.torch.nn.functional.cross_entropy(model.forward(x), y)  # past __call__: unseen
            opt.zero_grad()
            loss.backward()
            opt.step()
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 5)
        self.assertTrue(all(r[COMPUTE] > 0 for r in rows[1:]), rows)
        self.check_rows(rows)

    def test_a_compiled_step_meets_no_probe_and_evaluation_is_the_eval_train_span(self):
        torch = self.torch
        if not hasattr(torch, "compile"):
            self.skipTest("torch %s has no torch.compile" % torch.__version__)
        from torch._dynamo.utils import counters

        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
        x, y = torch.randn(8, 4), torch.arange(8) % 3
        torch._dynamo.reset()
        counters.clear()
        step = torch.compile(lambda x, y: torch.nn.functional.cross_entropy(model(x), y), backend="eager")
        for i in range(9):
            if i == 4:
                model.eval()
                with torch.no_grad():
                    model(x)
                    time.sleep(0.005)
                model.train()
            loss = step(x, y)
            for p in model.parameters():
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.01 * p.grad
        _auto._driver.flush()
        # A hook coming and going would have been traced (graph breaks) and changed the guards (recompiles).
        self.assertEqual(dict(counters["graph_break"]), {})
        self.assertEqual(counters["frames"]["ok"], 1)
        rows = self.records()
        self.assertEqual(len(rows), 9)
        self.assertEqual([i for i, r in enumerate(rows) if r[EVAL] > 0], [4])
        self.assertGreaterEqual(rows[4][EVAL], 5_000_000)
        self.check_rows(rows)

    def test_a_no_grad_forward_inside_the_step_is_compute(self):
        torch = self.torch
        model, opt = self.model()
        teacher = torch.nn.Linear(4, 3)
        x, y = torch.randn(8, 4), torch.arange(8) % 3
        for _ in range(4):
            logits = model(x)
            with torch.no_grad():
                target = teacher(x).softmax(-1)
                time.sleep(0.003)
            loss = torch.nn.functional.cross_entropy(logits, y) + (logits.softmax(-1) - target).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 4)
        self.assertTrue(all(r[EVAL] == 0 and r[COMPUTE] >= 3_000_000 for r in rows), rows)

    def test_evaluation_after_a_dataloader_step_is_eval(self):
        model, opt = self.model()
        for x, y in self.loader(n=3):
            self.train_step(model, opt, x, y)
        with self.torch.no_grad():
            for x, _ in self.loader(n=2, sleep_s=0.002):
                model(x)
        for x, y in self.loader(n=2):
            self.train_step(model, opt, x, y)
        _auto._driver.flush()
        rows = self.records()
        self.assertEqual(len(rows), 5)
        self.assertEqual([i for i, row in enumerate(rows) if row[EVAL] > 0], [3])
        self.assertGreaterEqual(rows[3][EVAL], 2 * 4 * 2_000_000)
        self.check_rows(rows)

    def test_the_forward_probe_is_armed_only_while_a_forward_is_awaited(self):
        from torch.nn.modules import module as nn_module

        model, opt = self.model()
        x, y = self.torch.randn(8, 4), self.torch.arange(8) % 3
        for x_, y_ in self.loader(n=2):
            self.train_step(model, opt, x_, y_)
            self.assertEqual(len(nn_module._global_forward_pre_hooks), 0)  # a DataLoader starts the steps

    def test_without_an_optimizer_the_backward_pass_ends_the_step(self):
        torch = self.torch
        weights = torch.zeros(4, 3, requires_grad=True)
        for x, y in self.loader(n=5):
            loss = torch.nn.functional.cross_entropy(x @ weights, y)
            loss.backward()
            with torch.no_grad():
                weights -= 0.01 * weights.grad
                weights.grad.zero_()
        _auto._driver.flush()
        self.assertEqual(len(self.records()), 5)

    def test_loader_workers_and_a_second_thread(self):
        model, opt = self.model()
        elsewhere = []
        side = threading.Thread(target=lambda: elsewhere.extend(x for x, _ in self.loader(n=4)))
        side.start()
        side.join()
        for x, y in self.loader(n=5, workers=2):
            self.train_step(model, opt, x, y)
        _auto._driver.flush()
        self.assertEqual(len(elsewhere), 4)
        self.assertEqual(len(self.records()), 5)

    def test_a_loop_without_steps_is_said_once(self):
        for _ in range(2):
            for _ in self.loader(n=40, batch=1):
                pass
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("64 DataLoader batches read but no optimizer.step() or backward() seen on this thread yet", lines[0])
        self.assertEqual(self.records(), [])


@unittest.skipUnless(HAS_TORCH, "torch is not installed for this interpreter")
class ExplicitWinsTest(Quiet):
    """The explicit API and the zero-code path together never count the same time."""

    def setUp(self):
        super().setUp()
        import torch

        self.torch = torch
        self.server = FakeSidecar()
        self.addCleanup(self.server.stop)
        self.assertTrue(_auto.install(torch))
        self.addCleanup(_auto.uninstall)
        self.addCleanup(lambda: stepscope._current is not None and stepscope._current.close(timeout=0))

    def loop(self, model, opt, batches, scope=None):
        torch = self.torch
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(batches * 2, 4), torch.arange(batches * 2) % 3), batch_size=2)
        for x, y in scope.loader(data) if scope else data:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if scope:
                scope.step(samples=len(x))

    def test_a_scope_made_before_the_loop_leaves_the_zero_code_path_out(self):
        model = self.torch.nn.Linear(4, 3)
        opt = self.torch.optim.SGD(model.parameters(), lr=0.01)
        scope = stepscope.init(url=self.server.url, job="explicit")
        self.loop(model, opt, 6, scope)
        self.assertTrue(scope.close(timeout=5))
        self.assertEqual(self.server.store.seqs(), [1, 2, 3, 4, 5, 6])
        self.assertIsNone(_auto._driver.scope)
        self.assertFalse(_auto._driver.on)

    def test_init_after_the_zero_code_path_started_ends_its_session_first(self):
        model = self.torch.nn.Linear(4, 3)
        opt = self.torch.optim.SGD(model.parameters(), lr=0.01)
        with mock.patch.dict(os.environ, {"STEPSCOPE_URL": self.server.url, "STEPSCOPE_JOB": "mixed"}):
            self.loop(model, opt, 3)  # zero-code: 3 steps, the last one awaiting its end
            auto_scope = _auto._driver.scope
            self.assertIsNotNone(auto_scope)
            scope = stepscope.init()
        self.assertTrue(auto_scope._closed)
        self.assertEqual(auto_scope.close_result.records, 3)
        self.loop(model, opt, 4, scope)
        self.loop(model, opt, 2)  # not counted: the explicit API is in use
        self.assertTrue(scope.close(timeout=5))
        hellos = self.server.of_type("hello")
        self.assertEqual([h["job"] for h in hellos], ["mixed", "mixed"])
        per_session = {h["session"]: len(self.server.store.seqs(h["session"])) for h in hellos}
        self.assertEqual(sorted(per_session.values()), [3, 4])
        # The zero-code session said how it was measured, and its loader (in hello or env frames).
        env = {}
        for message in self.server.of_type("hello")[:1] + self.server.of_type("env"):
            env.update(message["env"])
        self.assertEqual(env["instrumentation"], "auto")
        self.assertEqual(env["loader"]["batch_size"], 2)


@unittest.skipUnless(HAS_TORCH and os.environ.get("STEPSCOPE_TEST_FRAMEWORKS"), "mp.spawn ranks run with STEPSCOPE_TEST_FRAMEWORKS=1 where torch is installed")
class SpawnedRanksTest(unittest.TestCase):
    """Ranks started by torch.multiprocessing.spawn have no RANK in their environment: the rank and
    world size come from torch.distributed, and the job from their common parent."""

    def test_mp_spawn(self):
        server = FakeSidecar()
        self.addCleanup(server.stop)
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "spawned.py")
            with open(script, "w") as f:
                f.write(
                    textwrap.dedent(
                        """
                        import datetime, os, sys
                        import torch, torch.distributed as dist, torch.multiprocessing as mp

                        def worker(rank, world, store):
                            dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world,
                                                    timeout=datetime.timedelta(seconds=60))
                            model = torch.nn.Linear(4, 2)
                            opt = torch.optim.SGD(model.parameters(), lr=0.1)
                            data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 4), torch.arange(40) % 2), batch_size=4)
                            for x, y in data:
                                loss = torch.nn.functional.cross_entropy(model(x), y)
                                opt.zero_grad(); loss.backward(); opt.step()
                            dist.destroy_process_group()

                        if __name__ == "__main__":
                            # A file store, not a port: a port from bind(0) can be taken again before gloo binds it.
                            store = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store")
                            mp.spawn(worker, args=(2, store), nprocs=2)
                        """
                    )
                )
            env = child_env(PYTHONPATH=HOOK_DIR, STEPSCOPE_URL=server.url, OMP_NUM_THREADS="1")
            result = subprocess.run([sys.executable, "-m", "stepscope", "run", script], env=env, capture_output=True, text=True, timeout=180)
        self.assertEqual(result.returncode, 0, result.stderr)
        hellos = server.of_type("hello")
        self.assertEqual(sorted((h["rank"], h["world_size"]) for h in hellos), [(0, 2), (1, 2)])
        self.assertEqual(len({h["job"] for h in hellos}), 1, hellos)
        self.assertEqual(sorted(len(server.store.seqs(h["session"])) for h in hellos), [10, 10])


@unittest.skipUnless(HAS_ACCELERATE and os.environ.get("STEPSCOPE_TEST_FRAMEWORKS"), "the Accelerate loop runs with STEPSCOPE_TEST_FRAMEWORKS=1 where accelerate is installed")
class AccelerateTest(Quiet):
    """The Accelerate loop of its examples, through the zero-code path."""

    def test_accelerate_loop(self):
        import torch
        from accelerate import Accelerator

        self.assertTrue(_auto.install(torch))
        self.addCleanup(_auto.uninstall)
        scope = Scope(None)
        _auto._driver.scope_factory = lambda: scope
        torch.manual_seed(0)
        accelerator = Accelerator(cpu=True)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(40, 8), torch.arange(40) % 3), batch_size=4, shuffle=True)
        model, opt, data = accelerator.prepare(model, opt, data)
        for epoch in range(2):
            model.train()
            for x, y in data:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
        _auto._driver.flush()
        rows = list(scope._queue)
        self.assertEqual(len(rows), 20)
        self.assertEqual(sum(r[SAMPLES] or 0 for r in rows), 80)  # a prefetching loader: counted one batch early


if __name__ == "__main__":
    unittest.main()
