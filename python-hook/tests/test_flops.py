"""MFU's FLOP count (stepscope._flops): given with set_flops_per_step, or counted once on a real
step by torch.utils.flop_counter (torch >= 2.1: the PyPI test environment; Debian's 1.13 has no
counter and must say so and leave the step alone)."""

import unittest

from stepscope import _flops

from .fake_sidecar import wait_until
from .test_auto import HAS_TORCH
from .test_delivery import DeliveryCase


def flop_counter_available():
    if not HAS_TORCH:
        return False
    try:
        import torch.utils.flop_counter  # noqa: F401
    except Exception:
        return False
    return True


class FlopsTest(DeliveryCase):
    def models(self, server):
        return [m["env"]["model"] for m in server.of_type("env") if "model" in m["env"]]

    def test_valid_flops(self):
        self.assertEqual(_flops.valid_flops(3), 3.0)
        self.assertEqual(_flops.valid_flops("1e12"), 1e12)
        for bad in (0, -1, float("nan"), float("inf"), 1e23, True, None, "many", [1]):
            self.assertIsNone(_flops.valid_flops(bad), bad)

    def test_set_flops_per_step_goes_in_the_env_and_a_bad_value_is_refused(self):
        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        self.assertFalse(scope.set_flops_per_step(-5))
        self.assertTrue(scope.set_flops_per_step(6.5e12))
        self.assertTrue(wait_until(lambda: self.models(server)))
        self.assertEqual(self.models(server), [{"flops_per_step": 6.5e12, "flops_from": "user"}])
        # What the user said wins: count_flops does nothing after it.
        self.assertIs(scope.count_flops(), _flops.NULL)
        self.assertTrue(scope.close(2.0))

    @unittest.skipUnless(flop_counter_available(), "torch.utils.flop_counter needs torch >= 2.1")
    def test_count_flops_counts_one_real_step_once(self):
        import torch

        server = self.server()
        scope = self.init(url=server.url)
        model = torch.nn.Linear(64, 32)
        x = torch.randn(16, 64)
        for _ in range(3):
            with scope.count_flops():
                model(x).sum().backward()
            scope.step(samples=16)
        self.assertTrue(wait_until(lambda: self.models(server)))
        self.assertTrue(scope.close(2.0))
        # Forward 2·16·64·32 and as much again for the weight's gradient (x needs none): counted once.
        self.assertEqual(self.models(server), [{"flops_per_step": 2 * 2 * 16 * 64 * 32, "flops_from": "flop_counter"}])

    @unittest.skipUnless(flop_counter_available(), "torch.utils.flop_counter needs torch >= 2.1")
    def test_a_step_that_raises_is_not_counted_and_a_later_one_is(self):
        import torch

        server = self.server()
        scope = self.init(url=server.url)
        model = torch.nn.Linear(8, 8)
        with self.assertRaises(ValueError):
            with scope.count_flops():
                model(torch.randn(2, 8))
                raise ValueError("the user's step failed")
        with scope.count_flops():
            model(torch.randn(2, 8))
        self.assertTrue(wait_until(lambda: self.models(server)))
        self.assertTrue(scope.close(2.0))
        self.assertEqual(self.models(server), [{"flops_per_step": 2 * 2 * 8 * 8, "flops_from": "flop_counter"}])

    @unittest.skipIf(flop_counter_available(), "this torch has a FLOP counter")
    def test_without_a_flop_counter_the_step_runs_and_nothing_is_sent(self):
        server = self.server()
        scope = self.init(url=server.url)
        ran = []
        for _ in range(2):
            with scope.count_flops():
                ran.append(1)
        self.assertEqual(ran, [1, 1])
        self.assertTrue(scope.close(2.0))
        self.assertEqual(self.models(server), [])


class FlopsFromEnvironmentTest(DeliveryCase):
    def test_stepscope_flops_per_step_is_sent_and_a_bad_one_ignored(self):
        from unittest import mock

        server = self.server()
        with mock.patch.dict("os.environ", {"STEPSCOPE_FLOPS_PER_STEP": " 2.5e12 "}):
            scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: any("model" in m["env"] for m in server.of_type("env"))))
        self.assertTrue(scope.close(2.0))
        self.assertEqual([m["env"]["model"] for m in server.of_type("env") if "model" in m["env"]], [{"flops_per_step": 2.5e12, "flops_from": "user"}])
        server = self.server()
        with mock.patch.dict("os.environ", {"STEPSCOPE_FLOPS_PER_STEP": "lots"}):
            scope = self.init(url=server.url)
        self.assertTrue(scope.close(2.0))
        self.assertFalse(any("model" in m["env"] for m in server.of_type("env")))
