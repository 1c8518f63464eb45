"""Step and phase semantics on the training thread, with a fake clock and no sidecar."""

import io
import sys
import unittest
from unittest import mock

from stepscope import _log, _record, _scope
from stepscope._record import SEQ
from stepscope._scope import Scope

# The record's fields by the names these tests read them by.
FIELDS = {name: getattr(_record, name.upper()) for name in ("seq", "end_ns", "dur_ns", "data_ns", "h2d_ns", "compute_ns", "samples", "gpu")}
FIELDS["eval"] = _record.EVAL_NS


class FakeClock:
    def __init__(self, start=1_000):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, ns):
        self.now += ns


class SlowLoader:
    """An iterable whose next() takes ``fetch_ns`` of fake time."""

    def __init__(self, clock, n, fetch_ns, final_fetch_ns=0):
        self.clock = clock
        self.n = n
        self.fetch_ns = fetch_ns
        self.final_fetch_ns = final_fetch_ns
        self.extra = "passthrough"

    def __iter__(self):
        for i in range(self.n):
            self.clock.advance(self.fetch_ns)
            yield i
        self.clock.advance(self.final_fetch_ns)

    def __len__(self):
        return self.n




class StepCase(unittest.TestCase):
    def setUp(self):
        self.clock = FakeClock()
        patcher = mock.patch.object(_scope, "_now", self.clock)
        patcher.start()
        self.addCleanup(patcher.stop)
        _log.reset()
        self.addCleanup(_log.reset)
        self.stderr = io.StringIO()
        stderr_patch = mock.patch.object(sys, "stderr", self.stderr)
        stderr_patch.start()
        self.addCleanup(stderr_patch.stop)
        self.scope = Scope(None)

    def records(self):
        return [{name: record[index] for name, index in FIELDS.items()} for record in self.scope._queue]

    def work(self, name, ns):
        with self.scope.phase(name):
            self.clock.advance(ns)


class WithStepTest(StepCase):
    def test_phases_data_and_other(self):
        self.clock.advance(10_000)  # setup time before the loop is not part of any step
        for _ in self.scope.loader(SlowLoader(self.clock, 3, fetch_ns=5)):
            self.work("h2d", 2)
            self.work("compute", 3)
            self.clock.advance(1)  # other
            self.scope.step(samples=4)
        records = self.records()
        self.assertEqual([r["seq"] for r in records], [1, 2, 3])
        for r in records:
            self.assertEqual((r["dur_ns"], r["data_ns"], r["h2d_ns"], r["compute_ns"], r["samples"]), (11, 5, 2, 3, 4))
            self.assertIsNone(r["gpu"])
        self.assertEqual([r["end_ns"] for r in records], [11_000 + 11, 11_000 + 22, 11_000 + 33])

    def test_eval_phase_is_sent_once_used_and_null_before(self):
        for i in self.scope.loader(SlowLoader(self.clock, 3, fetch_ns=5)):
            self.work("compute", 3)
            if i == 1:
                self.work("eval", 20)
            self.clock.advance(1)
            self.scope.step()
        records = self.records()
        self.assertEqual([r["eval"] for r in records], [None, 20, 0])
        self.assertEqual([r["dur_ns"] for r in records], [9, 29, 9])
        self.assertIn("eval", _scope.PHASES)
        self.assertEqual(self.stderr.getvalue(), "")  # a known phase: no warning

    def test_step_starts_at_end_of_previous_step(self):
        loader = SlowLoader(self.clock, 2, fetch_ns=5)
        for _ in self.scope.loader(loader):
            self.work("compute", 3)
            self.scope.step()
            self.clock.advance(7)  # after step(): belongs to the next step
        r = self.records()
        self.assertEqual([x["dur_ns"] for x in r], [8, 7 + 5 + 3])

    def test_time_in_the_final_next_goes_to_the_next_step(self):
        for _ in self.scope.loader(SlowLoader(self.clock, 1, fetch_ns=5, final_fetch_ns=40)):
            self.scope.step()
        self.work("compute", 10)
        self.scope.step()
        r = self.records()
        self.assertEqual([(x["dur_ns"], x["data_ns"], x["compute_ns"]) for x in r], [(5, 5, 0), (50, 40, 10)])

    def test_manual_steps_without_loader_start_at_init(self):
        self.clock.advance(4)
        self.work("data", 6)
        self.work("compute", 10)
        self.scope.step(samples=2)
        self.work("compute", 1)
        self.scope.step()
        r = self.records()
        self.assertEqual([(x["dur_ns"], x["data_ns"], x["compute_ns"]) for x in r], [(20, 6, 10), (1, 0, 1)])
        self.assertEqual([x["samples"] for x in r], [2, None])

    def test_phases_before_the_loop_are_not_counted(self):
        self.work("compute", 100)  # e.g. a warm-up pass before iterating the loader
        for _ in self.scope.loader(SlowLoader(self.clock, 1, fetch_ns=5)):
            self.work("compute", 3)
            self.scope.step()
        self.assertEqual([(x["dur_ns"], x["compute_ns"]) for x in self.records()], [(8, 3)])

    def test_step_inside_an_epoch_loop_continues_across_epochs(self):
        loader = self.scope.loader(SlowLoader(self.clock, 2, fetch_ns=1))
        for _epoch in range(2):
            for _ in loader:
                self.work("compute", 2)
                self.scope.step()
        self.assertEqual([x["dur_ns"] for x in self.records()], [3, 3, 3, 3])
        self.assertEqual([x["seq"] for x in self.records()], [1, 2, 3, 4])


