"""Deep capture (stepscope._profile): the sidecar's `profile` request answered with a real
torch.profiler window of K steps on the CPU, gzipped Chrome trace JSON in chunks; refusals say why."""

import gzip
import json
import unittest

from .fake_sidecar import wait_until
from .test_auto import HAS_TORCH
from .test_delivery import DeliveryCase


def request(request_id=1, steps=3, max_bytes=8 << 20, chunk_bytes=4096):
    return {"v": 1, "type": "profile", "id": request_id, "steps": steps, "max_bytes": max_bytes, "chunk_bytes": chunk_bytes}


class ProfileCase(DeliveryCase):
    def answers(self, server, request_id):
        return [m for m in server.of_type("profile") if m["id"] == request_id]

    def complete(self, server, request_id):
        return any(m["last"] for m in self.answers(server, request_id))


@unittest.skipUnless(HAS_TORCH, "torch is not installed for this interpreter")
class ProfileTest(ProfileCase):
    def test_a_window_of_k_real_steps_comes_back_as_gzipped_chrome_trace_json(self):
        import torch

        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        hello = server.of_type("hello")[0]
        self.assertIs(hello["profile"], True)
        server.send_all(request(7, steps=3))
        model = torch.nn.Linear(32, 32)
        x = torch.randn(8, 32)

        def step():
            model(x).sum().backward()
            scope.step(samples=8)

        self.assertTrue(wait_until(lambda: step() or self.complete(server, 7), timeout=30.0), "no trace")
        chunks = sorted(self.answers(server, 7), key=lambda m: m["seq"])
        self.assertEqual([m["seq"] for m in chunks], list(range(len(chunks))))
        self.assertTrue(all("error" not in m for m in chunks), chunks[0].get("error"))
        trace = json.loads(gzip.decompress(b"".join(m["data"] for m in chunks)))
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        self.assertTrue(any("linear" in str(e.get("name", "")).lower() or "addmm" in str(e.get("name", "")).lower() for e in events))
        self.assertTrue(all(len(m["data"]) <= 4096 for m in chunks))
        self.assertTrue(scope.close(2.0))

    def test_a_trace_over_the_bound_is_refused_with_why_and_training_goes_on(self):
        import torch

        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        server.send_all(request(8, steps=2, max_bytes=16))
        model = torch.nn.Linear(8, 8)

        def step():
            model(torch.randn(2, 8)).sum().backward()
            scope.step()

        self.assertTrue(wait_until(lambda: step() or self.complete(server, 8)))
        self.assertRegex(self.answers(server, 8)[0]["error"], "bound of 16 bytes")
        self.assertTrue(scope.close(2.0))


    def test_closing_inside_a_window_stops_the_profiler_and_says_why(self):
        import torch

        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        server.send_all(request(9, steps=1000))
        model = torch.nn.Linear(8, 8)

        def step():
            model(torch.randn(2, 8)).sum().backward()
            scope.step()

        started = lambda: scope._profiling is not None and scope._profiling.prof is not None  # noqa: E731
        self.assertTrue(wait_until(lambda: step() or started(), timeout=30.0), "the window never started")
        window = scope._profiling
        self.assertTrue(scope.close(5.0))
        self.assertIsNone(scope._profiling)
        self.assertIsNone(window.prof)  # stopped: torch.profiler records nothing more
        self.assertTrue(wait_until(lambda: bool(self.answers(server, 9))), "no answer to the request")
        self.assertRegex(self.answers(server, 9)[0]["error"], "closed before the window")


class ProfileRefusalTest(ProfileCase):
    def test_bad_k_and_a_second_request_while_one_records_are_refused(self):
        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        server.send_all(request(1, steps=100000))
        self.assertTrue(wait_until(lambda: self.complete(server, 1)))
        self.assertRegex(self.answers(server, 1)[0]["error"], "1 to 1000 steps")
        server.send_all(request(2, steps=5))
        server.send_all(request(3, steps=5))
        self.assertTrue(wait_until(lambda: self.complete(server, 3)))
        self.assertEqual(self.answers(server, 3)[0]["error"], "a capture is already being recorded")
        self.assertTrue(scope.close(2.0))

    def test_without_torch_the_window_fails_with_why_and_steps_go_on(self):
        import sys
        from unittest import mock

        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        with mock.patch.dict(sys.modules, {"torch": None}):
            server.send_all(request(4, steps=2))
            # Steps go on until the answer is in (the request reaches the training thread at a step end).
            self.assertTrue(wait_until(lambda: scope.step() or self.complete(server, 4)))
        self.assertRegex(self.answers(server, 4)[0]["error"], "no torch.profiler")
        self.assertTrue(scope.close(2.0))
