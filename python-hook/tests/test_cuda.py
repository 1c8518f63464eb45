"""CUDA event timing with fake events whose completion and timestamps the test controls."""

import io
import sys
import types
import unittest
from unittest import mock

import stepscope
from stepscope import _log, _msgpack, _protocol
from stepscope._cuda import GpuTimer
from stepscope._record import GPU
from stepscope._scope import Scope
from stepscope._sender import Sender

from .fake_sidecar import FakeSidecar, wait_until


class FakeGpu:
    """Creates fake events and completes them on demand, in record order unless told otherwise."""

    def __init__(self):
        self.recorded = []  # events in record order, re-recorded ones appended again
        self.synchronize_calls = 0
        self.created = 0

    def event(self):
        self.created += 1
        return FakeEvent(self)

    def pending(self):
        return [e for e in self.recorded if e.completed_at is None]

    def complete(self, event, at_ns):
        event.completed_at = at_ns


class FakeEvent:
    def __init__(self, gpu):
        self.gpu = gpu
        self.completed_at = None
        self.records = 0

    def record(self, stream=None):
        self.records += 1
        self.completed_at = None
        self.gpu.recorded.append(self)

    def query(self):
        return self.completed_at is not None

    def elapsed_time(self, end):
        if self.completed_at is None or end.completed_at is None:
            raise RuntimeError("cudaErrorNotReady")
        return (end.completed_at - self.completed_at) / 1e6

    def synchronize(self):
        self.gpu.synchronize_calls += 1
        raise AssertionError("synchronize() must never be called")


class FakeClock:
    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now


class GpuCase(unittest.TestCase):
    def setUp(self):
        self.gpu = FakeGpu()
        self.clock = FakeClock()
        self.timer = GpuTimer(self.gpu.event, pairs=64, timeout_s=10.0, clock=self.clock)
        self.scope = Scope(None)
        self.scope._use_gpu_timer(self.timer)
        _log.reset()
        self.addCleanup(_log.reset)
        stderr = mock.patch.object(sys, "stderr", io.StringIO())
        stderr.start()
        self.addCleanup(stderr.stop)

    def tearDown(self):
        self.assertEqual(self.gpu.synchronize_calls, 0)

    def gpu_step(self, phases=("h2d", "compute")):
        """Run one step with the given phases; return its events [(start, end), ...]."""
        first = len(self.gpu.recorded)
        for name in phases:
            with self.scope.phase(name):
                pass
        self.scope.step()
        events = self.gpu.recorded[first:]
        return list(zip(events[::2], events[1::2]))

    def records(self):
        return list(self.scope._queue)


