"""A small msgpack encoder and decoder (standard library only).

The encoder picks the same (smallest) formats as the ``msgpack`` package with its
defaults (``use_bin_type=True``, float64), so both produce identical bytes.
Extension types are not supported: the stepscope protocol never uses them.
"""

from __future__ import annotations

import struct

__all__ = ["packb", "pack_into", "array_header", "map_header", "unpackb", "PackError", "UnpackError"]


class PackError(ValueError):
    pass


class UnpackError(ValueError):
    pass


_u8 = struct.Struct(">BB").pack
_u16 = struct.Struct(">BH").pack
_u32 = struct.Struct(">BI").pack
_u64 = struct.Struct(">BQ").pack
_i8 = struct.Struct(">Bb").pack
_i16 = struct.Struct(">Bh").pack
_i32 = struct.Struct(">Bi").pack
_i64 = struct.Struct(">Bq").pack
_f64 = struct.Struct(">Bd").pack


def pack_into(out: bytearray, obj) -> None:
    """Append the msgpack encoding of ``obj`` to ``out``."""
    t = type(obj)
    if t is int:
        if 0 <= obj < 0x80:
            out.append(obj)
        else:
            out += _pack_int(obj)
    elif obj is None:
        out.append(0xC0)
    elif t is str:
        _pack_str(out, obj)
    elif t is list or t is tuple:
        _pack_array_header(out, len(obj))
        for item in obj:
            pack_into(out, item)
    elif t is dict:
        _pack_map_header(out, len(obj))
        for key, value in obj.items():
            pack_into(out, key)
            pack_into(out, value)
    elif t is bool:
        out.append(0xC3 if obj else 0xC2)
    elif t is float:
        out += _f64(0xCB, obj)
    elif t is bytes or t is bytearray or t is memoryview:
        _pack_bin(out, bytes(obj))
    elif isinstance(obj, bool):
        out.append(0xC3 if obj else 0xC2)
    elif isinstance(obj, int):
        pack_into(out, int(obj))
    elif isinstance(obj, float):
        out += _f64(0xCB, float(obj))
    elif isinstance(obj, str):
        _pack_str(out, str(obj))
    elif isinstance(obj, (list, tuple)):
        pack_into(out, list(obj))
    elif isinstance(obj, dict):
        pack_into(out, dict(obj))
    else:
        raise PackError("cannot pack %s" % t.__name__)


def packb(obj) -> bytes:
    out = bytearray()
    pack_into(out, obj)
    return bytes(out)


def _pack_int(v: int) -> bytes:
    if v >= 0:
        if v < 0x80:
            return bytes((v,))
        if v < 0x100:
            return _u8(0xCC, v)
        if v < 0x10000:
            return _u16(0xCD, v)
        if v < 0x100000000:
            return _u32(0xCE, v)
        if v < 0x10000000000000000:
            return _u64(0xCF, v)
    else:
        if v >= -0x20:
            return bytes((v & 0xFF,))
        if v >= -0x80:
            return _i8(0xD0, v)
        if v >= -0x8000:
            return _i16(0xD1, v)
        if v >= -0x80000000:
            return _i32(0xD2, v)
        if v >= -0x8000000000000000:
            return _i64(0xD3, v)
    raise PackError("integer out of msgpack range: %d" % v)


def _pack_str(out: bytearray, s: str) -> None:
    data = s.encode("utf-8")
    n = len(data)
    if n < 32:
        out.append(0xA0 | n)
    elif n < 0x100:
        out += _u8(0xD9, n)
    elif n < 0x10000:
        out += _u16(0xDA, n)
    elif n < 0x100000000:
        out += _u32(0xDB, n)
    else:
        raise PackError("string too long")
    out += data


def _pack_bin(out: bytearray, data: bytes) -> None:
    n = len(data)
    if n < 0x100:
        out += _u8(0xC4, n)
    elif n < 0x10000:
        out += _u16(0xC5, n)
    elif n < 0x100000000:
        out += _u32(0xC6, n)
    else:
        raise PackError("bytes too long")
    out += data


def _pack_array_header(out: bytearray, n: int) -> None:
    if n < 16:
        out.append(0x90 | n)
    elif n < 0x10000:
        out += _u16(0xDC, n)
    elif n < 0x100000000:
        out += _u32(0xDD, n)
    else:
        raise PackError("array too long")


def _pack_map_header(out: bytearray, n: int) -> None:
    if n < 16:
        out.append(0x80 | n)
    elif n < 0x10000:
        out += _u16(0xDE, n)
    elif n < 0x100000000:
        out += _u32(0xDF, n)
    else:
        raise PackError("map too long")


def array_header(n: int) -> bytes:
    out = bytearray()
    _pack_array_header(out, n)
    return bytes(out)


def map_header(n: int) -> bytes:
    out = bytearray()
    _pack_map_header(out, n)
    return bytes(out)


