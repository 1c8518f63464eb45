"""Where a stalled rank is (issue 29): the stack the sender thread reads of a real blocked thread,
bounded and without locals; how still it is; the loader workers in /proc; the Flight Recorder's dump
reduced; and the sender's heartbeats and its answer to a `capture` request, against a stand-in sidecar.
"""

import importlib.util
import json
import os
import subprocess
import tempfile
import sys
import threading
import time
import unittest

import stepscope
from stepscope import _protocol, _where

from .fake_sidecar import FakeSidecar, wait_until

SECRET = "a local value that must never leave the process"


def blocked_in_here(ready, release):
    secret = SECRET  # noqa: F841 (a local the capture must not read)
    ready.set()
    release.wait()


def deep(n, ready, release):
    if n == 0:
        blocked_in_here(ready, release)
    else:
        deep(n - 1, ready, release)


class BlockedThread:
    """A real thread blocked on an event, `depth` calls down."""

    def __init__(self, depth=0):
        self.ready = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=deep, args=(depth, self.ready, self.release), name="trainer", daemon=True)

    def __enter__(self):
        self.thread.start()
        self.ready.wait(5)
        time.sleep(0.05)  # into Event.wait
        return self.thread.ident

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join(5)


class CaptureTest(unittest.TestCase):
    def test_the_training_threads_stack_innermost_first_file_line_function_only(self):
        with BlockedThread() as tid:
            where = _where.capture(tid, exclude=(threading.get_ident(),))
        training = where["threads"][0]
        self.assertTrue(training["training"])
        self.assertEqual(training["name"], "trainer")
        functions = [f[2] for f in training["frames"]]
        # Innermost first: the standard library's wait, then this file's functions, outermost last.
        self.assertIn("blocked_in_here", functions)
        self.assertLess(functions.index("wait"), functions.index("blocked_in_here"))
        self.assertLess(functions.index("blocked_in_here"), functions.index("deep"))
        ours = [f for f in training["frames"] if f[2] == "blocked_in_here"][0]
        self.assertEqual(ours[0], os.path.abspath(__file__))
        self.assertEqual(ours[3], "user")
        self.assertEqual([f[3] for f in training["frames"] if f[2] == "wait"][0], "lib")
        for frame in training["frames"]:
            self.assertEqual([type(v) for v in frame], [str, int, str, str])
        # No local variable, argument or source line anywhere in it.
        self.assertNotIn(SECRET, json.dumps(where))
        self.assertNotIn("release.wait()", json.dumps(where))
        # The calling thread (the sender, here) is left out; other threads give their innermost frame only.
        self.assertNotIn(threading.get_ident(), [t.get("id") for t in where["threads"]])
        for thread in where["threads"][1:]:
            self.assertFalse(thread["training"])
            self.assertLessEqual(len(thread["frames"]), 1)

    def test_deep_stacks_keep_the_innermost_and_outermost_frames(self):
        with BlockedThread(depth=200) as tid:
            where = _where.capture(tid)
        training = where["threads"][0]
        self.assertEqual(len(training["frames"]), _where.MAX_FRAMES)
        self.assertGreater(training["skipped"], 150)
        self.assertEqual(training["frames"][0][2], "wait")
        self.assertIn("blocked_in_here", [f[2] for f in training["frames"][:5]])
        self.assertEqual(training["frames"][-1][2], "_bootstrap")  # the thread's outermost frame
        self.assertLess(len(json.dumps(where)), 2 * _where.MAX_BYTES)

    def test_deep_captures_give_every_threads_stack(self):
        with BlockedThread() as tid, BlockedThread(depth=3):
            where = _where.capture(tid, deep=True)
        others = [t for t in where["threads"] if t["name"] == "trainer" and not t["training"]]
        self.assertEqual(len(others), 1)
        self.assertIn("deep", [f[2] for f in others[0]["frames"]])

    def test_a_thread_that_is_gone(self):
        where = _where.capture(123456789)
        self.assertFalse(where["training_found"])
        self.assertFalse(any(t["training"] for t in where["threads"]))

    def test_frame_kinds(self):
        self.assertEqual(_where.frame_kind(_where.__file__), "hook")
        self.assertEqual(_where.frame_kind(threading.__file__), "lib")
        self.assertEqual(_where.frame_kind("<frozen importlib._bootstrap>"), "lib")
        self.assertEqual(_where.frame_kind("/data/train.py"), "user")
        self.assertEqual(_where.frame_kind("/x/lib/python3.11/site-packages/torch/nn/modules/module.py"), "lib")