class GpuTimingTest(GpuCase):
    def test_durations_and_idle_gap(self):
        (h2d0, comp0) = self.gpu_step()
        (h2d1, comp1) = self.gpu_step()
        for event, at in zip((*h2d0, *comp0), (100, 300, 300, 1300)):
            self.gpu.complete(event, at)
        for event, at in zip((*h2d1, *comp1), (2000, 2100, 2100, 2600)):
            self.gpu.complete(event, at)
        self.assertEqual(self.timer.resolve(), 2)
        first, second = (r[7] for r in self.records())
        self.assertEqual((first.h2d_ns, first.compute_ns, first.idle_ns), (200, 1000, None))
        self.assertEqual((second.h2d_ns, second.compute_ns, second.idle_ns), (100, 500, 700))
        self.assertTrue(first.done and second.done)

    def test_out_of_order_completion_resolves_in_order(self):
        step0 = self.gpu_step()
        step1 = self.gpu_step()
        for i, event in enumerate(e for pair in step1 for e in pair):
            self.gpu.complete(event, 5000 + i)
        self.assertEqual(self.timer.resolve(), 0)
        self.assertFalse(any(r[7].done for r in self.records()))
        for i, event in enumerate(e for pair in step0 for e in pair):
            self.gpu.complete(event, 1000 + i)
        self.assertEqual(self.timer.resolve(), 2)
        self.assertEqual(self.records()[1][7].idle_ns, 5000 - 1003)

    def test_a_timer_switched_off_or_on_inside_a_phase(self):
        # `with` calls the __exit__ of the class the phase had when entered: a timed phase left after
        # the timer went (sending stopped for good) records nothing and raises nothing, and a plain one
        # left after it came records no half pair; both still count their wall time.
        with self.scope.phase("compute"):
            self.scope._gpu_off()
        self.assertEqual((self.scope._errors, len(self.gpu.recorded)), (0, 1))
        self.assertGreater(self.scope._compute.total, 0)
        with self.scope.phase("compute"):
            self.scope._use_gpu_timer(GpuTimer(self.gpu.event, pairs=64, timeout_s=10.0, clock=self.clock))
        self.assertEqual(len(self.gpu.recorded), 1)
        self.assertEqual(len(self.gpu_step()), 2)  # a whole pair per phase again
        self.assertEqual(len(self.gpu.recorded), 5)

    def test_multiple_phases_of_a_kind_add_up(self):
        pairs = self.gpu_step(("h2d", "compute", "compute"))
        for (start, end), (a, b) in zip(pairs, ((0, 10), (10, 40), (50, 70))):
            self.gpu.complete(start, a)
            self.gpu.complete(end, b)
        self.timer.resolve()
        result = self.records()[0][7]
        self.assertEqual((result.h2d_ns, result.compute_ns), (10, 50))

    def test_only_compute(self):
        ((start, end),) = self.gpu_step(("compute",))
        self.gpu.complete(start, 0)
        self.gpu.complete(end, 9)
        self.timer.resolve()
        result = self.records()[0][7]
        self.assertEqual((result.h2d_ns, result.compute_ns), (None, 9))

    def test_no_idle_gap_after_a_step_without_gpu_phases(self):
        for event in (e for pair in self.gpu_step() for e in pair):
            self.gpu.complete(event, 10)
        self.gpu_step(("data",))
        for event in (e for pair in self.gpu_step() for e in pair):
            self.gpu.complete(event, 20)
        self.timer.resolve()
        gpu_steps = [r[7] for r in self.records()]
        self.assertIsNone(gpu_steps[1])
        self.assertIsNone(gpu_steps[2].idle_ns)

    def test_pool_exhaustion_falls_back_to_nil_without_blocking(self):
        timer = GpuTimer(self.gpu.event, pairs=2, clock=self.clock)  # 4 events
        self.scope._use_gpu_timer(timer)
        self.gpu_step()  # takes all 4
        self.gpu_step()  # none left: no timing, no waiting
        self.assertEqual(self.gpu.created, 4)
        self.assertGreater(timer.exhausted, 0)
        for event in self.gpu.recorded:
            self.gpu.complete(event, 1)
        self.assertEqual(timer.resolve(), 2)
        first, second = (r[7] for r in self.records())
        self.assertEqual(first.compute_ns, 0)
        self.assertEqual((second.h2d_ns, second.compute_ns, second.idle_ns), (None, None, None))
        # Resolved events went back to the pool: timing resumes without creating more.
        self.assertEqual(len(timer._free), 4)
        self.gpu_step(("compute",))
        self.assertEqual(self.gpu.created, 4)
        self.assertTrue(all(e is not None for e in self.records()[-1][7].marks[0][1:]))

    def test_unfinished_events_time_out_to_nil(self):
        self.gpu_step()
        self.clock.now = 1
        self.assertEqual(self.timer.resolve(), 0)
        self.clock.now = 1 + 10 * 10**9
        self.assertEqual(self.timer.resolve(), 1)
        result = self.records()[0][7]
        self.assertEqual((result.done, result.h2d_ns, result.compute_ns), (True, None, None))
        self.assertEqual(self.timer.timeouts, 1)
        self.assertEqual(len(self.timer._free), 4)

    def test_giving_up_at_close(self):
        self.gpu_step()
        self.gpu_step()
        self.assertEqual(self.timer.resolve(), 0)
        self.assertEqual(self.timer.resolve(give_up=True), 2)
        self.assertTrue(all(r[7].done and r[7].compute_ns is None for r in self.records()))

    def test_nested_gpu_phase_does_not_leak_events(self):
        for _ in range(200):
            with self.scope.phase("compute"):
                with self.scope.phase("compute"):
                    pass
            self.scope.step()
            for event in self.gpu.pending():
                self.gpu.complete(event, 1)
            self.timer.resolve()
        self.assertLessEqual(self.gpu.created, 3)
        self.assertEqual(self.timer.exhausted, 0)

    def test_event_errors_are_contained(self):
        class Broken(FakeEvent):
            def record(self, stream=None):
                raise RuntimeError("CUDA error: an illegal memory access")

        timer = GpuTimer(lambda: Broken(self.gpu), clock=self.clock)
        self.scope._use_gpu_timer(timer)
        with self.scope.phase("compute"):
            pass
        self.scope.step()
        timer.resolve()
        self.assertIsNone(self.records()[0][7].compute_ns)
        self.assertGreater(self.scope.stats()["errors"], 0)

    def test_elapsed_time_errors_give_nil(self):
        pairs = self.gpu_step()
        for start, end in pairs:
            self.gpu.complete(start, 1)
            self.gpu.complete(end, 2)
        pairs[0][0].elapsed_time = mock.Mock(side_effect=RuntimeError("boom"))
        self.timer.resolve()
        self.assertIsNone(self.records()[0][7].h2d_ns)
        self.assertEqual(self.timer.errors, 1)

    def test_bind_thread_runs_once_on_the_resolving_thread(self):
        bind = mock.Mock()
        timer = GpuTimer(self.gpu.event, bind_thread=bind)
        timer.resolve()
        timer.resolve()
        bind.assert_called_once_with()


