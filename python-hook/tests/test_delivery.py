"""End to end: stepscope.init() against a fake sidecar (acks, reconnects, resends, end)."""

import os
import socket
import time
import unittest
from unittest import mock

import stepscope
from stepscope import _protocol

from .fake_sidecar import FakeSidecar, Store, wait_until
from .quiet import Quiet


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def url_for(port):
    return "ws://127.0.0.1:%d/v1/ingest" % port


def run_steps(scope, n, samples=8):
    for _ in scope.loader(range(n)):
        with scope.phase("h2d"):
            pass
        with scope.phase("compute"):
            pass
        scope.step(samples=samples)


class DeliveryCase(Quiet):

    def init(self, **kwargs):
        scope = stepscope.init(**kwargs)
        self.addCleanup(scope.close, 0.2)
        return scope

    def server(self, **kwargs):
        server = FakeSidecar(**kwargs)
        self.addCleanup(server.stop)
        return server


class BasicDeliveryTest(DeliveryCase):
    def test_steps_are_delivered_in_order_and_close_is_acknowledged(self):
        server = self.server()
        scope = self.init(url=server.url, job="job-1", rank=1, world_size=2)
        run_steps(scope, 50)
        self.assertTrue(scope.close(timeout=5.0))
        self.assertEqual(server.store.seqs(), list(range(1, 51)))
        rows = server.rows()
        self.assertEqual([r["seq"] for r in rows], list(range(1, 51)))
        self.assertEqual([r["step"] for r in rows], list(range(50)))
        for row in rows:
            self.assertGreater(row["dur_ns"], 0)
            self.assertLessEqual(row["data_ns"] + row["h2d_ns"] + row["compute_ns"], row["dur_ns"])
            self.assertEqual(row["samples"], 8)
            self.assertIsNone(row["gpu_idle_ns"])
        self.assertEqual([m["reason"] for m in server.of_type("end")], ["close"])
        self.assertTrue(all(m["dropped"] == 0 for m in server.of_type("steps")))
        stats = scope.stats()
        self.assertEqual((stats["sent"], stats["acked"], stats["dropped"], stats["resent"]), (50, 50, 0, 0))
        self.assertEqual(stats["records"], 50)
        self.assertTrue(stats["closed"])
        self.assertEqual(self.warnings(), [])

    def test_close_result_counts_what_was_delivered(self):
        server = self.server()
        scope = self.init(url=server.url)
        run_steps(scope, 20)
        self.assertIsNone(scope.close_result)
        self.assertIs(scope.close(timeout=5.0), True)  # a plain bool, as before
        result = scope.close_result
        self.assertIsInstance(result, stepscope.CloseResult)
        self.assertTrue(result)
        self.assertEqual(result, True)
        self.assertEqual(
            result.as_dict(),
            dict(records=20, delivered=20, dropped=0, undelivered=0, end_acked=True, reason=None),
        )
        self.assertIs(scope.close(timeout=5.0), True)  # later calls return the first result
        self.assertIs(scope.close_result, result)
        self.assertEqual(self.warnings(), [])

    def test_hello_carries_identity_clock_and_env(self):
        server = self.server()
        environ = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "STEPSCOPE_JOB": "nightly", "CUDA_VISIBLE_DEVICES": "1"}
        with mock.patch.dict(os.environ, environ):
            before_wall, before_mono = time.time_ns(), time.perf_counter_ns()
            scope = self.init(url=server.url)
            self.assertTrue(wait_until(lambda: server.of_type("hello")))
        hello = server.of_type("hello")[0]
        self.assertEqual((hello["v"], hello["rank"], hello["world_size"], hello["local_rank"]), (1, 3, 8, 1))
        self.assertEqual(hello["job"], "nightly")
        self.assertEqual(hello["pid"], os.getpid())
        self.assertEqual(hello["host"], socket.gethostname())
        self.assertRegex(hello["session"], r"^[0-9a-f]{32}$")
        clock = hello["clock"]
        self.assertGreaterEqual(clock["wall_ns"], before_wall)
        self.assertLess(clock["wall_ns"] - before_wall, 5 * 10**9)
        self.assertGreaterEqual(clock["mono_ns"], before_mono - _protocol.monotonic_origin(before_mono))
        env = hello["env"]
        self.assertEqual(env["hook"], stepscope.__version__)
        self.assertEqual(env["cuda_visible_devices"], "1")
        self.assertIn("python", env)
        self.assertIn("platform", env)
        scope.close(1.0)

    def test_loader_env_goes_in_an_env_message_after_hello(self):
        server = self.server()
        scope = self.init(url=server.url)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        scope.loader(FakeDataLoader())
        self.assertTrue(wait_until(lambda: server.of_type("env")))
        self.assertEqual(server.of_type("env")[0]["env"], {"loader": FakeDataLoader.EXPECTED})
        scope.loader(FakeDataLoader())  # only the first loader is reported
        self.assertTrue(scope.close(2.0))
        self.assertEqual(len(server.of_type("env")), 1)

    def test_loader_env_goes_in_hello_when_not_connected_yet(self):
        port = free_port()
        scope = self.init(url=url_for(port))
        self.assertTrue(wait_until(lambda: scope._sender._failures >= 1))
        scope.loader(FakeDataLoader())
        server = self.server(port=port)
        self.assertTrue(wait_until(lambda: server.of_type("hello")))
        self.assertEqual(server.of_type("hello")[0]["env"]["loader"], FakeDataLoader.EXPECTED)
        self.assertEqual(server.of_type("env"), [])

    def test_counters_are_forwarded_when_the_sidecar_asks(self):
        server = self.server(counters={"nvml": False, "interval_ms": 500, "process": True})
        scope = self.init(url=server.url)
        run_steps(scope, 3)
        self.assertTrue(wait_until(lambda: server.of_type("counters")))
        frame = server.of_type("counters")[0]
        self.assertEqual(frame["source"], "process")
        sample = frame["samples"][0]
        hello = server.of_type("hello")[0]
        self.assertGreaterEqual(sample["at_ns"], hello["clock"]["mono_ns"])
        self.assertTrue(all(value is None or value >= 0 for value in sample.values()))
        self.assertTrue(scope.close(2.0))

    def test_no_counters_unless_asked(self):
        server = self.server()
        scope = self.init(url=server.url)
        run_steps(scope, 3)
        self.assertTrue(scope.close(2.0))
        self.assertEqual(server.of_type("counters"), [])

    def test_fragmented_acks_and_pings(self):
        server = self.server(fragment_acks=True)
        scope = self.init(url=server.url)
        run_steps(scope, 10)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 10))
        server.ping_all(b"are-you-there")
        self.assertTrue(wait_until(lambda: b"are-you-there" in server.pongs))
        self.assertTrue(scope.close(2.0))

    def test_token(self):
        server = self.server(token="s3cret")
        scope = self.init(url=server.url, token="s3cret")
        run_steps(scope, 5)
        self.assertTrue(scope.close(2.0))
        self.assertEqual(server.request_headers[0]["authorization"], "Bearer s3cret")

    def test_token_and_url_from_environment(self):
        server = self.server(token="from-env")
        with mock.patch.dict(os.environ, {"STEPSCOPE_TOKEN": "from-env", "STEPSCOPE_URL": server.url}):
            scope = self.init()
        run_steps(scope, 5)
        self.assertTrue(scope.close(2.0))
        self.assertEqual(server.store.seqs(), [1, 2, 3, 4, 5])

    def test_wrong_token_is_one_warning_and_close_returns_false(self):
        server = self.server(token="right")
        scope = self.init(url=server.url, token="wrong")
        run_steps(scope, 5)
        self.assertTrue(wait_until(lambda: self.warnings()))
        self.assertFalse(scope.close(1.0))
        self.assertEqual(len(self.warnings()), 2)  # the refusal, then close's account of what was lost
        self.assertIn("token refused: check STEPSCOPE_TOKEN", self.warnings()[0])
        self.assertIn("401", self.warnings()[0])
        self.assertIn("close: 0 of 5 step records delivered", self.warnings()[1])