class WithoutStepTest(StepCase):
    def test_each_next_ends_the_previous_step(self):
        for _ in self.scope.loader(SlowLoader(self.clock, 3, fetch_ns=5, final_fetch_ns=2)):
            self.work("h2d", 1)
            self.work("compute", 4)
            self.clock.advance(1)
        r = self.records()
        self.assertEqual(len(r), 3)
        for x in r:
            self.assertEqual((x["dur_ns"], x["data_ns"], x["h2d_ns"], x["compute_ns"]), (11, 5, 1, 4))
        self.assertEqual(r[-1]["end_ns"], 1_000 + 33)

    def test_leaving_the_loop_ends_the_step(self):
        for i in self.scope.loader(SlowLoader(self.clock, 10, fetch_ns=5)):
            self.work("compute", 4)
            if i == 1:
                break
        self.clock.advance(1000)
        r = self.records()
        self.assertEqual([(x["dur_ns"], x["compute_ns"]) for x in r], [(9, 4), (9, 4)])

    def test_exception_in_the_loop_ends_the_step_and_propagates(self):
        with self.assertRaises(ZeroDivisionError):
            for _ in self.scope.loader(SlowLoader(self.clock, 10, fetch_ns=5)):
                self.work("compute", 4)
                1 / 0
        self.assertEqual([x["dur_ns"] for x in self.records()], [9])

    def test_mixing_step_and_no_step(self):
        for i in self.scope.loader(SlowLoader(self.clock, 3, fetch_ns=1)):
            self.work("compute", 2)
            if i != 1:
                self.scope.step()
        self.assertEqual([x["dur_ns"] for x in self.records()], [3, 3, 3])


class PhaseTest(StepCase):
    def test_unknown_phase_is_other_and_warns_once(self):
        for _ in range(3):
            self.work("backward", 5)
            self.work(None, 1)
            self.work(["unhashable"], 1)
        self.scope.step()
        r = self.records()[0]
        self.assertEqual((r["dur_ns"], r["data_ns"], r["h2d_ns"], r["compute_ns"]), (21, 0, 0, 0))
        lines = self.stderr.getvalue().splitlines()
        self.assertEqual(len(lines), 1)
        self.assertIn("unknown phase 'backward'", lines[0])

    def test_phase_objects_are_cached(self):
        self.assertIs(self.scope.phase("compute"), self.scope.phase("compute"))
        self.assertIs(self.scope.phase("data"), self.scope.phase("data"))

    def test_exceptions_inside_a_phase_propagate_and_are_timed(self):
        with self.assertRaises(KeyError):
            with self.scope.phase("compute"):
                self.clock.advance(3)
                raise KeyError("boom")
        self.scope.step()
        self.assertEqual(self.records()[0]["compute_ns"], 3)

    def test_nested_phases_never_crash(self):
        with self.scope.phase("compute"):
            self.clock.advance(1)
            with self.scope.phase("compute"):
                self.clock.advance(1)
            with self.scope.phase("h2d"):
                self.clock.advance(1)
        self.scope.step()
        r = self.records()[0]
        self.assertEqual((r["dur_ns"], r["compute_ns"], r["h2d_ns"]), (3, 3, 1))

    def test_unbalanced_exit_is_ignored(self):
        phase = self.scope.phase("compute")
        phase.__exit__(None, None, None)
        with phase:
            self.clock.advance(2)
        self.scope.step()
        self.assertEqual(self.records()[0]["compute_ns"], 2)

    def test_step_inside_a_phase(self):
        with self.scope.phase("compute"):
            self.clock.advance(5)
            self.scope.step()
        self.clock.advance(1)
        self.scope.step()
        self.assertEqual([(x["dur_ns"], x["compute_ns"]) for x in self.records()], [(5, 0), (1, 5)])


class LoaderWrapperTest(StepCase):
    def test_len_and_attributes_pass_through(self):
        inner = SlowLoader(self.clock, 7, fetch_ns=1)
        wrapped = self.scope.loader(inner)
        self.assertEqual(len(wrapped), 7)
        self.assertEqual(wrapped.extra, "passthrough")
        with self.assertRaises(AttributeError):
            wrapped.missing

    def test_loader_errors_propagate(self):
        def broken():
            yield 1
            raise OSError("disk")

        with self.assertRaises(OSError):
            for _ in self.scope.loader(broken()):
                self.scope.step()
        self.assertEqual(len(self.records()), 1)

    def test_items_are_unchanged(self):
        items = [object(), None, 3]
        self.assertEqual(list(self.scope.loader(items)), items)


class BufferTest(StepCase):
    def test_full_queue_keeps_the_newest(self):
        scope = Scope(None, buffer_size=4)
        for _ in range(10):
            scope.step()
        self.assertEqual([r[SEQ] for r in scope._queue], [7, 8, 9, 10])

    def test_sender_is_woken_at_the_early_send_count(self):
        for _ in range(_scope._WAKE_AT - 1):
            self.scope.step()
        self.assertFalse(self.scope._wake.is_set())
        self.scope.step()
        self.assertTrue(self.scope._wake.is_set())

    def test_stats_without_sender(self):
        self.scope.step()
        stats = self.scope.stats()
        self.assertEqual(stats["records"], 1)
        self.assertFalse(stats["connected"])
        self.assertFalse(self.scope.close(1.0))


if __name__ == "__main__":
    unittest.main()
