import math
import random
import struct
import unittest

from stepscope import _msgpack, _protocol

try:
    import msgpack
except ImportError:  # the reference package is optional
    msgpack = None


def _samples():
    ints = [0, 1, 31, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**53 - 1, 2**63, 2**64 - 1]
    ints += [-1, -31, -32, -33, -127, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
    strings = ["", "a", "x" * 31, "x" * 32, "y" * 255, "z" * 256, "w" * 65536, "héllo ✓"]
    blobs = [b"", b"\x00", b"b" * 255, b"b" * 256, b"c" * 65536]
    floats = [0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), float("-inf")]
    containers = [
        [],
        list(range(15)),
        list(range(16)),
        list(range(70000)),
        {},
        {str(i): i for i in range(15)},
        {str(i): i for i in range(16)},
        {str(i): None for i in range(70000)},
        {"nested": {"list": [1, [2, [3, None]], {"k": True}], "f": False}},
        (1, 2, 3),
    ]
    return ints + strings + blobs + floats + containers + [None, True, False]


class EncodeDecodeTest(unittest.TestCase):
    def test_round_trip(self):
        for value in _samples():
            expected = list(value) if isinstance(value, tuple) else value
            with self.subTest(value=repr(value)[:60]):
                self.assertEqual(_msgpack.unpackb(_msgpack.packb(value)), expected)

    def test_nan_round_trips(self):
        self.assertTrue(math.isnan(_msgpack.unpackb(_msgpack.packb(float("nan")))))

    def test_smallest_formats(self):
        self.assertEqual(_msgpack.packb(5), b"\x05")
        self.assertEqual(_msgpack.packb(200), b"\xcc\xc8")
        self.assertEqual(_msgpack.packb(-5), b"\xfb")
        self.assertEqual(_msgpack.packb(-200), b"\xd1\xff\x38")
        self.assertEqual(_msgpack.packb(2**40), b"\xcf" + struct.pack(">Q", 2**40))
        self.assertEqual(_msgpack.packb(None), b"\xc0")
        self.assertEqual(_msgpack.packb("ab"), b"\xa2ab")
        self.assertEqual(_msgpack.packb(1.5), b"\xcb" + struct.pack(">d", 1.5))

    def test_bool_and_int_subclasses(self):
        class Flag(int):
            pass

        self.assertEqual(_msgpack.packb(True), b"\xc3")
        self.assertEqual(_msgpack.packb(Flag(7)), b"\x07")

    def test_rejects_out_of_range_and_unknown_types(self):
        with self.assertRaises(_msgpack.PackError):
            _msgpack.packb(2**64)
        with self.assertRaises(_msgpack.PackError):
            _msgpack.packb(-(2**63) - 1)
        with self.assertRaises(_msgpack.PackError):
            _msgpack.packb(object())

    def test_decodes_float32_and_str8(self):
        self.assertEqual(_msgpack.unpackb(b"\xca" + struct.pack(">f", 0.5)), 0.5)
        self.assertEqual(_msgpack.unpackb(b"\xd9\x03abc"), "abc")

    def test_decode_errors(self):
        for data in (b"", b"\x92\x01", b"\xa5ab", b"\xcd\x01", b"\xc1", b"\x01\x02", b"\xd4\x00\x00", b"\xa1\xff"):
            with self.subTest(data=data):
                with self.assertRaises(_msgpack.UnpackError):
                    _msgpack.unpackb(data)

    def test_decode_rejects_absurd_lengths_quickly(self):
        with self.assertRaises(_msgpack.UnpackError):
            _msgpack.unpackb(b"\xdd\xff\xff\xff\xff")
        with self.assertRaises(_msgpack.UnpackError):
            _msgpack.unpackb(b"\xdf\xff\xff\xff\xff")

    def test_decode_rejects_deep_nesting(self):
        with self.assertRaises(_msgpack.UnpackError):
            _msgpack.unpackb(b"\x91" * 1000 + b"\x00")


@unittest.skipIf(msgpack is None, "the msgpack package is not installed (byte-for-byte cross-check skipped)")
class CrossCheckTest(unittest.TestCase):
    def test_same_bytes_as_msgpack(self):
        for value in _samples():
            with self.subTest(value=repr(value)[:60]):
                self.assertEqual(_msgpack.packb(value), msgpack.packb(value))

    def test_decodes_what_msgpack_encodes(self):
        for value in _samples():
            expected = list(value) if isinstance(value, tuple) else value
            with self.subTest(value=repr(value)[:60]):
                self.assertEqual(_msgpack.unpackb(msgpack.packb(value)), expected)

    def test_random_rows(self):
        rng = random.Random(7)
        for _ in range(300):
            row = [rng.choice([None, rng.randrange(0, 2**53), rng.randrange(0, 300)]) for _ in range(11)]
            self.assertEqual(_msgpack.packb(row), msgpack.packb(row))

    def test_protocol_frames_match(self):
        row_values = (1, 0, 123456789012, 5_000_000, 1000, 2000, 3000, 32, None, 77, None, 4_000_000, 1_500_000, 2**40)
        frame = _protocol.steps([_protocol.encode_row(*row_values)], dropped=3)
        expected = msgpack.packb(
            {"v": 1, "type": "steps", "fields": list(_protocol.FIELDS), "rows": [list(row_values)], "dropped": 3}
        )
        self.assertEqual(frame, expected)
        self.assertEqual(
            _protocol.hello({"job": "j", "rank": 0}, {"python": "3"}, 10**18, 5),
            msgpack.packb(
                {"v": 1, "type": "hello", "job": "j", "rank": 0, "clock": {"wall_ns": 10**18, "mono_ns": 5},
                 "env": {"python": "3"}, "acked": 0, "heartbeat_ms": 1000, "capture": True, "profile": True}
            ),
        )


if __name__ == "__main__":
    unittest.main()