class ResilienceTest(DeliveryCase):
    def test_resends_what_the_restarted_sidecar_lacks(self):
        server = self.server(ack="none")
        scope = self.init(url=server.url)
        run_steps(scope, 20)
        self.assertTrue(wait_until(lambda: len(server.rows()) == 20))
        session = server.of_type("hello")[0]["session"]
        # The sidecar dies having made only the first 10 rows durable, and never acked.
        store = Store()
        store.add(session, _protocol.FIELDS, [[r[f] for f in _protocol.FIELDS] for r in server.rows()[:10]])
        server.stop()
        restarted = self.server(port=server.port, store=store)
        self.assertTrue(wait_until(lambda: store.seqs(session) == list(range(1, 21))))
        self.assertEqual([r["seq"] for r in restarted.rows()], list(range(11, 21)))
        self.assertEqual(restarted.of_type("hello")[0]["session"], session)
        run_steps(scope, 5)
        self.assertTrue(scope.close(3.0))
        self.assertEqual(store.seqs(session), list(range(1, 26)))
        self.assertEqual(store.duplicates, 0)
        stats = scope.stats()
        self.assertEqual(stats["resent"], 10)
        self.assertEqual(stats["reconnects"], 1)
        self.assertEqual(stats["acked"], 25)

    def test_hello_carries_acked_and_the_resume_secret_of_the_session(self):
        server = self.server()
        scope = self.init(url=server.url)
        run_steps(scope, 10)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 10))
        first = server.of_type("hello")[0]
        self.assertEqual(first["acked"], 0)
        self.assertNotIn("resume", first)  # a session's first hello has no secret yet
        secret = server.store.owners[first["session"]][2]
        self.assertRegex(secret, r"^[0-9a-f]{32}$")
        server.close_all()  # the connection drops; the hook comes back to the same sidecar
        self.assertTrue(wait_until(lambda: len(server.of_type("hello")) == 2))
        second = server.of_type("hello")[1]
        self.assertEqual((second["session"], second["resume"], second["acked"]), (first["session"], secret, 10))
        run_steps(scope, 5)
        self.assertTrue(scope.close(3.0))
        self.assertEqual(server.store.seqs(), list(range(1, 16)))
        self.assertEqual(self.warnings(), [])

    def test_a_sidecar_restarted_without_its_journal_hands_out_a_new_secret(self):
        server = self.server()
        scope = self.init(url=server.url)
        run_steps(scope, 5)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 5))
        session = server.of_type("hello")[0]["session"]
        old_secret = server.store.owners[session][2]
        server.stop()
        blank = self.server(port=server.port)  # knows nothing of the session: takes it, with a new secret
        self.assertTrue(wait_until(lambda: blank.of_type("hello")))
        hello = blank.of_type("hello")[0]
        self.assertEqual((hello["resume"], hello["acked"]), (old_secret, 5))
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        new_secret = blank.store.owners[session][2]
        self.assertNotEqual(new_secret, old_secret)
        blank.stop()
        # Restarted again, on its journal this time: only the new secret resumes the session.
        again = self.server(port=server.port, store=blank.store)
        run_steps(scope, 5)
        self.assertTrue(wait_until(lambda: again.store.seqs(session) == list(range(6, 11))))
        self.assertEqual(again.of_type("hello")[0]["resume"], new_secret)
        self.assertEqual(again.refusals, [])
        self.assertTrue(scope.close(3.0))

    def test_a_refused_resume_is_said_once_and_not_retried(self):
        server = self.server()
        scope = self.init(url=server.url)
        run_steps(scope, 3)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 3))
        session = server.of_type("hello")[0]["session"]
        job, rank, _ = server.store.owners[session]
        server.store.owners[session] = (job, rank, "f" * 32)  # the sidecar holds another secret for it
        server.close_all()
        self.assertTrue(wait_until(lambda: server.refusals))
        self.assertTrue(wait_until(lambda: not scope._sender._thread.is_alive()))  # so no retry will come
        self.assertEqual(server.connections, 2)
        self.assertEqual(server.refusals, [(1008, "hello: session %s is already held: resuming it needs its secret" % session)])
        self.assertEqual(len(self.warnings()), 1)
        self.assertIn("refused this process (close code 1008: hello: session %s is already held" % session, self.warnings()[0])
        self.assertIs(scope.close(1.0), False)
        result = scope.close_result
        self.assertEqual((bool(result), result.delivered, result.undelivered), (False, 3, 0))

    def test_a_sidecar_without_secrets_gets_hellos_without_one(self):
        server = self.server(resume=False)
        scope = self.init(url=server.url)
        run_steps(scope, 3)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 3))
        server.close_all()
        self.assertTrue(wait_until(lambda: len(server.of_type("hello")) == 2))
        self.assertEqual([("resume" in h, h["acked"]) for h in server.of_type("hello")], [(False, 0), (False, 3)])
        self.assertTrue(scope.close(2.0))

    def test_restart_after_acks_loses_nothing_and_resends_nothing(self):
        server = self.server()
        scope = self.init(url=server.url)
        run_steps(scope, 30)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 30))
        server.stop()
        restarted = self.server(port=server.port, store=server.store)
        run_steps(scope, 30)
        self.assertTrue(scope.close(3.0))
        self.assertEqual(restarted.store.seqs(), list(range(1, 61)))
        self.assertEqual(scope.stats()["resent"], 0)

    def test_connection_dropped_mid_stream(self):
        server = self.server(close_after_rows=15)
        scope = self.init(url=server.url)
        run_steps(scope, 10)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 10))
        run_steps(scope, 10)  # the frame that crosses 15 rows kills the connection, unstored
        self.assertTrue(wait_until(lambda: server.connections >= 2))
        server.close_after_rows = None
        self.assertTrue(scope.close(3.0))
        self.assertEqual(server.store.seqs(), list(range(1, 21)))

    def test_sidecar_absent_then_started(self):
        port = free_port()
        scope = self.init(url=url_for(port))
        run_steps(scope, 30)
        self.assertTrue(wait_until(lambda: self.warnings()))
        server = self.server(port=port)
        self.assertTrue(wait_until(lambda: server.store.seqs() == list(range(1, 31))))
        self.assertTrue(scope.close(2.0))
        self.assertEqual(len(self.warnings()), 1)
        self.assertRegex(
            self.warnings()[0],
            r"^stepscope: sidecar at ws://127\.0\.0\.1:\d+/v1/ingest unreachable \(ConnectionRefusedError\); "
            r"buffering and retrying$",
        )

    def test_full_buffers_drop_the_oldest_and_count_them(self):
        port = free_port()
        scope = self.init(url=url_for(port), buffer_size=8, max_unacked=16)
        for _ in range(200):
            scope.step()
        self.assertTrue(wait_until(lambda: scope.stats()["dropped"] + scope.stats()["pending"] == 200))
        stats = scope.stats()
        self.assertGreaterEqual(stats["dropped"], 200 - 16)
        server = self.server(port=port)
        # Everything kept was delivered, but records were dropped: close says so (it used to say True).
        self.assertIs(scope.close(3.0), False)
        result = scope.close_result
        self.assertFalse(result)
        self.assertTrue(result.end_acked)
        self.assertEqual((result.records, result.dropped, result.undelivered), (200, stats["dropped"], 0))
        self.assertEqual(result.delivered, 200 - stats["dropped"])
        self.assertIn("buffers were full", result.reason)
        self.assertEqual(
            self.warnings()[-1],
            "stepscope: close: %d of 200 step records delivered to the sidecar; %d dropped (buffers full): %s"
            % (result.delivered, result.dropped, result.reason),
        )
        seqs = server.store.seqs()
        self.assertEqual(len(seqs), 200 - stats["dropped"])
        self.assertEqual(seqs[-1], 200)
        self.assertEqual(seqs, sorted(seqs))
        self.assertTrue(all(m["dropped"] == stats["dropped"] for m in server.of_type("steps")))

    def unacknowledged(self, batches):
        """A sidecar that falls behind: it keeps each frame but acknowledges none, so the hook's window
        (16 rows) lets go of rows it has sent. `batches` of 10 steps, each kept before the next."""
        server = self.server(ack="none")
        scope = self.init(url=server.url, max_unacked=16)
        for batch in range(1, batches + 1):
            run_steps(scope, 10)
            self.assertTrue(wait_until(lambda: server.store.seqs()[-1:] == [10 * batch]))
        return server, scope

    def test_rows_let_go_of_after_they_were_sent_count_as_delivered_once_acknowledged(self):
        # Those the sidecar then acknowledges were delivered, not dropped (they had been counted as dropped).
        server, scope = self.unacknowledged(5)
        self.assertEqual(scope.stats()["dropped"], 0)
        server.ack = "auto"
        self.assertTrue(scope.close(timeout=5.0))
        self.assertEqual(server.store.seqs(), list(range(1, 51)))
        stats = scope.stats()
        self.assertEqual((stats["acked"], stats["dropped"]), (50, 0))
        result = scope.close_result
        self.assertEqual((result.records, result.delivered, result.dropped, result.undelivered), (50, 50, 0, 0))

    def test_rows_in_doubt_that_the_next_sidecar_does_not_hold_count_as_dropped(self):
        # Sent and let go of, never acknowledged; the sidecar then restarts without its journal, so
        # its welcome says it holds none of them: lost with the connection, and counted so.
        server, scope = self.unacknowledged(3)
        self.assertEqual(scope.stats()["pending"], 30)  # 16 held, 14 in doubt
        server.stop()
        blank = self.server(port=server.port)
        self.assertTrue(scope.close(timeout=5.0) is False)
        self.assertEqual(blank.store.seqs(), list(range(15, 31)))
        result = scope.close_result
        self.assertEqual((result.records, result.delivered, result.dropped, result.undelivered), (30, 16, 14, 0))
        self.assertTrue(all(m["dropped"] == 14 for m in blank.of_type("steps")))

    def test_frame_too_big_halves_the_frame(self):
        port = free_port()
        scope = self.init(url=url_for(port))
        for _ in range(600):
            scope.step()
        self.assertTrue(wait_until(lambda: scope.stats()["pending"] == 600))
        server = self.server(port=port, max_rows_per_frame=200)
        self.assertTrue(wait_until(lambda: server.store.seqs() == list(range(1, 601)), timeout=10))
        sizes = [len(m["rows"]) for m in server.of_type("steps")]
        self.assertEqual([n for n in sizes if n > 200], [600, 300])
        self.assertEqual(sum(n for n in sizes if n <= 200), 600)
        self.assertTrue(scope.close(2.0))


