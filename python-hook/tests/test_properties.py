"""Property tests, standard library only: seeded random inputs (``random.Random(seed)``), so that
every run checks the same cases and a failure names the seed that reproduces it.

(a) the msgpack encoder/decoder round-trips random nested values, and agrees byte for byte with
    Python's ``msgpack`` package where it is installed;
(b) the parser of sidecar messages, given random or damaged bytes, returns a valid message or
    raises ProtocolError, nothing else;
(c) random sequences of step/phase/loader/close calls, misuse included, never raise into the
    caller, and every record they produce goes out with its phases inside its step.
"""

import io
import math
import random
import struct
import sys
import time
import unittest
from unittest import mock

from stepscope import _env, _log, _msgpack, _protocol, _scope
from stepscope._protocol import MAX_DURATION_NS, ProtocolError
from stepscope._record import DUR_NS
from stepscope._scope import Scope

from .fake_sidecar import FakeSidecar

try:
    import msgpack
except ImportError:  # Debian's python3-msgpack, where installed
    msgpack = None

# --- generators -------------------------------------------------------------------------


def _boundary_ints():
    values = set()
    for bits in (5, 7, 8, 15, 16, 31, 32, 53, 63, 64):
        for base in (2**bits, -(2**bits)):
            for delta in (-1, 0, 1):
                values.add(base + delta)
    values.update((0, 1, -1, -32, -33, 127, 128, 255, 256))
    return sorted(v for v in values if -(2**63) <= v <= 2**64 - 1)


BOUNDARY_INTS = _boundary_ints()
SPECIAL_FLOATS = (0.0, -0.0, 1.5, -2.25, 5e-324, 2.0**53, 2.0**63, 1e300, -1e300, math.inf, -math.inf, math.nan)
# Code points from several planes (no surrogates: they cannot be UTF-8 encoded).
CHAR_RANGES = ((0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x24F), (0x370, 0x3FF), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF))
BOUNDARY_LENGTHS = (0, 1, 15, 16, 31, 32, 255, 256)


def random_int(rng):
    r = rng.random()
    if r < 0.5:
        return rng.choice(BOUNDARY_INTS)
    bits = rng.choice((7, 16, 32, 53, 63))
    if r < 0.8:
        return rng.randrange(0, 2**bits)
    return -rng.randrange(0, 2 ** min(bits, 63) + 1)


def random_float(rng):
    r = rng.random()
    if r < 0.3:
        return rng.choice(SPECIAL_FLOATS)
    if r < 0.6:
        return rng.uniform(-1e6, 1e6)
    return struct.unpack(">d", struct.pack(">Q", rng.getrandbits(64)))[0]  # any bit pattern


def random_length(rng, longest=40):
    return rng.choice(BOUNDARY_LENGTHS) if rng.random() < 0.2 else rng.randrange(longest)


def random_str(rng):
    chars = []
    for _ in range(random_length(rng)):
        low, high = rng.choice(CHAR_RANGES)
        chars.append(chr(rng.randint(low, high)))
    return "".join(chars)


def random_bytes(rng):
    return bytes(rng.getrandbits(8) for _ in range(random_length(rng)))


def random_value(rng, depth=0):
    kinds = ["int", "float", "str", "bytes", "const"]
    if depth < 4:
        kinds += ["list", "map"]
    kind = rng.choice(kinds)
    if kind == "int":
        return random_int(rng)
    if kind == "float":
        return random_float(rng)
    if kind == "str":
        return random_str(rng)
    if kind == "bytes":
        return random_bytes(rng)
    if kind == "const":
        return rng.choice((None, True, False))
    n = rng.choice((0, 1, 15, 16, 17)) if rng.random() < 0.2 else rng.randrange(6)
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(n)]
    return {random_str(rng): random_value(rng, depth + 1) for _ in range(n)}


