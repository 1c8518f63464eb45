"""Communication per step (issue 13): the tracker's figures from synthetic events, the row columns,
and, where torch is installed, the wrappers and the DDP hook against real torch.distributed (gloo).

Multi-process runs (2 and 4 ranks, a slow rank, an all-reduce-heavy model) are test/comm-e2e.test.ts.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time
import unittest

import stepscope
from stepscope import _comm, _msgpack, _protocol
from stepscope._comm import CommTracker, _measure

from .fake_sidecar import FakeSidecar, wait_until

MS = 1_000_000
TRAINING = 1


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def tracker(active_at=0, now=10_000 * MS):
    clock = Clock(now)
    t = CommTracker(modules={}, clock=clock, training_thread=TRAINING)
    if active_at is not None:
        t.activate(active_at)
    return t, clock


def sync(t, start_ms, end_ms, nbytes=0, waited=True, timed=True):
    t.events.append(("S", start_ms * MS, end_ms * MS, nbytes, waited, timed))


def launch(t, op, at_ms, nbytes=0, timed=True, ddp_pass=None):
    t.events.append(("L", op, at_ms * MS, nbytes, timed, ddp_pass))


def done(t, op, at_ms):
    t.events.append(("C", op, at_ms * MS))


def step(t, start_ms, end_ms, final=False):
    got = t.step_columns(start_ms * MS, end_ms * MS, final)
    return got if got is None else tuple(None if v is None else (v / MS if i < 2 else v) for i, v in enumerate(got))


class MeasureTest(unittest.TestCase):
    def test_union(self):
        self.assertEqual(_measure([]), 0)
        self.assertEqual(_measure([(0, 10), (5, 20), (30, 40), (40, 41), (35, 38)]), 31)


class TrackerTest(unittest.TestCase):
    def test_nothing_tracked_is_nil(self):
        t, _ = tracker(active_at=None)  # no process group, no collective yet
        self.assertEqual(t.step_columns(0, 100 * MS), (None, None, None))

    def test_steps_before_tracking_began_are_nil(self):
        t, _ = tracker(active_at=50 * MS)
        sync(t, 60, 70, 8)
        self.assertEqual(step(t, 0, 100), (None, None, None))  # began before tracking: unknown
        sync(t, 120, 130, 8)
        self.assertEqual(step(t, 100, 200), (10, 10, 8))

    def test_a_step_without_collectives_is_zero(self):
        t, _ = tracker()
        self.assertEqual(step(t, 0, 100), (0, 0, 0))

    def test_sync_collectives_on_the_training_thread_are_waited(self):
        t, _ = tracker()
        sync(t, 10, 30, 1000)
        sync(t, 40, 45, 24, waited=False)  # another thread: communication, not the training thread's wait
        self.assertEqual(step(t, 0, 100), (25, 20, 1024))

    def test_overlaps_are_merged(self):
        t, _ = tracker()
        launch(t, 1, 10, 100)
        launch(t, 2, 30, 100)
        done(t, 1, 50)
        done(t, 2, 80)
        sync(t, 70, 90, 0)  # e.g. work.wait() of op 2 and then some
        self.assertEqual(step(t, 0, 100), (80, 20, 200))

    def test_a_collective_across_steps_is_split_and_its_bytes_counted_once(self):
        t, _ = tracker()
        launch(t, 1, 40, 512)
        done(t, 1, 140)
        self.assertEqual(step(t, 0, 100), (60, 0, 512))
        self.assertEqual(step(t, 100, 200), (40, 0, 0))

    def test_in_flight_at_the_step_end_counts_to_the_end(self):
        t, clock = tracker()
        launch(t, 1, 50, 64)
        clock.now = 1000 * MS  # long after the step: the collective is known to be still in flight
        self.assertEqual(step(t, 0, 100), (50, 0, 64))
        done(t, 1, 150)
        self.assertEqual(step(t, 100, 200), (50, 0, 0))

    def test_a_fresh_step_waits_briefly_for_completions(self):
        t, clock = tracker()
        launch(t, 1, 50)
        clock.now = 101 * MS  # 1 ms after the step's end: the completion callback may be on its way
        self.assertIsNone(step(t, 0, 100))
        done(t, 1, 90)
        self.assertEqual(step(t, 0, 100), (40, 0, 0))
        launch(t, 2, 150)
        clock.now = 201 * MS
        self.assertEqual(step(t, 100, 200, final=True), (50, 0, 0))  # closing: no waiting

    def test_ddp_waits_from_the_last_bucket_launch_to_the_last_completion(self):
        t, _ = tracker()
        # Three buckets; backward's compute ends when the last is launched (20 ms); they complete later.
        launch(t, 1, 5, 100, ddp_pass=7)
        launch(t, 2, 12, 100, ddp_pass=7)
        launch(t, 3, 20, 100, ddp_pass=7)
        t.events.append(("E", 7, 20 * MS))
        done(t, 1, 15)
        done(t, 2, 40)
        done(t, 3, 70)
        self.assertEqual(step(t, 0, 100), (65, 50, 300))

    def test_ddp_buckets_done_before_backward_ends_are_not_waited(self):
        t, _ = tracker()
        launch(t, 1, 5, 100, ddp_pass=1)
        done(t, 1, 10)
        launch(t, 2, 20, 100, ddp_pass=1)
        done(t, 2, 21)
        t.events.append(("E", 1, 20 * MS))
        self.assertEqual(step(t, 0, 100), (6, 1, 200))

    def test_a_collective_whose_completion_cannot_be_seen_makes_times_nil(self):
        t, _ = tracker()
        sync(t, 10, 20, 100)
        launch(t, 1, 30, 50, timed=False)  # NCCL: the CPU-side call returns at once
        self.assertEqual(step(t, 0, 100), (None, None, 150))
        sync(t, 110, 120, 0)
        self.assertEqual(step(t, 100, 200), (10, 10, 0))

    def test_a_failed_launch_is_forgotten(self):
        t, clock = tracker()
        launch(t, 1, 30, 50)
        t.events.append(("X", 1))
        clock.now = 1000 * MS
        self.assertEqual(step(t, 0, 100), (None, None, 50))
        self.assertEqual(step(t, 100, 200), (0, 0, 0))

    def test_lost_events_make_the_steps_so_far_nil(self):
        t, clock = tracker()
        launch(t, 1, 10)  # its completion will be among the lost
        for i in range(_comm._MAX_EVENTS):
            t.events.append(("S", 20 * MS, 21 * MS, 0, True, True))
        clock.now = 500 * MS
        self.assertEqual(step(t, 0, 100), (None, None, None))
        sync(t, 510, 520)
        self.assertEqual(step(t, 500, 600), (10, 10, 0))  # nothing left in flight for ever

    def test_errors_give_nil_not_an_exception(self):
        t, _ = tracker()
        t.events.append(("S", "garbage"))
        self.assertEqual(t.step_columns(0, 100 * MS), (None, None, None))
        self.assertEqual(t.errors, 1)


class RowTest(unittest.TestCase):
    def row(self, **comm):
        encoded = _protocol.encode_row(1, 0, 10, 100, 10, 0, 80, None, None, None, None, **comm)
        return dict(zip(_protocol.FIELDS, _msgpack.unpackb(encoded)))

    def test_fields(self):
        self.assertEqual(_protocol.FIELDS[-4:], ("comm_ns", "comm_wait_ns", "comm_bytes", "eval_ns"))

    def test_nil_without_communication(self):
        row = self.row()
        self.assertEqual([row["comm_ns"], row["comm_wait_ns"], row["comm_bytes"]], [None, None, None])

    def test_clamped_to_the_step_and_the_wait_to_the_time_in_collectives(self):
        row = self.row(comm_ns=150, comm_wait_ns=120, comm_bytes=2**60)
        self.assertEqual([row["comm_ns"], row["comm_wait_ns"], row["comm_bytes"]], [100, 100, 2**53 - 1])
        row = self.row(comm_ns=40, comm_wait_ns=60, comm_bytes=7)
        self.assertEqual([row["comm_ns"], row["comm_wait_ns"], row["comm_bytes"]], [40, 40, 7])
        row = self.row(comm_ns=None, comm_wait_ns=None, comm_bytes=99)
        self.assertEqual([row["comm_ns"], row["comm_wait_ns"], row["comm_bytes"]], [None, None, 99])


class SenderTest(unittest.TestCase):
    """The sender asks the tracker for each row's columns (no torch: events appended by hand)."""

    def setUp(self):
        self.server = FakeSidecar()
        self.addCleanup(self.server.stop)
        self.addCleanup(setattr, _comm, "_current", None)

    def test_rows_carry_the_columns(self):
        scope = stepscope.init(url=self.server.url, job="comm", rank=0, world_size=1, cuda=False, batch_interval=0.02)
        t = _comm.install(scope, wrap=False)
        self.assertIs(scope._sender.comm, t)
        t.activate()
        scope.step()  # began at init, before tracking: nil
        scope.step()  # no collective: 0
        t0 = _comm._now()
        time.sleep(0.02)
        t.events.append(("S", t0, _comm._now(), 4096, True, True))
        scope.step()
        self.assertTrue(scope.close(2.0))
        rows = self.server.rows()
        self.assertEqual([r["comm_bytes"] for r in rows], [None, 0, 4096])
        self.assertEqual(rows[1]["comm_ns"], 0)
        self.assertGreaterEqual(rows[2]["comm_wait_ns"], 20 * MS)
        self.assertEqual(rows[2]["comm_wait_ns"], rows[2]["comm_ns"])
        self.assertLessEqual(rows[2]["comm_ns"], rows[2]["dur_ns"])

    def test_without_the_tracker_the_columns_are_nil(self):
        scope = stepscope.init(url=self.server.url, job="comm", rank=0, world_size=1, cuda=False, batch_interval=0.02)
        scope.step()
        self.assertTrue(scope.close(2.0))
        [row] = self.server.rows()
        self.assertEqual(self.server.of_type("steps")[0]["fields"], list(_protocol.FIELDS))
        self.assertEqual([row["comm_ns"], row["comm_wait_ns"], row["comm_bytes"]], [None, None, None])

    def test_install_on_a_scope_that_sends_nothing(self):
        self.assertIsNone(_comm.install(stepscope._scope.Scope(None)))

    def test_watch_ddp_without_torch(self):
        self.assertFalse(_comm.watch_ddp(object()))


