"""Messages of the stepscope wire protocol, version 1 (see docs/protocol.md)."""

from __future__ import annotations

import numbers
import re
import struct

from . import _msgpack
from ._record import COMPUTE_NS, DATA_NS, DUR_NS, END_NS, EVAL_NS, GPU, H2D_NS, SAMPLES, SEQ

VERSION = 1

FIELDS = (
    "seq",
    "step",
    "end_ns",
    "dur_ns",
    "data_ns",
    "h2d_ns",
    "compute_ns",
    "samples",
    "gpu_h2d_ns",
    "gpu_compute_ns",
    "gpu_idle_ns",
    # Communication in collectives during the step (see _comm.py); nil where not measured.
    "comm_ns",
    "comm_wait_ns",
    "comm_bytes",
    # Time in evaluation during the step (part of what is not data, h2d or compute); nil where not measured.
    "eval_ns",
)
MAX_ROWS_PER_FRAME = 4096
MAX_DURATION_NS = 24 * 3600 * 10**9
MAX_INT = 2**53 - 1

_ROW_HEADER = _msgpack.array_header(len(FIELDS))
# Every `steps` frame starts with the same bytes; only the row count, rows and `dropped` vary.
_STEPS_PREFIX = (
    _msgpack.map_header(5)
    + b"".join(_msgpack.packb(k) + _msgpack.packb(v) for k, v in (("v", VERSION), ("type", "steps"), ("fields", list(FIELDS))))
    + _msgpack.packb("rows")
)
_DROPPED_KEY = _msgpack.packb("dropped")


def monotonic_origin(perf_counter_now: int) -> int:
    """The offset the hook subtracts from ``perf_counter_ns`` values before sending them.

    ``perf_counter_ns`` counts from boot on Linux and passes 2**53 (the protocol's integer
    limit) after 104 days of uptime. The sidecar only uses monotonic times relative to
    ``hello.clock.mono_ns``, so a per-process origin keeps them valid; it is 0 (raw
    ``perf_counter_ns``) unless the raw values are already past 2**52.
    """
    if perf_counter_now < 2**52:
        return 0
    return perf_counter_now - 3600 * 10**9


class ProtocolError(ValueError):
    pass


_RESUME = re.compile(r"[0-9a-f]{32}\Z")


# What this hook offers in every hello: a frame at least every HEARTBEAT_MS while its sender thread
# runs (`heartbeat` when nothing else went out), and `stack` frames when the sidecar asks (`capture`).
# A sidecar that knows them says so in `welcome`; an older one ignores them.
HEARTBEAT_MS = 1000


def hello(identity: dict, env: dict, wall_ns: int, mono_ns: int, *, acked: int = 0, resume=None, proc_start=None) -> bytes:
    """``acked``: the highest seq acknowledged in this session so far (0 before any ack).
    ``resume``: the secret the session's first `welcome` handed out; left out before that.
    ``proc_start``: this process's start time in clock ticks after boot (/proc/self/stat), which
    lets a sidecar that sees the process tell it from another with the same pid."""
    message = {"v": VERSION, "type": "hello"}
    message.update(identity)
    message["clock"] = {"wall_ns": wall_ns, "mono_ns": mono_ns}
    message["env"] = env
    message["acked"] = min(max(int(acked), 0), MAX_INT)
    if resume is not None:
        message["resume"] = resume
    message["heartbeat_ms"] = HEARTBEAT_MS
    message["capture"] = True
    message["profile"] = True
    if proc_start is not None:
        message["proc_start"] = min(max(int(proc_start), 0), MAX_INT)
    return _msgpack.packb(message)


_HEARTBEAT = None


def heartbeat() -> bytes:
    global _HEARTBEAT
    if _HEARTBEAT is None:
        _HEARTBEAT = _msgpack.packb({"v": VERSION, "type": "heartbeat"})
    return _HEARTBEAT


def stack(request_id: int, at_ns: int, last_seq: int, where: dict) -> bytes:
    """The answer to a `capture` request: ``where`` holds threads, still_ms, comm, flight, workers."""
    message = {"v": VERSION, "type": "stack", "id": min(max(int(request_id), 0), MAX_INT), "at_ns": max(0, min(int(at_ns), MAX_INT)), "last_seq": min(max(int(last_seq), 0), MAX_INT)}
    message.update(where)
    return _msgpack.packb(message)


