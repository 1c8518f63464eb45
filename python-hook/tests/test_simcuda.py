"""GPU-side times on a simulated CUDA device (tests/simcuda.py): the layer's own semantics, then the
zero-code path on real torch and the framework callbacks, whose marks reach the same GPU columns as
the explicit API's. What only a GPU can confirm is listed in python-hook/README.md ("What was proven
where") and checked by scripts/gpu-check.sh."""

import importlib.util
import sys
import threading
import types
import unittest
from unittest import mock

from stepscope import _auto, _cuda, _log
from stepscope._scope import Scope
from stepscope._record import GPU
from stepscope.integrations import _timer

from .quiet import Quiet
from .simcuda import ManualClock, Point, SimCuda

HAS_TORCH = importlib.util.find_spec("torch") is not None
MS = 1_000_000


class SimLayerTest(unittest.TestCase):
    """The simulated device behaves as torch.cuda and the CUDA runtime document (see simcuda's docstring)."""

    def setUp(self):
        self.clock = ManualClock(1000)
        self.sim = SimCuda(clock=self.clock)

    def test_an_event_completes_when_the_work_before_it_has(self):
        start = self.sim.Event(enable_timing=True)
        end = self.sim.Event(enable_timing=True)
        self.assertTrue(start.query())  # never recorded: query() is True
        start.record()
        self.sim.kernel(5)
        end.record()
        self.assertTrue(start.query())  # the stream was idle: done at once
        self.assertFalse(end.query())
        with self.assertRaisesRegex(RuntimeError, "must be completed"):
            start.elapsed_time(end)
        self.clock.advance(5 * MS)
        self.assertTrue(end.query())
        self.assertEqual(start.elapsed_time(end), 5.0)

    def test_elapsed_time_needs_timing_and_records(self):
        plain = self.sim.Event()
        timed = self.sim.Event(enable_timing=True)
        plain.record()
        timed.record()
        with self.assertRaisesRegex(ValueError, "enable_timing=True"):
            plain.elapsed_time(timed)
        with self.assertRaisesRegex(ValueError, "must be recorded"):
            timed.elapsed_time(self.sim.Event(enable_timing=True))

    def test_streams_and_unknown_points(self):
        side = self.sim.Stream()
        collective_end = Point()  # e.g. waiting for another rank
        side.wait_point(collective_end)
        done = self.sim.Event(enable_timing=True)
        done.record(side)
        self.clock.advance(10 * MS)
        self.assertFalse(done.query())
        collective_end.resolve(self.clock.now + 2 * MS)
        self.assertFalse(done.query())
        self.clock.advance(2 * MS)
        self.assertTrue(done.query())
        # The default stream did not wait for the side stream until told to.
        mark = self.sim.Event(enable_timing=True)
        mark.record()
        self.assertTrue(mark.query())
        self.sim.current_stream().wait_stream(side)
        self.sim.kernel(1)
        later = self.sim.Event(enable_timing=True)
        later.record()
        self.clock.advance(MS)
        self.assertEqual(done.elapsed_time(later), 1.0)

    def test_current_stream_and_device_are_per_thread(self):
        side = self.sim.Stream()
        with self.sim.stream(side):
            self.assertIs(self.sim.current_stream(), side)
            seen = []
            other = threading.Thread(target=lambda: seen.append(self.sim.current_stream()))
            other.start()
            other.join()
            self.assertIs(seen[0], self.sim.default_stream())
        self.assertIs(self.sim.current_stream(), self.sim.default_stream())

    def test_an_event_stays_on_its_device_and_host_waits_are_counted(self):
        sim = SimCuda(devices=2, clock=self.clock)
        event = sim.Event(enable_timing=True)
        event.record()
        sim.set_device(1)
        with self.assertRaisesRegex(RuntimeError, "does not match recording stream's device"):
            event.record()
        event.synchronize()
        sim.synchronize()
        self.assertEqual(sim.host_syncs, 2)


class MarkerCase(Quiet):
    """A scope whose GPU timing runs on the simulated device (a stand-in torch that has only torch.cuda)."""

    def setUp(self):
        super().setUp()
        self.clock = ManualClock(0)
        self.sim = SimCuda(clock=self.clock)
        fake_torch = types.ModuleType("torch")
        fake_torch.cuda = self.sim.namespace()
        patcher = mock.patch.dict(sys.modules, {"torch": fake_torch})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.scope = Scope(None)

    def gpu_rows(self):
        self.assertIsNotNone(self.scope._gpu)
        self.scope._gpu.resolve()
        return [None if r[GPU] is None else (r[GPU].h2d_ns, r[GPU].compute_ns, r[GPU].idle_ns) for r in self.scope._queue]

    def tearDown(self):
        self.assertEqual(self.sim.host_syncs, 0, "the hook synchronized the device")