@unittest.skipUnless(importlib.util.find_spec("torch"), "torch is not installed for this Python")
class RealTorchTest(unittest.TestCase):
    """tests/fixtures/comm_torch_checks.py in a child process: real torch.distributed on gloo (one rank)."""

    @classmethod
    def setUpClass(cls):
        hook = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        script = os.path.join(hook, "tests", "fixtures", "comm_torch_checks.py")
        run = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=hook, timeout=180)
        if run.returncode != 0:
            raise AssertionError("comm_torch_checks.py failed:\n" + run.stderr[-3000:])
        cls.results = json.loads(run.stdout.strip().splitlines()[-1])
        cls.stderr = run.stderr

    def result(self, name):
        got = self.results[name]
        self.assertNotIn("error", got, got)
        return got

    def test_collectives_are_wrapped_in_both_namespaces(self):
        got = self.result("wrapped")
        self.assertTrue({"all_reduce", "all_gather", "broadcast", "barrier", "reduce_scatter"} <= set(got["names"]))
        self.assertTrue(got["c10d_too"])
        self.assertEqual(got["name_kept"], "all_reduce")
        self.assertTrue(got["work_wait"])

    def test_sync_collectives(self):
        got = self.result("sync")
        self.assertEqual(got["kinds"], ["S", "S", "S"])
        # One rank: an all-reduce sends nothing (2(n-1)/n = 0); a broadcast sends its tensor; a barrier nothing.
        self.assertEqual(got["bytes"], [0, 1 << 20, 0])
        self.assertEqual(got["waited"], [True, True, True])
        self.assertEqual(got["timed"], [True, True, True])  # gloo: the CPU sees completion
        self.assertTrue(got["ordered"])
        self.assertEqual(got["value"], 1.0)  # the collective did its work

    def test_async_collective_and_its_wait(self):
        got = self.result("async")
        self.assertEqual(got["kinds"], ["C", "L", "S"])  # launch, completion (backend thread), Work.wait()
        self.assertEqual(got["launch_timed"], [True])

    def test_another_threads_collective_is_not_the_training_threads_wait(self):
        self.assertEqual(self.result("other_thread")["waited"], [False])

    def test_exceptions_pass_through_unchanged(self):
        got = self.result("exception")
        self.assertEqual(len(set(got["raised"])), 1)
        self.assertEqual(got["kinds"], ["L", "X"])  # the failed async launch leaves nothing in flight

    def test_untouched_when_off(self):
        self.assertEqual(self.result("off")["kinds"], [])

    def test_watch_ddp_times_every_bucket_and_leaves_training_as_it_was(self):
        got = self.result("ddp")
        self.assertTrue(got["watching"])
        self.assertTrue(got["same_parameters"])
        self.assertEqual(got["passes"], [1, 2, 3])  # one backward pass a step
        self.assertEqual(got["ends"], 3)
        self.assertEqual(got["completions"], got["launches"])
        self.assertEqual(got["nested_counted"], 0)  # DDP's own all_reduce is not counted a second time
        self.assertTrue(got["twice"])

    def test_a_hook_registered_after_watch_ddp_runs_inside_it(self):
        got = self.result("user_hook_after_watch")
        self.assertEqual(got["user_hook_calls"], 3)
        self.assertEqual(got["state_passed"], ["mine"])
        self.assertEqual(got["timed_buckets"], 3)
        self.assertTrue(got["same_parameters"])
        self.assertEqual(got["second_registration"], "RuntimeError")  # as DDP itself answers a second one
        self.assertEqual(self.result("builtin_after_watch")["timed_buckets"], 1)

    def test_a_model_with_a_hook_already_is_not_watched_and_trains(self):
        self.assertFalse(self.result("hook_before_watch")["watching"])
        self.assertIn("watch_ddp: DDP's communication is not timed", self.stderr)
        self.assertFalse(self.result("not_ddp")["watching"])

    def test_a_model_built_after_init_is_watched_at_construction(self):
        got = self.result("auto_watch")
        self.assertTrue(got["init_wrapped"])
        self.assertTrue(got["watched"])
        self.assertEqual(got["user_hook_calls"], 2)
        self.assertEqual(got["timed_buckets"], 2)
        self.assertTrue(got["same_parameters"])

    def test_rows_of_a_ddp_loop(self):
        got = self.result("rows")
        self.assertTrue(got["installed"])
        self.assertTrue(got["found"])  # built before init(), no watch_ddp: found by init()
        self.assertTrue(got["closed"])
        self.assertEqual(got["fields"], ["comm_ns", "comm_wait_ns", "comm_bytes"])
        first, *rest = got["rows"]
        self.assertEqual(first[:3], [None, None, None])  # began at init(), before the tracker
        for comm_ns, wait_ns, nbytes, dur_ns in rest:
            self.assertGreater(comm_ns, 0)
            self.assertLessEqual(wait_ns, comm_ns)
            self.assertLessEqual(comm_ns, dur_ns)
            self.assertEqual(nbytes, 0)  # one rank sends nothing


if __name__ == "__main__":
    unittest.main()