def profile_chunk(request_id: int, seq: int, last: bool, data: bytes) -> bytes:
    """A part of the gzipped Chrome trace answering a `profile` request."""
    return _msgpack.packb({"v": VERSION, "type": "profile", "id": min(max(int(request_id), 0), MAX_INT), "seq": seq, "last": last, "data": data})


def profile_refused(request_id: int, reason: str) -> bytes:
    """Why a `profile` request got no trace."""
    return _msgpack.packb({"v": VERSION, "type": "profile", "id": min(max(int(request_id), 0), MAX_INT), "seq": 0, "last": True, "error": str(reason)[:256]})


def env_update(env: dict) -> bytes:
    return _msgpack.packb({"v": VERSION, "type": "env", "env": env})


def counters(source: str, samples: list) -> bytes:
    return _msgpack.packb({"v": VERSION, "type": "counters", "source": source, "samples": samples})


def end(reason: str) -> bytes:
    return _msgpack.packb({"v": VERSION, "type": "end", "reason": reason})


def steps(rows, dropped: int) -> bytes:
    """A `steps` frame from rows already encoded by :func:`encode_row` (1..4096 of them)."""
    out = bytearray(_STEPS_PREFIX)
    out += _msgpack.array_header(len(rows))
    out += b"".join(rows)
    out += _DROPPED_KEY
    _msgpack.pack_into(out, min(dropped, MAX_INT))
    return bytes(out)


_U8 = struct.Struct(">BB").pack
_U16 = struct.Struct(">BH").pack
_U32 = struct.Struct(">BI").pack
_U64 = struct.Struct(">BQ").pack


def _plain_row_struct(samples_nil: bool, eval_nil: bool):
    """The layout of a row whose integers fit 32 bits (its end 64) and whose GPU and comm columns are nil."""
    fmt = ">B" + "BI" * 2 + "BQ" + "BI" * 4 + ("B" if samples_nil else "BI") + "B" * 6 + ("B" if eval_nil else "BI")
    return struct.Struct(fmt).pack


# The rows of CPU steps (GPU and comm columns nil), by whether samples and eval_ns are nil: one
# pack call instead of a loop over the fields.
_ROW_NIL_NIL = _plain_row_struct(True, True)
_ROW_NIL_EVAL = _plain_row_struct(True, False)
_ROW_SAMPLES_NIL = _plain_row_struct(False, True)
_ROW_SAMPLES_EVAL = _plain_row_struct(False, False)
_NIL = 0xC0
_NILS = (_NIL,) * 6  # the GPU and comm columns
_NILS_AND_NIL = _NILS + (_NIL,)  # and eval_ns
_U32_LIMIT = 2**32