class NobodyReadsTest(MarkerCase):
    """A scope that sends nothing records no events: nothing would ever read them or give them back."""

    def tearDown(self):
        pass

    def test_a_scope_made_disabled_never_turns_gpu_timing_on(self):
        scope = Scope(None, disabled="STEPSCOPE_URL is not a usable sidecar URL")
        marker = _cuda.Marker(scope)
        for _ in range(3):
            marker.open()
            marker.close_now()
            marker.flush()
            scope.step()
        self.assertEqual((scope._gpu_mode, self.sim.recorded), ("off", []))

    def test_a_sender_that_stops_for_good_turns_it_off(self):
        marker = _cuda.Marker(self.scope)
        marker.open()
        self.scope._sender = types.SimpleNamespace(disabled="token refused")
        marker.close_now()
        marker.flush()
        self.scope.step()
        recorded = len(self.sim.recorded)
        for _ in range(3):
            marker.open()
            marker.close_now()
            marker.flush()
            self.scope.step()
        self.assertEqual(len(self.sim.recorded), recorded)
        self.assertEqual(self.scope._gpu_mode, "off")
        self.assertEqual(self.scope._errors, 0)


class CallbackMarksTest(MarkerCase):
    """The Lightning and Transformers callbacks' timer: a compute span from batch start to batch end."""

    def test_gpu_compute_and_idle_gap(self):
        timer = _timer.HookTimer("test", scope=self.scope)
        timer.start(has_optimizer=True)
        for data_ms in (1, 7, 2):
            self.clock.advance(data_ms * MS)  # the loader's time: the GPU finished what it had
            timer.batch_start(8)
            self.sim.kernel(4)  # forward, backward, step: queued, the host runs on
            timer.optimizer_step()
            timer.batch_end()
        self.clock.advance(100 * MS)
        # The host never waited: each batch's kernels queued at the host's "now"; the GPU idles
        # for what the data took beyond the previous step's 4 ms of queued work.
        self.assertEqual(self.gpu_rows(), [(None, 4 * MS, None), (None, 4 * MS, 3 * MS), (None, 4 * MS, 0)])

    def test_accumulated_batches_are_one_step(self):
        timer = _timer.HookTimer("test", scope=self.scope)
        timer.start(has_optimizer=True)
        for i in range(4):
            timer.batch_start(8)
            self.sim.kernel(3)
            if i % 2:
                timer.optimizer_step()
            timer.batch_end()
            self.clock.advance(10 * MS)
        self.assertEqual(self.gpu_rows(), [(None, 6 * MS, None), (None, 6 * MS, 7 * MS)])

    def test_no_cuda_in_use_no_events(self):
        self.sim.initialized = False
        timer = _timer.HookTimer("test", scope=self.scope)
        timer.start(has_optimizer=True)
        timer.batch_start(8)
        timer.optimizer_step()
        timer.batch_end()
        self.assertEqual(self.sim.recorded, [])
        self.assertIsNone(self.scope._queue[0][GPU])


class MarkerTest(MarkerCase):
    def test_copies_inside_a_span_are_h2d_not_compute(self):
        marker = _cuda.Marker(self.scope)
        marker.open()
        begun = marker.copy_begin()
        self.sim.current_stream().launch(2 * MS, "h2d")
        marker.copy_end(begun)
        self.sim.kernel(5)
        marker.close_now()
        self.sim.kernel(1)  # a second optimizer on the same batch
        marker.close_now()
        marker.flush()
        self.scope.step()
        self.clock.advance(20 * MS)
        self.assertEqual(self.gpu_rows(), [(2 * MS, 6 * MS, None)])
        self.assertEqual(len(self.scope._gpu.pool._free), self.scope._gpu.pool._created - 1)  # all back but the last end

    def test_pending_events_wait_and_are_never_forced(self):
        marker = _cuda.Marker(self.scope)
        marker.open()
        self.sim.kernel(50)
        marker.close_now()
        marker.flush()
        self.scope.step()
        self.assertEqual(self.scope._gpu.resolve(), 0)
        self.clock.advance(50 * MS)
        self.assertEqual(self.scope._gpu.resolve(), 1)

    def test_an_unclosed_span_is_dropped(self):
        marker = _cuda.Marker(self.scope)
        marker.open()
        marker.flush()
        self.scope.step()
        self.assertIsNone(self.scope._queue[0][GPU])
        self.assertEqual(len(self.scope._gpu.pool._free), self.scope._gpu.pool._created)


