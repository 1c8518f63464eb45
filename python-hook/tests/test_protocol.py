import numbers
import unittest

from stepscope import _msgpack, _protocol
from stepscope._protocol import MAX_DURATION_NS, MAX_INT, ProtocolError


def row(**overrides):
    values = dict(
        seq=1, step=0, end_ns=10**12, dur_ns=1000, data_ns=100, h2d_ns=200, compute_ns=300, samples=8,
        gpu_h2d_ns=None, gpu_compute_ns=None, gpu_idle_ns=None,
    )
    values.update(overrides)
    return dict(zip(_protocol.FIELDS, _msgpack.unpackb(_protocol.encode_row(**values))))


class NumpyLikeInt:
    """A numbers.Integral that is not an int, as numpy.int64 is."""

    def __init__(self, value):
        self.value = value

    def __int__(self):
        return self.value


numbers.Integral.register(NumpyLikeInt)


class RowTest(unittest.TestCase):
    def test_plain_row(self):
        self.assertEqual(
            row(gpu_h2d_ns=5, gpu_compute_ns=6, gpu_idle_ns=7),
            dict(seq=1, step=0, end_ns=10**12, dur_ns=1000, data_ns=100, h2d_ns=200, compute_ns=300, samples=8,
                 gpu_h2d_ns=5, gpu_compute_ns=6, gpu_idle_ns=7, comm_ns=None, comm_wait_ns=None, comm_bytes=None, eval_ns=None),
        )

    def test_every_integer_width(self):
        for value in (0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, MAX_INT):
            with self.subTest(value=value):
                self.assertEqual(row(end_ns=value)["end_ns"], value)

    def test_duration_is_positive_and_at_most_a_day(self):
        self.assertEqual(row(dur_ns=0, data_ns=0, h2d_ns=0, compute_ns=0)["dur_ns"], 1)
        self.assertEqual(row(dur_ns=-5, data_ns=0, h2d_ns=0, compute_ns=0)["dur_ns"], 1)
        self.assertEqual(row(dur_ns=MAX_DURATION_NS * 3)["dur_ns"], MAX_DURATION_NS)

    def test_overlapping_phases_are_scaled_into_the_step(self):
        r = row(dur_ns=100, data_ns=100, h2d_ns=50, compute_ns=50)
        self.assertEqual((r["data_ns"], r["h2d_ns"], r["compute_ns"]), (50, 25, 25))
        r = row(dur_ns=7, data_ns=-3, h2d_ns=5, compute_ns=5)
        self.assertEqual(r["data_ns"], 0)
        self.assertLessEqual(r["h2d_ns"] + r["compute_ns"], 7)

    def test_samples(self):
        self.assertIsNone(row(samples=None)["samples"])
        self.assertIsNone(row(samples=-1)["samples"])
        self.assertIsNone(row(samples=True)["samples"])
        self.assertIsNone(row(samples=2.5)["samples"])
        self.assertIsNone(row(samples="8")["samples"])
        self.assertIsNone(row(samples=object())["samples"])
        self.assertEqual(row(samples=16.0)["samples"], 16)
        self.assertEqual(row(samples=NumpyLikeInt(12))["samples"], 12)

    def test_gpu_durations_are_clamped(self):
        r = row(gpu_h2d_ns=-1, gpu_compute_ns=MAX_DURATION_NS + 1, gpu_idle_ns=0)
        self.assertEqual((r["gpu_h2d_ns"], r["gpu_compute_ns"], r["gpu_idle_ns"]), (0, MAX_DURATION_NS, 0))

    def test_monotonic_origin_keeps_values_within_53_bits(self):
        self.assertEqual(_protocol.monotonic_origin(10**15), 0)
        late = 200 * 24 * 3600 * 10**9  # 200 days of uptime
        origin = _protocol.monotonic_origin(late)
        self.assertLess(late - origin, 2**52)
        self.assertGreater(late - origin, 0)