class OrderedEmissionTest(GpuCase):
    """Through the sender: rows leave in seq order even when later GPU steps finish first."""

    def test_rows_wait_for_earlier_gpu_steps(self):
        sender = Sender(self.scope._queue, self.scope._wake, url="ws://127.0.0.1:1/", identity={}, env={})
        sender.gpu = self.timer
        step0 = self.gpu_step()
        self.scope.step()  # a CPU-only step behind a GPU one
        step2 = self.gpu_step()
        for event in (e for pair in step2 for e in pair):
            self.gpu.complete(event, 9000)
        sender._collect()
        self.assertEqual(len(sender._window), 0)
        for i, event in enumerate(e for pair in step0 for e in pair):
            self.gpu.complete(event, 100 * (i + 1))
        sender._collect()
        rows = [_msgpack.unpackb(row) for _, row in sender._window.next_frame(10)]
        self.assertEqual([row[0] for row in rows], [1, 2, 3])
        gpu_columns = [row[8:11] for row in rows]
        self.assertEqual(gpu_columns, [[100, 100, None], [None, None, None], [0, 0, None]])
        self.assertEqual(len(_protocol.FIELDS), len(rows[0]))


class DeliveredGpuColumnsTest(unittest.TestCase):
    """GPU columns end to end, through the sender to a fake sidecar."""

    def setUp(self):
        _log.reset()
        self.addCleanup(_log.reset)
        self.server = FakeSidecar()
        self.addCleanup(self.server.stop)

    def test_resolved_steps_carry_gpu_times_and_close_gives_up_on_the_rest(self):
        gpu = FakeGpu()
        scope = stepscope.init(url=self.server.url)
        self.addCleanup(scope.close, 0.2)
        scope._use_gpu_timer(GpuTimer(gpu.event))
        for _ in range(3):
            for name in ("h2d", "compute"):
                with scope.phase(name):
                    pass
            scope.step()
        for event, at in zip(gpu.recorded[:8], (0, 100, 100, 600, 1000, 1100, 1100, 1400)):
            gpu.complete(event, at)  # the third step's events never complete
        self.assertTrue(wait_until(lambda: len(self.server.rows()) == 2))
        self.assertTrue(scope.close(timeout=1.0))
        rows = [(r["gpu_h2d_ns"], r["gpu_compute_ns"], r["gpu_idle_ns"]) for r in self.server.rows()]
        self.assertEqual(rows, [(100, 500, None), (100, 300, 400), (None, None, None)])
        self.assertEqual(gpu.synchronize_calls, 0)