def encode_record(record: tuple, origin: int, comm_times: tuple) -> bytes:
    """A step record (laid out as _record says) as a row: its end on the hook clock whose zero is
    ``origin``, its GPU times once resolved, and ``comm_times`` (comm_ns, comm_wait_ns, comm_bytes).

    Runs on the sender thread for every step, holding the GIL the training thread needs: a step
    without GPU or comm columns whose figures need no clamping is packed in one call; any other
    goes through :func:`encode_row`, which clamps.
    """
    seq = record[SEQ]
    gpu = record[GPU]
    end_ns = record[END_NS] - origin
    dur_ns = record[DUR_NS]
    data_ns = record[DATA_NS]
    h2d_ns = record[H2D_NS]
    compute_ns = record[COMPUTE_NS]
    samples = record[SAMPLES]
    eval_ns = record[EVAL_NS]
    if (
        gpu is None
        and comm_times[0] is None
        and comm_times[1] is None
        and comm_times[2] is None
        and seq < _U32_LIMIT
        and 0 <= end_ns <= MAX_INT
        and 0 < dur_ns < _U32_LIMIT
        and data_ns >= 0
        and h2d_ns >= 0
        and compute_ns >= 0
        and (samples is None or (type(samples) is int and 0 <= samples < _U32_LIMIT))
        and (eval_ns is None or (type(eval_ns) is int and eval_ns >= 0))
        and data_ns + h2d_ns + compute_ns + (eval_ns or 0) <= dur_ns
    ):
        step = seq - 1
        if samples is None:
            if eval_ns is None:
                return _ROW_NIL_NIL(0x9F, 0xCE, seq, 0xCE, step, 0xCF, end_ns, 0xCE, dur_ns, 0xCE, data_ns, 0xCE, h2d_ns, 0xCE, compute_ns, _NIL, *_NILS_AND_NIL)
            return _ROW_NIL_EVAL(0x9F, 0xCE, seq, 0xCE, step, 0xCF, end_ns, 0xCE, dur_ns, 0xCE, data_ns, 0xCE, h2d_ns, 0xCE, compute_ns, _NIL, *_NILS, 0xCE, eval_ns)
        if eval_ns is None:
            return _ROW_SAMPLES_NIL(0x9F, 0xCE, seq, 0xCE, step, 0xCF, end_ns, 0xCE, dur_ns, 0xCE, data_ns, 0xCE, h2d_ns, 0xCE, compute_ns, 0xCE, samples, *_NILS_AND_NIL)
        return _ROW_SAMPLES_EVAL(0x9F, 0xCE, seq, 0xCE, step, 0xCF, end_ns, 0xCE, dur_ns, 0xCE, data_ns, 0xCE, h2d_ns, 0xCE, compute_ns, 0xCE, samples, *_NILS, 0xCE, eval_ns)
    if gpu is None:
        gpu_h2d_ns = gpu_compute_ns = gpu_idle_ns = None
    else:
        gpu_h2d_ns, gpu_compute_ns, gpu_idle_ns = gpu.h2d_ns, gpu.compute_ns, gpu.idle_ns
    comm_ns, comm_wait_ns, comm_bytes = comm_times
    gpu_and_comm = (gpu_h2d_ns, gpu_compute_ns, gpu_idle_ns, comm_ns, comm_wait_ns, comm_bytes)
    return encode_row(seq, seq - 1, end_ns, dur_ns, data_ns, h2d_ns, compute_ns, samples, *gpu_and_comm, eval_ns)


def encode_row(
    seq,
    step,
    end_ns,
    dur_ns,
    data_ns,
    h2d_ns,
    compute_ns,
    samples,
    gpu_h2d_ns,
    gpu_compute_ns,
    gpu_idle_ns,
    comm_ns=None,
    comm_wait_ns=None,
    comm_bytes=None,
    eval_ns=None,
) -> bytes:
    """Encode one step record, clamped so that it always passes the sidecar's row checks.

    ``comm_ns`` and ``comm_wait_ns`` are clamped to the step and the wait to the time in
    collectives (both are measured inside the step's interval, so this only guards rounding).

    Runs on the sender thread for every record, hence the inlined msgpack integer formats.
    """
    if not 0 < dur_ns <= MAX_DURATION_NS:
        dur_ns = min(max(dur_ns, 1), MAX_DURATION_NS)
    if data_ns < 0 or h2d_ns < 0 or compute_ns < 0:
        data_ns, h2d_ns, compute_ns = max(data_ns, 0), max(h2d_ns, 0), max(compute_ns, 0)
    if eval_ns is not None and (type(eval_ns) is not int or eval_ns < 0):
        eval_ns = _eval_duration(eval_ns)
    phases = data_ns + h2d_ns + compute_ns + (eval_ns or 0)
    if phases > dur_ns:
        # Overlapping phases (nested `with`, a phase around the wrapped loader) can add up to
        # more than the step; scale them down so that they still partition it.
        data_ns = data_ns * dur_ns // phases
        h2d_ns = h2d_ns * dur_ns // phases
        compute_ns = compute_ns * dur_ns // phases
        if eval_ns:
            eval_ns = eval_ns * dur_ns // phases
    if samples is not None and (type(samples) is not int or samples < 0):
        samples = _samples(samples)
    if gpu_h2d_ns is not None:
        gpu_h2d_ns = _gpu_duration(gpu_h2d_ns)
    if gpu_compute_ns is not None:
        gpu_compute_ns = _gpu_duration(gpu_compute_ns)
    if gpu_idle_ns is not None:
        gpu_idle_ns = _gpu_duration(gpu_idle_ns)
    if end_ns < 0:
        end_ns = 0
    if comm_ns is not None or comm_wait_ns is not None or comm_bytes is not None:
        comm_ns, comm_wait_ns, comm_bytes = _comm_columns(dur_ns, comm_ns, comm_wait_ns, comm_bytes)
    out = bytearray(_ROW_HEADER)
    for value in (
        seq,
        step,
        end_ns,
        dur_ns,
        data_ns,
        h2d_ns,
        compute_ns,
        samples,
        gpu_h2d_ns,
        gpu_compute_ns,
        gpu_idle_ns,
        comm_ns,
        comm_wait_ns,
        comm_bytes,
        eval_ns,
    ):
        if value is None:
            out.append(0xC0)
        elif value < 0x80:
            out.append(value)
        elif value < 0x100:
            out += _U8(0xCC, value)
        elif value < 0x10000:
            out += _U16(0xCD, value)
        elif value < 0x100000000:
            out += _U32(0xCE, value)
        else:
            out += _U64(0xCF, min(value, MAX_INT))
    return bytes(out)