# --- decoding ---------------------------------------------------------------

_S_U16 = struct.Struct(">H").unpack_from
_S_U32 = struct.Struct(">I").unpack_from
_S_U64 = struct.Struct(">Q").unpack_from
_S_I8 = struct.Struct(">b").unpack_from
_S_I16 = struct.Struct(">h").unpack_from
_S_I32 = struct.Struct(">i").unpack_from
_S_I64 = struct.Struct(">q").unpack_from
_S_F32 = struct.Struct(">f").unpack_from
_S_F64 = struct.Struct(">d").unpack_from

_MAX_DEPTH = 64


def unpackb(data) -> object:
    """Decode exactly one msgpack value; trailing bytes are an error."""
    buf = bytes(data)
    try:
        value, pos = _unpack(buf, 0, 0)
    except (IndexError, struct.error):
        raise UnpackError("truncated msgpack data") from None
    if pos != len(buf):
        raise UnpackError("%d trailing bytes after msgpack value" % (len(buf) - pos))
    return value


def _take(buf: bytes, pos: int, n: int):
    end = pos + n
    if end > len(buf):
        raise UnpackError("truncated msgpack data")
    return buf[pos:end], end


def _unpack(buf: bytes, pos: int, depth: int):
    if depth > _MAX_DEPTH:
        raise UnpackError("msgpack nesting too deep")
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if 0xA0 <= b <= 0xBF:
        raw, pos = _take(buf, pos, b & 0x1F)
        return _decode_str(raw), pos
    if 0x90 <= b <= 0x9F:
        return _unpack_array(buf, pos, b & 0x0F, depth)
    if 0x80 <= b <= 0x8F:
        return _unpack_map(buf, pos, b & 0x0F, depth)
    if b == 0xC0:
        return None, pos
    if b == 0xC2:
        return False, pos
    if b == 0xC3:
        return True, pos
    if b == 0xCC:
        return buf[pos], pos + 1
    if b == 0xCD:
        return _S_U16(buf, pos)[0], pos + 2
    if b == 0xCE:
        return _S_U32(buf, pos)[0], pos + 4
    if b == 0xCF:
        return _S_U64(buf, pos)[0], pos + 8
    if b == 0xD0:
        return _S_I8(buf, pos)[0], pos + 1
    if b == 0xD1:
        return _S_I16(buf, pos)[0], pos + 2
    if b == 0xD2:
        return _S_I32(buf, pos)[0], pos + 4
    if b == 0xD3:
        return _S_I64(buf, pos)[0], pos + 8
    if b == 0xCA:
        return _S_F32(buf, pos)[0], pos + 4
    if b == 0xCB:
        return _S_F64(buf, pos)[0], pos + 8
    if b == 0xD9:
        raw, pos = _take(buf, pos + 1, buf[pos])
        return _decode_str(raw), pos
    if b == 0xDA:
        raw, pos = _take(buf, pos + 2, _S_U16(buf, pos)[0])
        return _decode_str(raw), pos
    if b == 0xDB:
        raw, pos = _take(buf, pos + 4, _S_U32(buf, pos)[0])
        return _decode_str(raw), pos
    if b == 0xC4:
        return _take(buf, pos + 1, buf[pos])
    if b == 0xC5:
        return _take(buf, pos + 2, _S_U16(buf, pos)[0])
    if b == 0xC6:
        return _take(buf, pos + 4, _S_U32(buf, pos)[0])
    if b == 0xDC:
        return _unpack_array(buf, pos + 2, _S_U16(buf, pos)[0], depth)
    if b == 0xDD:
        return _unpack_array(buf, pos + 4, _S_U32(buf, pos)[0], depth)
    if b == 0xDE:
        return _unpack_map(buf, pos + 2, _S_U16(buf, pos)[0], depth)
    if b == 0xDF:
        return _unpack_map(buf, pos + 4, _S_U32(buf, pos)[0], depth)
    raise UnpackError("unsupported msgpack type byte 0x%02x" % b)


def _decode_str(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnpackError("invalid UTF-8 in msgpack string") from None


def _unpack_array(buf: bytes, pos: int, n: int, depth: int):
    if n > len(buf) - pos:
        raise UnpackError("truncated msgpack array")
    items = []
    for _ in range(n):
        item, pos = _unpack(buf, pos, depth + 1)
        items.append(item)
    return items, pos


def _unpack_map(buf: bytes, pos: int, n: int, depth: int):
    if 2 * n > len(buf) - pos:
        raise UnpackError("truncated msgpack map")
    result = {}
    for _ in range(n):
        key, pos = _unpack(buf, pos, depth + 1)
        if isinstance(key, (list, dict)):
            raise UnpackError("unhashable msgpack map key")
        value, pos = _unpack(buf, pos, depth + 1)
        result[key] = value
    return result, pos