class FramesTest(unittest.TestCase):
    def test_steps_frame(self):
        rows = [_protocol.encode_row(i, i - 1, 10**12 + i, 10, 1, 2, 3, None, None, None, None) for i in (1, 2, 3)]
        frame = _msgpack.unpackb(_protocol.steps(rows, dropped=4))
        self.assertEqual(list(frame), ["v", "type", "fields", "rows", "dropped"])
        self.assertEqual((frame["v"], frame["type"], frame["dropped"]), (1, "steps", 4))
        self.assertEqual(frame["fields"], list(_protocol.FIELDS))
        self.assertEqual([r[0] for r in frame["rows"]], [1, 2, 3])

    def test_steps_frame_with_many_rows(self):
        rows = [_protocol.encode_row(i, i - 1, 1, 10, 1, 2, 3, None, None, None, None) for i in range(1, 4097)]
        frame = _protocol.steps(rows, dropped=0)
        self.assertLess(len(frame), 1 << 20)
        self.assertEqual(len(_msgpack.unpackb(frame)["rows"]), 4096)

    def test_hello_env_end(self):
        hello = _msgpack.unpackb(_protocol.hello({"job": "j", "rank": 0}, {"a": 1}, 5, 6))
        self.assertEqual(hello, {"v": 1, "type": "hello", "job": "j", "rank": 0, "clock": {"wall_ns": 5, "mono_ns": 6},
                                 "env": {"a": 1}, "acked": 0, "heartbeat_ms": 1000, "capture": True, "profile": True})
        self.assertEqual(_msgpack.unpackb(_protocol.env_update({"b": 2})), {"v": 1, "type": "env", "env": {"b": 2}})
        self.assertEqual(_msgpack.unpackb(_protocol.end("exit")), {"v": 1, "type": "end", "reason": "exit"})

    def test_hello_acked_and_resume(self):
        secret = "0123456789abcdef" * 2
        hello = _msgpack.unpackb(_protocol.hello({"session": "s"}, {}, 5, 6, acked=42, resume=secret))
        self.assertEqual((hello["acked"], hello["resume"]), (42, secret))
        first = _msgpack.unpackb(_protocol.hello({"session": "s"}, {}, 5, 6))
        self.assertEqual(first["acked"], 0)
        self.assertNotIn("resume", first)  # the first hello of a session has none
        self.assertNotIn("proc_start", first)
        self.assertEqual(_msgpack.unpackb(_protocol.hello({}, {}, 5, 6, proc_start=825771))["proc_start"], 825771)

    def test_heartbeat_and_stack(self):
        self.assertEqual(_msgpack.unpackb(_protocol.heartbeat()), {"v": 1, "type": "heartbeat"})
        stack = _msgpack.unpackb(_protocol.stack(7, 123, 40, {"threads": [], "still_ms": None}))
        self.assertEqual(stack, {"v": 1, "type": "stack", "id": 7, "at_ns": 123, "last_seq": 40, "threads": [], "still_ms": None})


class ServerMessageTest(unittest.TestCase):
    def parse(self, message):
        return _protocol.parse_server_message(_msgpack.packb(message))

    def test_valid(self):
        self.assertEqual(self.parse({"v": 1, "type": "ack", "ack": 3, "end": True})["ack"], 3)
        self.assertEqual(self.parse({"v": 1, "type": "welcome", "session": "s", "ack": 0})["type"], "welcome")
        self.assertEqual(self.parse({"v": 1, "type": "future-thing"})["type"], "future-thing")
        secret = "0123456789abcdef" * 2
        welcome = self.parse({"v": 1, "type": "welcome", "session": "s", "ack": 0, "resume": secret})
        self.assertEqual(welcome["resume"], secret)
        self.assertIsNone(self.parse({"v": 1, "type": "welcome", "session": "s", "ack": 0, "resume": None})["resume"])
        offers = self.parse({"v": 1, "type": "welcome", "session": "s", "ack": 0, "heartbeat_ms": 1000, "capture": {"deep": True}})
        self.assertEqual((offers["heartbeat_ms"], offers["capture"]), (1000, {"deep": True}))
        self.assertEqual(self.parse({"v": 1, "type": "capture", "id": 3})["id"], 3)
        self.assertIs(self.parse({"v": 1, "type": "welcome", "ack": 0, "watched": False})["watched"], False)
        self.assertIs(self.parse({"v": 1, "type": "watch", "watched": True})["watched"], True)

    def test_invalid(self):
        for message in (
            [1, 2],
            {"type": "ack", "ack": 1},
            {"v": 2, "type": "ack", "ack": 1},
            {"v": 1, "ack": 1},
            {"v": 1, "type": "ack", "ack": -1},
            {"v": 1, "type": "ack", "ack": "3"},
            {"v": 1, "type": "welcome"},
            {"v": True, "type": "ack", "ack": 1},
            {"v": 1.0, "type": "ack", "ack": 1},
            {"v": 1, "type": "welcome", "ack": 0, "resume": "0123456789ABCDEF" * 2},
            {"v": 1, "type": "welcome", "ack": 0, "resume": "0123456789abcdef"},
            {"v": 1, "type": "welcome", "ack": 0, "resume": "0123456789abcdef" * 2 + "\n"},
            {"v": 1, "type": "welcome", "ack": 0, "resume": b"0123456789abcdef" * 2},
            {"v": 1, "type": "welcome", "ack": 0, "heartbeat_ms": 10},
            {"v": 1, "type": "welcome", "ack": 0, "heartbeat_ms": "1000"},
            {"v": 1, "type": "welcome", "ack": 0, "capture": True},
            {"v": 1, "type": "capture"},
            {"v": 1, "type": "capture", "id": -1},
            {"v": 1, "type": "welcome", "ack": 0, "watched": 0},
            {"v": 1, "type": "watch"},
            {"v": 1, "type": "watch", "watched": "no"},
        ):
            with self.subTest(message=message):
                with self.assertRaises(ProtocolError):
                    self.parse(message)
        with self.assertRaises(ProtocolError):
            _protocol.parse_server_message(b"\xc1")


if __name__ == "__main__":
    unittest.main()
