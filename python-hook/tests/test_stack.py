"""The software stack fingerprint (stepscope._stack) on the interpreter's real torch.

Debian's 1.13 in the normal suite; a current 2.x (the test environment from PyPI) adds torch.compile
with real recompiles when STEPSCOPE_TEST_FRAMEWORKS=1 (test/frameworks-e2e.test.ts runs it end to
end through a real sidecar).
"""

import json
import os
import sys
import unittest
from unittest import mock

import stepscope
from stepscope import _env, _stack

from .fake_sidecar import FakeSidecar
from .quiet import Quiet
from .test_auto import HAS_TORCH


class Hostile:
    """Every attribute read raises: the fingerprint must carry on without it."""

    def __getattr__(self, name):
        raise RuntimeError("no " + name)


class WithoutTorchTest(Quiet):
    def test_settings_of_a_torch_whose_every_read_fails_are_empty_not_an_error(self):
        stack = _stack.settings(Hostile())
        self.assertNotIn("matmul_precision", stack)
        self.assertNotIn("cudnn_benchmark", stack)
        self.assertEqual(set(stack) - {"cpu_affinity", "local_world_size"}, set())
        self.assertIsNone(_stack.nccl_version(Hostile()))

    def test_install_on_a_broken_torch_watches_nothing_and_raises_nothing(self):
        self.assertFalse(_stack.install(Hostile()))

    def test_the_cpus_and_ranks_of_the_host(self):
        with mock.patch.dict(os.environ, {"LOCAL_WORLD_SIZE": "4"}):
            stack = _stack.settings(Hostile())
        self.assertEqual(stack["cpu_affinity"], len(os.sched_getaffinity(0)))
        self.assertEqual(stack["local_world_size"], 4)

    def test_no_compile_group_where_dynamo_was_never_imported(self):
        with mock.patch.dict(sys.modules, {"torch._dynamo.utils": None}):
            self.assertIsNone(_stack.compile_totals())