def _samples(samples):
    try:
        if samples is None or type(samples) is bool:
            return None
        if type(samples) is int or isinstance(samples, numbers.Integral):
            samples = int(samples)
            return samples if samples >= 0 else None
        if isinstance(samples, float) and samples.is_integer() and samples >= 0:
            return int(samples)
    except Exception:  # an Integral whose int() fails: the record is kept, without a sample count
        pass
    return None


def _eval_duration(ns):
    try:
        return max(int(ns), 0)
    except Exception:  # never lose the record over an optional column
        return None


def _gpu_duration(ns: int) -> int:
    return min(max(int(ns), 0), MAX_DURATION_NS)


def _comm_columns(dur_ns, comm_ns, comm_wait_ns, comm_bytes):
    try:
        if comm_ns is not None:
            comm_ns = min(max(int(comm_ns), 0), dur_ns)
        if comm_wait_ns is not None:
            comm_wait_ns = min(max(int(comm_wait_ns), 0), dur_ns if comm_ns is None else comm_ns)
        if comm_bytes is not None:
            comm_bytes = min(max(int(comm_bytes), 0), MAX_INT)
        return comm_ns, comm_wait_ns, comm_bytes
    except Exception:  # never lose the record over its optional columns
        return None, None, None


def parse_server_message(payload: bytes) -> dict:
    """Decode a sidecar message; raises ProtocolError if it is not a version-1 map."""
    try:
        message = _msgpack.unpackb(payload)
    except _msgpack.UnpackError as exc:
        raise ProtocolError("undecodable message from sidecar: %s" % exc) from None
    if not isinstance(message, dict):
        raise ProtocolError("sidecar message is not a map")
    version = message.get("v")
    if type(version) is not int or version != VERSION:
        raise ProtocolError("sidecar speaks protocol version %s" % (repr(version)[:20],))
    kind = message.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("sidecar message without a type")
    if kind in ("welcome", "ack"):
        ack = message.get("ack")
        if type(ack) is not int or ack < 0:
            raise ProtocolError("%s.ack is not a non-negative integer" % kind)
    if kind == "welcome":
        resume = message.get("resume")
        if resume is not None and (type(resume) is not str or not _RESUME.match(resume)):
            raise ProtocolError("welcome.resume is not 32 lowercase hex digits")
        beat = message.get("heartbeat_ms")
        if beat is not None and (type(beat) is not int or not 100 <= beat <= 60000):
            raise ProtocolError("welcome.heartbeat_ms is not an integer from 100 to 60000")
        capture = message.get("capture")
        if capture is not None and not isinstance(capture, dict):
            raise ProtocolError("welcome.capture is not a map")
    if kind in ("welcome", "watch"):
        watched = message.get("watched")
        if (watched is not None or kind == "watch") and type(watched) is not bool:
            raise ProtocolError("%s.watched is not true or false" % kind)
    if kind in ("capture", "profile"):
        request = message.get("id")
        if type(request) is not int or request < 0:
            raise ProtocolError("%s.id is not a non-negative integer" % kind)
    if kind == "profile":
        for key in ("steps", "max_bytes", "chunk_bytes"):
            value = message.get(key)
            if type(value) is not int or value < 1:
                raise ProtocolError("profile.%s is not a positive integer" % key)
    return message