class NoSidecarTest(DeliveryCase):
    def test_one_warning_and_a_quick_false_close(self):
        scope = self.init(url=url_for(free_port()))
        run_steps(scope, 100)
        self.assertTrue(wait_until(lambda: scope._sender._failures >= 3))
        self.assertEqual(len(self.warnings()), 1, self.warnings())
        other = self.init(url=url_for(free_port()))  # closes `scope`; a second scope adds no warning
        run_steps(other, 5)
        self.assertTrue(wait_until(lambda: other._sender._failures >= 2))
        self.assertEqual(len(self.warnings()), 2, self.warnings())  # + one line at scope's close: what was lost
        self.assertRegex(
            self.warnings()[1],
            r"^stepscope: close: 0 of 100 step records delivered to the sidecar; 100 not delivered: "
            r"sidecar at ws://127\.0\.0\.1:\d+/v1/ingest: ConnectionRefusedError$",
        )
        self.assertIs(scope.close(timeout=5.0), False)
        result = scope.close_result
        self.assertEqual((result.records, result.delivered, result.dropped, result.undelivered), (100, 0, 0, 100))
        started = time.monotonic()
        self.assertFalse(other.close(timeout=5.0))
        self.assertLess(time.monotonic() - started, 2.5)
        self.assertEqual(len(self.warnings()), 3, self.warnings())
        self.assertIn("close: 0 of 5 step records delivered", self.warnings()[2])
        stats = scope.stats()
        self.assertEqual((stats["connects"], stats["acked"], stats["records"]), (0, 0, 100))

    def test_close_never_raises(self):
        for url in ("http://127.0.0.1:1/", "ws://", "ws://no-such-host.invalid:1/x", url_for(free_port())):
            with self.subTest(url=url):
                scope = self.init(url=url, exit_timeout=0.1)
                run_steps(scope, 3)
                self.assertFalse(scope.close(timeout=0.3))
                self.assertFalse(scope.close(timeout=0.3))
                self.assertFalse(scope.close(timeout=-1))

    def test_init_never_raises(self):
        scope = self.init(url=url_for(free_port()), buffer_size="not a number")
        run_steps(scope, 3)
        self.assertEqual(scope.stats()["records"], 3)
        self.assertIs(scope.close(0.1), False)
        result = scope.close_result
        self.assertEqual((result.records, result.undelivered), (3, 3))
        self.assertEqual(len(self.warnings()), 2)
        self.assertIn("could not start", self.warnings()[0])
        self.assertIn("close: 0 of 3 step records delivered", self.warnings()[1])

    def test_stats_keys(self):
        scope = self.init(url=url_for(free_port()))
        expected = {"records", "sent", "acked", "ack_seq", "dropped", "resent", "pending", "connected", "connects",
                    "reconnects", "warnings", "errors", "bg_cpu_s", "closed", "gpu", "disabled"}
        self.assertEqual(set(scope.stats()), expected)

    def test_close_with_the_sidecar_gone_waits_at_most_timeout(self):
        server = self.server(ack="none")
        scope = self.init(url=server.url)
        run_steps(scope, 5)
        self.assertTrue(wait_until(lambda: len(server.rows()) == 5))
        server.stop()
        started = time.monotonic()
        self.assertFalse(scope.close(timeout=0.5))
        self.assertLess(time.monotonic() - started, 1.5)

    def test_init_twice_closes_the_previous_scope(self):
        server = self.server()
        first = self.init(url=server.url)
        run_steps(first, 3)
        second = self.init(url=server.url)
        self.assertTrue(first.stats()["closed"])
        self.assertFalse(second.stats()["closed"])
        run_steps(second, 2)
        self.assertTrue(second.close(2.0))
        sessions = {m["session"] for m in server.of_type("hello")}
        self.assertEqual(len(sessions), 2)
        self.assertEqual(len(server.store.seqs()), 5)


class FakeDataLoader:
    EXPECTED = {"batch_size": 32, "num_workers": 4, "pin_memory": True, "prefetch_factor": 2, "persistent_workers": False}

    def __init__(self):
        self.dataset = list(range(64))
        self.batch_size = 32
        self.num_workers = 4
        self.pin_memory = True
        self.prefetch_factor = 2
        self.persistent_workers = False

    def __iter__(self):
        return iter([self.dataset[:32], self.dataset[32:]])


if __name__ == "__main__":
    unittest.main()