@unittest.skipUnless(HAS_TORCH, "torch is not installed for this interpreter")
class TorchStackTest(Quiet):
    def setUp(self):
        super().setUp()
        import torch

        self.torch = torch
        _stack.uninstall()
        self.addCleanup(_stack.uninstall)
        matmul = torch.get_float32_matmul_precision()
        cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32)
        deterministic = torch.are_deterministic_algorithms_enabled()

        def restore():
            torch.set_float32_matmul_precision(matmul)
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.allow_tf32 = cudnn
            torch.use_deterministic_algorithms(deterministic)

        self.addCleanup(restore)

    def step(self, model, opt, autocast=None):
        torch = self.torch
        x = torch.randn(8, 16)
        if autocast is not None:
            with torch.autocast("cpu", dtype=autocast):
                loss = model(x).float().pow(2).mean()
        else:
            loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def test_the_flags_as_the_program_set_them(self):
        torch = self.torch
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.allow_tf32 = False
        torch.use_deterministic_algorithms(True)
        stack = _stack.settings(torch)
        self.assertEqual(
            {k: stack[k] for k in ("matmul_precision", "cudnn_benchmark", "cudnn_deterministic", "cudnn_tf32", "deterministic_algorithms")},
            {"matmul_precision": "high", "cudnn_benchmark": True, "cudnn_deterministic": True, "cudnn_tf32": False, "deterministic_algorithms": True},
        )
        torch.set_float32_matmul_precision("highest")
        torch.use_deterministic_algorithms(False)
        stack = _stack.settings(torch)
        self.assertEqual((stack["matmul_precision"], stack["deterministic_algorithms"]), ("highest", False))

    def test_reading_the_stack_initialises_no_cuda(self):
        torch = self.torch
        env = _env.fingerprint("test")
        self.assertFalse(torch.cuda.is_initialized())
        self.assertIs(env["stack"]["cuda_in_use"], False)
        if hasattr(torch._C, "_nccl_version"):  # a CUDA build (PyPI's): NCCL's version from the library alone
            self.assertRegex(env["nccl"], r"^\d+\.\d+\.\d+")
        else:  # Debian's CPU build has no NCCL
            self.assertNotIn("nccl", env)

    def test_autocast_is_seen_in_the_steps_and_off_after_steps_without(self):
        torch = self.torch
        self.assertTrue(_stack.install(torch))
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        watcher = _stack.Watcher({}, interval=0)
        watcher.poll(0.0, 0)  # watching from step 0
        update = watcher.poll(1.0, 0, force=True)
        self.assertNotIn("amp", (update or {}).get("stack", {}), "no step yet: unknown, not off")
        self.step(model, opt)
        self.assertEqual(watcher.poll(2.0, 1)["stack"]["amp"], "off")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
            pass  # a disabled autocast is no mixed precision
        self.assertIsNone(watcher.poll(3.0, 2))
        self.step(model, opt, autocast=torch.bfloat16)
        self.assertEqual(watcher.poll(4.0, 3)["stack"]["amp"], "bfloat16")

    def test_a_grad_scaler_in_use_is_noted(self):
        torch = self.torch
        self.assertTrue(_stack.install(torch))
        scaler_cls = getattr(getattr(torch, "amp", None), "GradScaler", None)
        scaler = scaler_cls("cpu") if scaler_cls is not None else torch.cuda.amp.GradScaler(enabled=False)
        watcher = _stack.Watcher({}, interval=0)
        scaler.scale(torch.ones(1, requires_grad=True))
        stack = watcher.poll(0.0, 0)["stack"]
        # Enabled, it is noted; torch 1.13's CUDA-only scaler on a CPU machine is disabled, and is not.
        self.assertEqual(stack.get("grad_scaler", False), bool(scaler.is_enabled()))
        # Once an enabled scaler is seen, the steps call the original again: the wrapper costs nothing more.
        self.assertEqual(hasattr(type(scaler).scale, "__wrapped__"), not scaler.is_enabled())

    def test_updates_at_most_once_per_interval_and_only_on_change(self):
        torch = self.torch
        watcher = _stack.Watcher({"stack": _stack.settings(torch)}, interval=10.0)
        watcher.poll(90.0, 0)  # what the hello and the first poll say (torch.compile's, where it ran before)
        self.assertIsNone(watcher.poll(100.0, 0), "nothing changed since")
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
        self.assertIsNone(watcher.poll(105.0, 0), "within the interval: not even read")
        update = watcher.poll(110.0, 0)
        self.assertEqual(set(update), {"stack"})
        self.assertEqual(update["stack"]["cudnn_benchmark"], torch.backends.cudnn.benchmark)
        self.assertIsNone(watcher.poll(120.0, 0), "no change since the last update")
        torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
        self.assertIsNotNone(watcher.poll(121.0, 0, force=True), "close reads whatever the interval")

    def test_the_final_state_reaches_the_sidecar_at_close_within_the_env_bounds(self):
        torch = self.torch
        server = FakeSidecar()
        self.addCleanup(server.stop)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scope = stepscope.init(url=server.url, job="stack", comm=False)
        self.addCleanup(scope.close, 0)
        for _ in range(3):
            self.step(model, opt, autocast=torch.bfloat16)
            scope.step()
        self.assertTrue(scope.close(timeout=5))
        hello = server.of_type("hello")[0]
        self.assertIn("matmul_precision", hello["env"]["stack"])
        env = dict(hello["env"])
        for message in server.of_type("env"):
            env.update(message["env"])
        self.assertEqual(env["stack"]["amp"], "bfloat16")
        # The sidecar's bounds (src/protocol/hook-schema.ts): 64 keys a map, 16 KiB as JSON.
        self.assertLessEqual(len(env), 64)
        self.assertLessEqual(len(env["stack"]), 64)
        self.assertLess(len(json.dumps(env)), 16 * 1024)


@unittest.skipUnless(
    HAS_TORCH and os.environ.get("STEPSCOPE_TEST_FRAMEWORKS") and hasattr(__import__("torch") if HAS_TORCH else None, "compile"),
    "torch.compile runs under a torch 2.x with STEPSCOPE_TEST_FRAMEWORKS=1",
)
class CompileTest(Quiet):
    def test_recompiles_for_new_shapes_are_counted_and_the_last_minute_forgets_them(self):
        import torch
        import torch._dynamo

        def forget():  # dynamo's counters are the process's: the other tests run uncompiled
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()

        forget()
        self.addCleanup(forget)

        def f(x):
            return (x * 2).sum()

        compiled = torch.compile(f, backend="eager", dynamic=False)
        watcher = _stack.Watcher({}, interval=0)
        compiled(torch.ones(2))
        first = watcher.poll(0.0, 1)["compile"]
        self.assertEqual((first["in_use"], first["recompiles"], first["recompiles_1m"]), (True, 0, 0))
        for n in range(3, 8):  # five new shapes, each a recompile (static shapes)
            compiled(torch.ones(n))
        second = watcher.poll(30.0, 6)["compile"]
        self.assertEqual((second["recompiles"], second["recompiles_1m"]), (5, 5))
        self.assertGreater(second["recompile_s_1m"], 0)
        self.assertGreaterEqual(second["compiles"], 6)
        later = watcher.poll(95.0, 60)["compile"]  # a minute after them, with none since
        self.assertEqual((later["recompiles"], later["recompiles_1m"]), (5, 0))