class FakeTorchTest(unittest.TestCase):
    """The lazy CUDA decision, with a stand-in torch module in sys.modules."""

    def setUp(self):
        self.gpu = FakeGpu()
        self.initialized = False
        self.set_device_calls = []
        cuda = types.SimpleNamespace(
            is_initialized=lambda: self.initialized,
            is_available=lambda: True,
            current_device=lambda: 1,
            set_device=self.set_device_calls.append,
            Event=lambda enable_timing: self.gpu.event(),
            get_device_name=lambda i: "Fake GPU %d" % i,
            get_device_properties=lambda i: types.SimpleNamespace(uuid="0f1e2d3c-0000-1111-2222-333344445555"),
        )
        fake_torch = types.ModuleType("torch")
        fake_torch.cuda = cuda
        patcher = mock.patch.dict(sys.modules, {"torch": fake_torch})
        patcher.start()
        self.addCleanup(patcher.stop)
        _log.reset()
        self.addCleanup(_log.reset)
        stderr = mock.patch.object(sys, "stderr", io.StringIO())
        stderr.start()
        self.addCleanup(stderr.stop)

    def test_on_when_cuda_is_initialized(self):
        self.initialized = True
        scope = Scope(None)
        with scope.phase("compute"):
            pass
        self.assertEqual(scope._gpu_mode, "on")
        self.assertEqual(len(self.gpu.recorded), 2)
        self.assertEqual(scope._gpu_env["gpu_uuid"], "GPU-0f1e2d3c-0000-1111-2222-333344445555")
        self.assertEqual(scope._gpu_env["gpu_index"], 1)
        scope._gpu.resolve()
        self.assertEqual(self.set_device_calls, [1])

    def test_waits_for_cuda_then_turns_on(self):
        scope = Scope(None)
        with scope.phase("h2d"):
            pass
        self.assertEqual(scope._gpu_mode, "waiting")
        self.assertEqual(self.gpu.recorded, [])
        scope._background_tick()
        self.assertEqual(scope._gpu_mode, "waiting")
        self.initialized = True
        scope._background_tick()
        with scope.phase("h2d"):
            pass
        self.assertEqual(scope._gpu_mode, "on")
        self.assertEqual(len(self.gpu.recorded), 2)

    def test_cuda_false_stays_off(self):
        self.initialized = True
        scope = Scope(None, cuda=False)
        with scope.phase("compute"):
            pass
        self.assertEqual(scope._gpu_mode, "off")
        self.assertEqual(self.gpu.recorded, [])

    def test_cuda_true_does_not_wait(self):
        scope = Scope(None, cuda=True)
        with scope.phase("compute"):
            pass
        self.assertEqual(scope._gpu_mode, "on")

    def test_mode_switch_inside_an_open_phase(self):
        scope = Scope(None)
        phase = scope.phase("compute")
        phase.__enter__()
        self.initialized = True
        scope._background_tick()
        scope.phase("h2d")  # re-decides: GPU timing on while "compute" is open
        phase.__exit__(None, None, None)
        scope.step()
        self.assertIsNone(scope._queue[-1][GPU])
        self.assertEqual(self.gpu.recorded, [])


if __name__ == "__main__":
    unittest.main()