class StillnessTest(unittest.TestCase):
    def test_a_blocked_stack_is_still_from_the_last_step_and_a_moving_one_is_not(self):
        with BlockedThread() as tid:
            still = _where.Stillness(after_s=1.0, every_s=0.0)
            now = time.monotonic()
            still.sample(tid, now, 0.5)  # a step ended half a second ago: not looked at
            self.assertIsNone(still.still_ms(now))
            still.sample(tid, now, 3.0)
            still.sample(tid, now + 1.0, 4.0)
            self.assertEqual(still.still_ms(now + 1.0), 4000)  # unmoved since the step ended
        # A stack that moves (from one wait to another): its stillness starts over when it does.
        first, second, at_second, done = threading.Event(), threading.Event(), threading.Event(), threading.Event()

        def stage_two():
            at_second.set()
            done.wait()

        def stage_one():
            first.set()
            second.wait()
            stage_two()

        thread = threading.Thread(target=stage_one, daemon=True)
        thread.start()
        try:
            self.assertTrue(first.wait(5))
            time.sleep(0.05)
            still = _where.Stillness(after_s=1.0, every_s=0.0)
            t0 = time.monotonic()
            still.sample(thread.ident, t0, 5.0)
            still.sample(thread.ident, t0 + 1.0, 6.0)
            self.assertEqual(still.still_ms(t0 + 1.0), 6000)
            second.set()
            self.assertTrue(at_second.wait(5))
            time.sleep(0.05)
            still.sample(thread.ident, t0 + 2.0, 7.0)
            self.assertEqual(still.still_ms(t0 + 2.5), 500)  # moved at the last sample
        finally:
            second.set()
            done.set()
            thread.join(5)


def stuck_in_getitem():
    threading.Event().wait()


class WorkersTest(unittest.TestCase):
    @unittest.skipUnless(hasattr(os, "fork") and hasattr(os, "register_at_fork"), "needs fork")
    def test_a_forked_workers_own_stack_on_the_hooks_signal(self):
        """A child forked from this process (as a DataLoader worker is) gives its Python stack when
        asked; one that is not armed (spawned, not forked) is never signalled."""
        pid = os.fork()
        if pid == 0:
            try:
                stuck_in_getitem()
            finally:
                os._exit(0)
        spawned = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            self.assertTrue(wait_until(lambda: {pid, spawned.pid} <= {w["pid"] for w in _where.workers()}, 10))
            time.sleep(0.2)  # into the wait
            workers = [w for w in _where.workers() if w["pid"] in (pid, spawned.pid)]
            _where.worker_stacks(workers, wait_s=5.0)
            forked = [w for w in workers if w["pid"] == pid][0]
            self.assertIn("stuck_in_getitem", [f[2] for f in forked["frames"]], forked)
            self.assertEqual([f[3] for f in forked["frames"] if f[2] == "stuck_in_getitem"], ["user"])
            other = [w for w in workers if w["pid"] == spawned.pid][0]
            self.assertNotIn("frames", other)
            self.assertIsNone(spawned.poll())  # not killed by a signal it had no handler for
        finally:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            spawned.kill()
            spawned.wait()
        _where.forget_dead_children()
        self.assertNotIn(str(pid), os.listdir(_where.stacks_dir()) if os.path.isdir(_where.stacks_dir()) else [])

    def test_faulthandler_output_is_read_innermost_first(self):
        text = (
            'Thread 0x00007f0000000001 (most recent call first):\n  File "/x/threading.py", line 320 in wait\n\n'
            'Current thread 0x00007f0000000002 (most recent call first):\n  File "/job/data.py", line 31 in __getitem__\n'
            '  File "/x/site-packages/torch/utils/data/_utils/fetch.py", line 52 in fetch\n'
        )
        self.assertEqual(
            _where.parse_faulthandler(text),
            [["/job/data.py", 31, "__getitem__", "user"], ["/x/site-packages/torch/utils/data/_utils/fetch.py", 52, "fetch", "lib"]],
        )
        self.assertIsNone(_where.parse_faulthandler("nothing here"))

    def test_children_with_their_state(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            self.assertTrue(wait_until(lambda: any(w["pid"] == child.pid for w in _where.workers()), 10))
            worker = [w for w in _where.workers() if w["pid"] == child.pid][0]
            self.assertIn(worker["state"], ("S", "R"))
            self.assertGreaterEqual(worker["cpu_s"], 0)
        finally:
            child.kill()
            child.wait()


# _dump_fr_trace_json(True, True) of torch 2.15 on gloo, rank 0 of two, waiting in its 46th all-reduce
# (the one rank 1 never joined), as test/hang-e2e.test.ts's job gave it: the shape the hook reads.
GLOO_DUMP = json.dumps(
    {
        "comm_lib_version": "",
        "entries": [
            {"collective_seq_id": 46, "input_dtypes": ["Float"], "input_sizes": [[577]], "is_p2p": False, "op_id": 46, "output_dtypes": ["Float"], "output_sizes": [[577]], "p2p_seq_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "profiling_name": "gloo:all_reduce", "record_id": 45, "retired": False, "state": "scheduled", "thread_id": "1", "thread_name": "python", "time_created_ns": 1, "time_discovered_completed_ns": 0, "time_discovered_started_ns": 0, "timeout_ms": 1800000}
        ],
        "nccl_comm_state": {},
        "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_completed_collective": "45", "last_enqueued_collective": "46", "last_started_collective": "-1"}},
        "version": "2.10",
    }
).encode()
# _dump_nccl_trace_json(True, True) of the same torch without an NCCL process group: no group at all.
NCCL_EMPTY = b'{"comm_lib_version":"","nccl_comm_state":{},"pg_config":{},"pg_status":{},"version":"2.10"}'


