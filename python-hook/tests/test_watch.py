"""The batch interval follows whether the sidecar says a viewer watches (issue 24, target 5): 0.5 s
while no one does, the configured one while someone does or where the sidecar never says, on the
beats of the monotonic clock (target 6); and nothing is lost across the changes."""

import collections
import random
import time
import unittest

import stepscope
from stepscope import _counters, _scope, _sender
from .fake_sidecar import FakeSidecar, wait_until

_SHORT = 0.05


class WatchTest(unittest.TestCase):
    def start(self, fake):
        scope = stepscope.init(url=fake.url, job="watch", rank=0, world_size=1, cuda=False, batch_interval=_SHORT)
        sender = scope._sender
        self.assertTrue(wait_until(lambda: sender.connected, 5))
        return scope, sender

    def test_the_interval_lengthens_while_no_one_watches_and_nothing_is_lost(self):
        with FakeSidecar(welcome={"watched": False}) as fake:
            scope, sender = self.start(fake)
            self.addCleanup(scope.close, timeout=2)
            self.assertEqual(sender._interval(), _sender.UNWATCHED_INTERVAL_S)
            for _ in range(50):
                scope.step()
            fake.send_all({"v": 1, "type": "watch", "watched": True})
            self.assertTrue(wait_until(lambda: sender._interval() <= _SHORT * 1.25, 5))
            for _ in range(50):
                scope.step()
            fake.send_all({"v": 1, "type": "watch", "watched": False})
            self.assertTrue(wait_until(lambda: sender._interval() == _sender.UNWATCHED_INTERVAL_S, 5))
            for _ in range(50):
                scope.step()
            self.assertTrue(scope.close(timeout=5))
            self.assertEqual(fake.store.seqs(), list(range(1, 151)))

    def test_while_watched_a_connected_sender_waits_for_the_next_beat_of_the_clock(self):
        with FakeSidecar() as fake:
            scope, sender = self.start(fake)
            try:
                clock = _sender.time.monotonic
                _sender.time.monotonic = lambda: 10.03
                try:
                    waits = sender._interval()
                finally:
                    _sender.time.monotonic = clock
                # 10.03 s: the next beat of 0.05 s at least a quarter period on is 10.05 s.
                self.assertAlmostEqual(waits, 0.02, places=9)
            finally:
                scope.close(timeout=2)

    def test_the_default_interval_lets_a_step_reach_a_viewer_within_100_ms(self):
        # 80 ms of batching leaves the sidecar 20 ms (its tick as the frames come) under the 100 ms of target 6.
        self.assertEqual(stepscope.init.__kwdefaults__["batch_interval"], 0.08)

    def test_a_sidecar_that_never_says_keeps_the_configured_interval(self):
        with FakeSidecar() as fake:
            scope, sender = self.start(fake)
            try:
                self.assertLessEqual(sender._interval(), _SHORT * 1.25)
            finally:
                scope.close(timeout=2)

    def test_a_heartbeat_falling_due_shortens_the_wait(self):
        with FakeSidecar(welcome={"watched": False, "heartbeat_ms": 200}) as fake:
            scope, sender = self.start(fake)
            try:
                self.assertLessEqual(sender._interval(), 0.2)
                # Each wait ends by the time the next beat is due: beats keep coming while nothing else goes out.
                self.assertTrue(wait_until(lambda: len(fake.of_type("heartbeat")) >= 3, 10))
            finally:
                scope.close(timeout=2)


class _StubWs:
    """A connected socket that reads nothing and sends anywhere."""

    def poll(self):
        return []

    def send_binary(self, data):
        pass

    def close(self, *args):
        pass


class _RecordingEvent:
    """The wake, noting each wait's timeout instead of waiting."""

    def __init__(self):
        self.waits = []

    def wait(self, timeout):
        self.waits.append(timeout)
        return False

    def clear(self):
        pass

    def set(self):
        pass


def _bare_sender(queue, wake, on_first):
    return _sender.Sender(queue, wake, url="ws://127.0.0.1:1/", identity={}, env={}, batch_interval=0.08, wake_on_first=on_first)