def same(a, b):
    """Equal, with types exact (True is not 1) and floats compared bit for bit (NaN, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


# --- (a) msgpack --------------------------------------------------------------------------


class MsgpackPropertyTest(unittest.TestCase):
    def test_round_trip_of_random_nested_values(self):
        for seed in range(600):
            value = random_value(random.Random(seed))
            packed = _msgpack.packb(value)
            decoded = _msgpack.unpackb(packed)
            self.assertTrue(same(decoded, value), "seed %d: %r -> %r" % (seed, value, decoded))

    def test_every_boundary_integer_round_trips_in_its_smallest_format(self):
        for value in BOUNDARY_INTS:
            packed = _msgpack.packb(value)
            self.assertEqual(_msgpack.unpackb(packed), value)
            if value >= 0:
                expected = 1 if value < 128 else 2 if value < 256 else 3 if value < 2**16 else 5 if value < 2**32 else 9
            else:
                expected = 1 if value >= -32 else 2 if value >= -128 else 3 if value >= -(2**15) else 5 if value >= -(2**31) else 9
            self.assertEqual(len(packed), expected, value)

    def test_integers_beyond_64_bits_are_refused_with_pack_error(self):
        rng = random.Random(7)
        for _ in range(200):
            value = rng.choice((2**64 + rng.randrange(2**70), -(2**63) - 1 - rng.randrange(2**70)))
            with self.assertRaises(_msgpack.PackError):
                _msgpack.packb([1, {"k": value}])

    def test_truncated_encodings_fail_with_unpack_error_only(self):
        for seed in range(300):
            packed = _msgpack.packb(random_value(random.Random(seed)))
            cut = random.Random(seed).randrange(len(packed)) if len(packed) > 1 else 0
            try:
                _msgpack.unpackb(packed[:cut])
            except _msgpack.UnpackError:
                continue
            self.fail("seed %d: a truncated encoding decoded" % seed)

    @unittest.skipIf(msgpack is None, "the msgpack package is not installed for this interpreter")
    def test_agrees_with_the_msgpack_package(self):
        for seed in range(600):
            value = random_value(random.Random(seed))
            ours = _msgpack.packb(value)
            theirs = msgpack.packb(value, use_bin_type=True)
            self.assertEqual(ours, theirs, "seed %d: %r" % (seed, value))
            self.assertTrue(same(msgpack.unpackb(ours, raw=False, strict_map_key=False), value), "seed %d" % seed)
            self.assertTrue(same(_msgpack.unpackb(theirs), value), "seed %d" % seed)
        for value in BOUNDARY_INTS:
            self.assertEqual(_msgpack.packb(value), msgpack.packb(value), value)


# --- (b) the sidecar-message parser --------------------------------------------------------

VALID_SERVER_MESSAGES = (
    {"v": 1, "type": "welcome", "session": "ab12", "ack": 0, "counters": {"nvml": True, "interval_ms": 500, "process": True}},
    {"v": 1, "type": "welcome", "session": "ab12", "ack": 2**40, "resume": "0123456789abcdef" * 2},
    {"v": 1, "type": "ack", "ack": 17},
    {"v": 1, "type": "ack", "ack": 17, "end": True},
)


def random_server_message(rng):
    """A map shaped like a sidecar message, with random (often wrong) field values."""
    message = {}
    for key in ("v", "type", "ack", "session", "resume", "end", "counters"):
        if rng.random() < 0.8:
            r = rng.random()
            if key == "type" and r < 0.6:
                message[key] = rng.choice(("welcome", "ack", "something-new"))
            elif key == "v" and r < 0.9:
                message[key] = 1 if r < 0.6 else rng.choice((1.0, True, 2, 0, "1"))
            elif key == "ack" and r < 0.6:
                message[key] = random_int(rng) if r < 0.4 else rng.choice((0, 1, 2**53, -1, 1.0, True, "3"))
            elif key == "resume" and r < 0.5:
                message[key] = rng.choice(("0123456789abcdef" * 2, "0123456789ABCDEF" * 2, "0" * 31, "0" * 33, None))
            else:
                message[key] = random_value(rng, depth=3)
    if rng.random() < 0.2:
        message[random_str(rng)] = random_value(rng, depth=3)
    return message


def damage(rng, payload):
    data = bytearray(payload)
    for _ in range(rng.randint(1, 4)):
        action = rng.random()
        if action < 0.4 and data:
            data[rng.randrange(len(data))] = rng.getrandbits(8)
        elif action < 0.6 and data:
            del data[rng.randrange(len(data)) :]
        elif action < 0.8:
            data.insert(rng.randrange(len(data) + 1), rng.getrandbits(8))
        elif data:
            del data[rng.randrange(len(data))]
    return bytes(data)


def garbage_payloads(rng, count):
    for i in range(count):
        r = rng.random()
        if r < 0.25:
            yield bytes(rng.getrandbits(8) for _ in range(rng.randrange(64)))
        elif r < 0.5:
            yield damage(rng, _msgpack.packb(rng.choice(VALID_SERVER_MESSAGES)))
        elif r < 0.8:
            yield _msgpack.packb(random_server_message(rng))
        elif r < 0.9:
            yield _msgpack.packb(random_value(rng))
        else:
            # Headers that claim huge strings, arrays or maps with nothing behind them.
            yield bytes((rng.choice((0xDB, 0xDD, 0xDF, 0xC6, 0xDC, 0xDE)),)) + bytes(rng.getrandbits(8) for _ in range(4))


class ParserPropertyTest(unittest.TestCase):
    def check_valid(self, message):
        self.assertIsInstance(message, dict)
        self.assertIs(type(message["v"]), int)
        self.assertEqual(message["v"], 1)
        self.assertIsInstance(message["type"], str)
        if message["type"] in ("welcome", "ack"):
            self.assertIs(type(message["ack"]), int)
            self.assertGreaterEqual(message["ack"], 0)
        if message["type"] == "welcome" and message.get("resume") is not None:
            self.assertRegex(message["resume"], r"^[0-9a-f]{32}$")

    def test_random_and_damaged_bytes_give_a_message_or_protocol_error(self):
        rng = random.Random(20240611)
        outcomes = {"parsed": 0, "refused": 0}
        for i, payload in enumerate(garbage_payloads(rng, 4000)):
            try:
                message = _protocol.parse_server_message(payload)
            except ProtocolError:
                outcomes["refused"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - the property under test
                self.fail("payload %d (%s) raised %s: %s" % (i, payload[:80].hex(), type(exc).__name__, exc))
            self.check_valid(message)
            outcomes["parsed"] += 1
        # Both outcomes are exercised, or the generator is not doing its job.
        self.assertGreater(outcomes["parsed"], 100, outcomes)
        self.assertGreater(outcomes["refused"], 1000, outcomes)

    def test_valid_messages_parse(self):
        for message in VALID_SERVER_MESSAGES:
            self.check_valid(_protocol.parse_server_message(_msgpack.packb(message)))


# --- (c) step/phase API sequences ----------------------------------------------------------

PHASE_NAMES = ("data", "h2d", "compute", "data", "h2d", "compute", "backward", None, 3, ("t",), ["unhashable"])
SAMPLES = (None, 0, 8, 8, -1, 2.5, 3.0, "8", True, 2**70, math.nan, math.inf, object())
TIMEOUTS = (0.0, 0.01, -1, math.nan, math.inf, "soon", None)


class FakeClock:
    def __init__(self, rng):
        self.rng = rng
        self.now = time.perf_counter_ns()  # a scope made just before starts its first step earlier

    def __call__(self):
        return self.now

    def advance(self):
        r = self.rng.random()
        if r < 0.1:
            return  # no time at all: zero-length steps and phases
        if r < 0.98:
            self.now += self.rng.randrange(1, 10**7)
        else:
            self.now += self.rng.randrange(MAX_DURATION_NS, 3 * MAX_DURATION_NS)  # a step longer than a day


class ApiSequence:
    """Drives a scope with random calls; records every exception that reaches the caller."""

    def __init__(self, scope, rng, clock):
        self.scope = scope
        self.rng = rng
        self.clock = clock
        self.open = []  # entered phase context managers, in any order of exit
        self.errors = []
        self.calls = []

    def call(self, what, fn, *args):
        self.calls.append(what)
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the property under test
            self.errors.append("%s -> %s: %s (after %s)" % (what, type(exc).__name__, exc, self.calls[-8:]))
            return None

    def run(self, length, depth=0):
        rng = self.rng
        for _ in range(length):
            self.clock.advance()
            op = rng.random()
            if op < 0.25:
                samples = rng.choice(SAMPLES)
                self.call("step(%r)" % (samples,), self.scope.step, samples)
            elif op < 0.45:
                name = rng.choice(PHASE_NAMES)
                ctx = self.call("phase(%r)" % (name,), self.scope.phase, name)
                if ctx is not None and self.call("enter %r" % (name,), ctx.__enter__) is not None:
                    self.open.append(ctx)
            elif op < 0.62:
                if self.open and rng.random() < 0.9:
                    ctx = self.open.pop(rng.randrange(len(self.open)))  # not necessarily the innermost
                else:
                    ctx = self.scope.phase(rng.choice(PHASE_NAMES))  # an exit without an enter
                self.call("exit", ctx.__exit__, None, None, None)
            elif op < 0.72:
                outer, inner = rng.choice(PHASE_NAMES), rng.choice(PHASE_NAMES)
                self.call("nested %r/%r" % (outer, inner), self.nested, outer, inner)
            elif op < 0.82 and depth < 2:
                self.call("loader", self.loop, depth)
            elif op < 0.86:
                timeout = rng.choice(TIMEOUTS)
                self.call("close(%r)" % (timeout,), self.scope.close, timeout)
            elif op < 0.9:
                self.call("stats", self.scope.stats)
            elif op < 0.93:
                self.call("loader() of a DataLoader lookalike", self.scope.loader, LoaderLike())

    def nested(self, outer, inner):
        with self.scope.phase(outer):
            self.clock.advance()
            with self.scope.phase(inner):
                self.clock.advance()
            self.clock.advance()

    def loop(self, depth):
        n = self.rng.randrange(6)
        stop_at = self.rng.randrange(n + 2)
        for i, _ in enumerate(self.scope.loader(ClockedIterable(self.clock, n))):
            if i == stop_at:
                break  # leaving the loop early ends the batch's step
            self.run(self.rng.randrange(4), depth + 1)


class ClockedIterable:
    def __init__(self, clock, n):
        self.clock = clock
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            self.clock.advance()  # time in next(): "data"
            yield i


class LoaderLike:
    dataset = ()
    batch_size = 4
    num_workers = 2

    @property
    def pin_memory(self):
        raise RuntimeError("a property that fails")


def sent_rows(records):
    """The rows the sender would send for these queued records (see Sender._collect)."""
    return [dict(zip(_protocol.FIELDS, _msgpack.unpackb(_protocol.encode_record(r, 0, (None, None, None))))) for r in records]


class EncodeRecordPropertyTest(unittest.TestCase):
    """encode_record's one-call path for plain CPU steps writes what encode_row's clamps write."""

    def test_every_record_reads_as_encode_row_writes_it(self):
        rng = random.Random(24)
        edges = [0, 1, 2**32 - 1, 2**32, MAX_DURATION_NS + 1, 2**53, -1]
        pick = lambda: rng.choice(edges) if rng.random() < 0.3 else rng.randrange(0, 10**7)  # noqa: E731
        for _ in range(5000):
            seq = rng.choice([1, 2, rng.randrange(1, 2**33)])
            samples = rng.choice([None, 32, pick(), -3, 2.0, True])
            eval_ns = rng.choice([None, None, pick()])
            comm = rng.choice([(None, None, None), (None, None, 1024), (pick(), pick(), None)])
            origin = rng.choice([0, 10**9])
            record = (seq, origin + pick(), pick(), pick(), pick(), pick(), samples, None, eval_ns)
            got = _msgpack.unpackb(_protocol.encode_record(record, origin, comm))
            want = _msgpack.unpackb(
                _protocol.encode_row(seq, seq - 1, record[1] - origin, *record[2:7], None, None, None, *comm, eval_ns)
            )
            self.assertEqual(got, want, record)


class ApiPropertyTest(unittest.TestCase):
    def setUp(self):
        _log.reset()
        self.addCleanup(_log.reset)
        patcher = mock.patch.object(sys, "stderr", io.StringIO())
        patcher.start()
        self.addCleanup(patcher.stop)

    def check_rows(self, rows, seed):
        self.assertEqual([r["seq"] for r in rows], list(range(1, len(rows) + 1)), seed)
        for r in rows:
            phases = r["data_ns"] + r["h2d_ns"] + r["compute_ns"]
            self.assertTrue(0 < r["dur_ns"] <= MAX_DURATION_NS, (seed, r))
            self.assertTrue(min(r["data_ns"], r["h2d_ns"], r["compute_ns"]) >= 0, (seed, r))
            self.assertLessEqual(phases, r["dur_ns"], (seed, r))
            self.assertTrue(r["samples"] is None or (type(r["samples"]) is int and r["samples"] >= 0), (seed, r))
            self.assertEqual(r["step"], r["seq"] - 1)

    def drive(self, scope, seed, length=120):
        rng = random.Random(seed)
        clock = FakeClock(rng)
        with mock.patch.object(_scope, "_now", clock):
            sequence = ApiSequence(scope, rng, clock)
            sequence.run(length)
            for ctx in sequence.open:  # leave what is still open, then close (maybe again)
                sequence.call("exit", ctx.__exit__, None, None, None)
            sequence.call("close", scope.close, 0.5)
            sequence.call("close again", scope.close, 0.5)
            sequence.call("step after close", scope.step)
            sequence.call("phase after close", lambda: scope.phase("h2d").__enter__().__exit__(None, None, None))
        self.assertEqual(sequence.errors, [], "seed %d" % seed)
        return sequence

    def test_random_call_sequences_never_raise_and_steps_hold_their_phases(self):
        for seed in range(150):
            scope = Scope(None, buffer_size=100_000)
            self.drive(scope, seed)
            self.assertIs(scope.close(0.1), False)  # a bool, whatever happened before (nothing is sent here)
            self.assertIsNotNone(scope.close_result)
            records = list(scope._queue)
            for record in records:
                self.assertGreaterEqual(record[DUR_NS], 0, "seed %d: negative raw duration" % seed)
            self.check_rows(sent_rows(records), seed)
            self.assertEqual(len(records), scope.stats()["records"])

    def test_a_random_sequence_reaches_the_sidecar_intact(self):
        server = FakeSidecar()
        self.addCleanup(server.stop)
        for seed in (1, 2):
            connection = {
                "url": server.url,
                "identity": _env.identity(job="properties", rank=0, world_size=1, local_rank=0),
                "env": {},
                "batch_interval": 0.01,
            }
            scope = Scope(connection)
            self.addCleanup(scope.close, 0.2)
            # A close in the middle of the sequence is part of the property: keep it for the end.
            with mock.patch.object(scope, "close", lambda timeout=5.0: None):
                self.drive(scope, seed, length=200)
            records = scope._seq
            scope.close(5.0)
            result = scope.close_result
            session = scope._sender._identity["session"]
            rows = server.store.records(session)
            self.assertTrue(result, (seed, result))
            self.assertEqual(len(rows), records)
            self.check_rows(rows, seed)


if __name__ == "__main__":
    unittest.main()