@unittest.skipUnless(HAS_TORCH, "torch is not installed for this interpreter")
class ZeroCodeOnSimulatedCudaTest(Quiet):
    """The zero-code path on real torch (a DataLoader, an optimizer, copies with non_blocking=True),
    with torch.cuda replaced by the simulated device: the same wrappers and marks as on a GPU."""

    @classmethod
    def setUpClass(cls):
        import torch

        cls.torch = torch
        torch.set_num_threads(1)

    def setUp(self):
        super().setUp()
        self.clock = ManualClock(0)
        self.sim = SimCuda(clock=self.clock)
        patch = self.sim.patch(self.torch)
        patch.__enter__()
        self.addCleanup(patch.__exit__, None, None, None)
        self.assertTrue(_auto.install(self.torch))
        self.addCleanup(_auto.uninstall)  # before the simulated layer goes: it wraps its .to
        self.scope = Scope(None)
        _auto._driver.scope_factory = lambda: self.scope

    def loop(self, data_ms, kernel_ms=5.0, batches=6, copy=True, accumulate=1):
        torch = self.torch
        data = torch.utils.data.TensorDataset(torch.ones(batches * 4, 256), torch.zeros(batches * 4, dtype=torch.long))
        loader = torch.utils.data.DataLoader(data, batch_size=4)
        torch.manual_seed(0)
        model = torch.nn.Linear(256, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i, (x, y) in enumerate(loader):
            if copy:
                x = x.to("cuda", non_blocking=True)
                y = y.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            self.sim.kernel(kernel_ms)  # the model's kernels on the GPU
            loss.backward()
            if (i + 1) % accumulate == 0:
                opt.step()
                opt.zero_grad()
            self.clock.advance(int(data_ms * MS))  # the host's time until the next batch is read
        _auto._driver.flush()
        self.clock.advance(1000 * MS)
        gpu = self.scope._gpu
        self.assertIsNotNone(gpu, "CUDA timing did not turn on")
        gpu.resolve()
        return [None if r[GPU] is None else (r[GPU].h2d_ns, r[GPU].compute_ns, r[GPU].idle_ns) for r in self.scope._queue]

    def copy_ns(self, nbytes):
        from .simcuda import H2D_BYTES_PER_NS

        return int(nbytes / H2D_BYTES_PER_NS) + 2_000

    def test_events_at_the_step_boundaries_and_around_copies(self):
        rows = self.loop(data_ms=8)
        copies = self.copy_ns(4 * 256 * 4) + self.copy_ns(4 * 8)
        # CUDA comes into use at the first copy: the first step has no span, the copies are timed
        # from the step after the hook saw CUDA in use (the h2d wrapper is put on at a step's end).
        timed = [row for row in rows if row is not None and row[1] is not None]
        self.assertGreaterEqual(len(timed), 4)
        for h2d_ns, compute_ns, idle_ns in timed[1:]:
            self.assertEqual(h2d_ns, copies)
            self.assertEqual(compute_ns, 5 * MS)  # the span less the copies in it
            self.assertEqual(idle_ns, 8 * MS - 5 * MS - copies)  # the host's 8 ms less the GPU's queued work
        self.assertEqual(self.sim.host_syncs, 0)
        self.assertEqual(self.stderr.getvalue(), "")

    def test_data_wait_overlapping_queued_gpu_work_leaves_the_gpu_busy(self):
        rows = self.loop(data_ms=3, kernel_ms=10)
        timed = [row for row in rows if row is not None and row[2] is not None]
        self.assertTrue(timed)
        self.assertEqual({row[2] for row in timed}, {0})  # the GPU never waited for the host

    def test_gradient_accumulation_spans_add_up_in_one_step(self):
        rows = self.loop(data_ms=6, kernel_ms=2, batches=8, copy=False, accumulate=2)
        timed = [row for row in rows if row is not None and row[1] is not None]
        self.assertTrue(timed)
        for h2d_ns, compute_ns, idle_ns in timed:
            self.assertIsNone(h2d_ns)
            self.assertEqual(compute_ns, 4 * MS)


if __name__ == "__main__":
    unittest.main()