class FirstStepTest(unittest.TestCase):
    """A slow job's steps go out as they end (see _sender.Pace); a fast job's on the beats."""

    def test_a_beat_without_steps_waits_for_the_first_step_and_closer_steps_go_back_to_the_beats(self):
        pace = _sender.Pace(0.08)
        self.assertFalse(pace.woke(True, 10.00))  # steps at the beat: the next beat
        self.assertTrue(pace.woke(False, 10.08))  # none at this one: wait for the first
        self.assertTrue(pace.woke(True, 10.30))  # it came: sent now, and the next one waited for
        self.assertTrue(pace.woke(False, 10.80))  # an idle wake (counters, heartbeats) changes nothing
        self.assertTrue(pace.woke(True, 10.95))
        self.assertFalse(pace.woke(True, 10.99))  # the next came 40 ms on: the job is faster than the beats
        self.assertFalse(pace.woke(True, 11.04))

    def test_step_wakes_the_sender_at_the_first_record_only_while_it_waits_for_one(self):
        scope = stepscope.Scope(None)
        scope.step()
        self.assertFalse(scope._wake.is_set())
        scope._queue.clear()
        scope._wake_on_first(True)
        scope.step()
        self.assertTrue(scope._wake.is_set())
        scope._wake.clear()
        scope.step()  # the second record: the sender is awake already
        self.assertFalse(scope._wake.is_set())
        scope._wake_on_first(False)
        scope._queue.clear()
        scope.step()
        self.assertFalse(scope._wake.is_set())

    def test_a_step_queued_before_the_wake_was_asked_for_is_not_waited_on(self):
        queue, wake, asked = collections.deque(), _RecordingEvent(), []

        def on_first(on):
            asked.append(on)
            if on:
                queue.append(None)  # step() ran between _collect and the lower threshold: it compared with 1,024

        sender = _bare_sender(queue, wake, on_first)
        sender._ws = _StubWs()
        sender._cycle()  # nothing came: wait for the first step
        self.assertEqual(wake.waits, [0.0])
        self.assertEqual(asked, [True, False])  # and the threshold back after the wait

    def test_a_step_waiting_for_its_gpu_times_is_looked_at_on_the_beats(self):
        queue, wake, asked = collections.deque(), _RecordingEvent(), []
        sender = _bare_sender(queue, wake, asked.append)
        sender._ws = _StubWs()
        unfinished = type("GpuStep", (), {"done": False})()  # its CUDA events not yet completed
        sender._pending.append((1, 10_000_000, 1_000_000, 0, 0, 0, None, unfinished, None))
        sender._cycle()
        self.assertEqual(asked, [])
        self.assertLessEqual(wake.waits[0], 0.08 * 1.25)

    def test_nvml_asked_for_more_often_than_the_batches_is_sampled_when_due(self):
        # --gpu-interval 100 asks each hook for NVML every 100 ms: neither the unwatched batches (0.5 s)
        # nor the wait for a slow job's next step may space the samples wider.
        def sender_sampling_every(interval_ms):
            wake = _RecordingEvent()
            nvml = type("Nvml", (), {"sample": lambda self, at_ns: {"at_ns": at_ns}})()
            schedule = _counters.CounterSchedule(nvml_sampler=nvml)
            sender = _sender.Sender(collections.deque(), wake, url="ws://127.0.0.1:1/", identity={}, env={}, batch_interval=0.08, wake_on_first=lambda on: None, counters=schedule)
            sender._ws = _StubWs()
            schedule.configure({"nvml": True, "interval_ms": interval_ms}, time.monotonic())
            return sender, wake

        sender, wake = sender_sampling_every(100)
        for watched in (False, True):
            sender._watched = watched
            for _ in range(3):
                wake.waits.clear()
                sender._cycle()  # watched: no step came, so it waits for the first
                self.assertLessEqual(wake.waits[0], 0.1 + 1e-3)
        # The default (500 ms) and slower: sampled at the batches, as before, with no wake of their own.
        for interval_ms in (500, 2000):
            sender, wake = sender_sampling_every(interval_ms)
            sender._watched = False
            sender._cycle()
            sender._cycle()
            self.assertEqual(wake.waits, [_sender.UNWATCHED_INTERVAL_S] * 2)

    def test_a_step_wakes_a_sender_waiting_for_it_long_before_its_timer(self):
        for name in ("UNWATCHED_INTERVAL_S", "READ_EVERY_S"):
            self.addCleanup(setattr, _sender, name, getattr(_sender, name))
            setattr(_sender, name, 60.0)  # a sender the step does not wake would wait a minute
        with FakeSidecar() as fake:
            scope = stepscope.init(url=fake.url, job="slow", rank=0, world_size=1, cuda=False, batch_interval=0.02)
            try:
                self.assertTrue(wait_until(lambda: scope._wake_at == 1, 10))
                scope.step()
                self.assertTrue(wait_until(lambda: fake.store.seqs() == [1], 20))
                self.assertTrue(scope.close(timeout=5))
                self.assertEqual(scope._wake_at, _scope._WAKE_AT)  # not left at 1
            finally:
                scope.close(timeout=2)

    def test_a_watched_slow_job_then_a_fast_one_loses_nothing(self):
        with FakeSidecar() as fake:
            scope = stepscope.init(url=fake.url, job="slow", rank=0, world_size=1, cuda=False, batch_interval=0.02)
            sender = scope._sender
            try:
                self.assertTrue(wait_until(lambda: sender.connected, 5))
                # Beats find nothing: the sender waits for the first step, which step() will wake it for.
                self.assertTrue(wait_until(lambda: scope._wake_at == 1, 5))
                for _ in range(5):
                    scope.step()
                    time.sleep(0.05)
                for _ in range(300):
                    scope.step()
                self.assertTrue(scope.close(timeout=5))
                self.assertEqual(fake.store.seqs(), list(range(1, 306)))
            finally:
                scope.close(timeout=2)


class BeatTest(unittest.TestCase):
    def test_waits_for_the_next_beat_of_the_clock_at_least_a_quarter_period_on(self):
        draw = random.Random(7).uniform
        for period in (0.08, 0.05, 0.1):
            for _ in range(2000):
                now = draw(0, 1e6)
                wait = _sender.until_beat(now, period)
                self.assertGreater(wait, period / 4 - 1e-9)
                self.assertLessEqual(wait, period * 1.25 + 1e-9)
                beats = (now + wait) / period
                self.assertAlmostEqual(beats, round(beats), delta=1e-6)

    def test_two_processes_at_different_moments_wake_on_the_same_beat(self):
        # Where two senders' waits start differs; where they end does not.
        self.assertAlmostEqual(10.0 + _sender.until_beat(10.0, 0.08), 10.08, places=9)
        self.assertAlmostEqual(10.03 + _sender.until_beat(10.03, 0.08), 10.08, places=9)
        # A wake a hair before its beat waits for the one after, not a few microseconds.
        self.assertAlmostEqual(10.0799 + _sender.until_beat(10.0799, 0.08), 10.16, places=9)

    def test_no_interval_is_no_wait(self):
        self.assertEqual(_sender.until_beat(10.0, 0.0), 0.0)
        self.assertEqual(_sender.until_beat(10.0, -1.0), 0.0)


if __name__ == "__main__":
    unittest.main()