class FlightRecorderTest(unittest.TestCase):
    def test_a_dump_is_reduced_to_each_groups_sequence_numbers_and_pending_collectives(self):
        summary = _where.summarize_flight_recorder(GLOO_DUMP, "gloo")
        self.assertEqual(summary["backend"], "gloo")
        self.assertEqual(
            summary["groups"],
            [{"id": "0", "name": "default_pg", "ranks": "[0, 1]", "enqueued": 46, "started": -1, "completed": 45, "pending": [{"seq": 46, "op": "gloo:all_reduce", "state": "scheduled"}]}],
        )

    def test_an_nccl_dump_without_groups_and_what_is_not_a_dump(self):
        self.assertEqual(_where.summarize_flight_recorder(NCCL_EMPTY, "nccl")["groups"], [])
        self.assertIsNone(_where.summarize_flight_recorder(b"not json", "nccl"))
        self.assertIsNone(_where.summarize_flight_recorder(b"[1, 2]", "nccl"))

    def test_nothing_without_torch_distributed(self):
        self.assertIsNone(_where.flight_recorder({}))

    @unittest.skipUnless(importlib.util.find_spec("torch") is not None, "needs torch")
    def test_the_real_recorder_of_a_gloo_group(self):
        """A gloo group of one, in this process (torch is imported here by the other torch tests anyway):
        torch 2.x's recorder gives what the hook reads; 1.13 has none, and says so."""
        import torch
        import torch.distributed as dist

        with tempfile.TemporaryDirectory() as folder:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(folder, "store"), rank=0, world_size=1)
            try:
                for _ in range(3):
                    dist.all_reduce(torch.ones(4))
                fr = _where.flight_recorder()
            finally:
                dist.destroy_process_group()
        if not hasattr(sys.modules["torch._C._distributed_c10d"], "_dump_fr_trace_json"):
            self.assertEqual(fr, {"backend": "gloo", "error": "this torch has no Flight Recorder"})
            return
        group = fr["groups"][0]
        self.assertEqual((fr["backend"], group["id"], group["name"], group["enqueued"]), ("gloo", "0", "default_pg", 3))
        self.assertGreaterEqual(group["completed"], 2)


class SenderTest(unittest.TestCase):
    def test_heartbeats_only_where_the_sidecar_asks_for_them(self):
        for welcome, wanted in (({"heartbeat_ms": 200}, True), ({}, False)):
            with FakeSidecar(welcome=welcome) as fake:
                scope = stepscope.init(url=fake.url, job="beat", rank=0, world_size=1)
                try:
                    self.assertTrue(wait_until(lambda: fake.of_type("hello"), 5))
                    hello = fake.of_type("hello")[0]
                    self.assertEqual((hello["heartbeat_ms"], hello["capture"]), (_protocol.HEARTBEAT_MS, True))
                    self.assertIsInstance(hello.get("proc_start"), int)
                    beats = wait_until(lambda: len(fake.of_type("heartbeat")) >= 3, 2.0)
                    self.assertEqual(beats, wanted)
                finally:
                    scope.close(timeout=2)

    def test_a_capture_request_is_answered_with_the_training_threads_stack(self):
        with FakeSidecar(welcome={"heartbeat_ms": 1000, "capture": {"deep": False}}) as fake:
            made = threading.Event()
            release = threading.Event()
            scopes = []

            def training():
                scopes.append(stepscope.init(url=fake.url, job="stack", rank=0, world_size=1))
                for _ in range(3):
                    scopes[0].step()
                made.set()
                blocked_in_here(threading.Event(), release)

            thread = threading.Thread(target=training, name="MainTraining", daemon=True)
            thread.start()
            try:
                self.assertTrue(made.wait(5))
                self.assertTrue(wait_until(lambda: fake.of_type("welcome") or fake.of_type("hello"), 5))
                time.sleep(1.2)  # long enough for the stack's stillness to be sampled
                fake.send_all({"v": 1, "type": "capture", "id": 7})
                self.assertTrue(wait_until(lambda: fake.of_type("stack"), 5))
                stack = fake.of_type("stack")[0]
                self.assertEqual((stack["id"], stack["last_seq"]), (7, 3))
                training_thread = stack["threads"][0]
                self.assertEqual((training_thread["name"], training_thread["training"]), ("MainTraining", True))
                self.assertIn("blocked_in_here", [f[2] for f in training_thread["frames"]])
                self.assertNotIn("stepscope-sender", [t["name"] for t in stack["threads"]])
                self.assertGreaterEqual(stack["still_ms"], 1000)
                self.assertIsNone(stack["comm"])  # no process group: nothing tracked
                self.assertIsNone(stack["flight"])
                self.assertIsInstance(stack["workers"], list)
            finally:
                release.set()
                thread.join(5)
                scopes[0].close(timeout=2)


if __name__ == "__main__":
    unittest.main()
