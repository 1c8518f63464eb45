"""The batch interval follows whether the sidecar says a viewer watches (issue 24, target 5): 0.5 s
while no one does, the configured one while someone does or where the sidecar never says; and
nothing is lost across the changes."""

import unittest

import stepscope
from stepscope import _sender
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
            self.assertTrue(wait_until(lambda: sender._interval() == _SHORT, 5))
            for _ in range(50):
                scope.step()
            fake.send_all({"v": 1, "type": "watch", "watched": False})
            self.assertTrue(wait_until(lambda: sender._interval() == _sender.UNWATCHED_INTERVAL_S, 5))
            for _ in range(50):
                scope.step()
            self.assertTrue(scope.close(timeout=5))
            self.assertEqual(fake.store.seqs(), list(range(1, 151)))

    def test_a_sidecar_that_never_says_keeps_the_configured_interval(self):
        with FakeSidecar() as fake:
            scope, sender = self.start(fake)
            try:
                self.assertEqual(sender._interval(), _SHORT)
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


if __name__ == "__main__":
    unittest.main()
