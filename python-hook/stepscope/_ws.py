"""A minimal RFC 6455 websocket client over ``socket`` (``ws://``, and ``wss://`` via ``ssl``).

Only what the hook needs: the opening handshake, masked binary frames out, and reading
server frames (fragmented messages, ping -> pong, close). Reads never block when done
through :meth:`WebSocket.poll`; writes block for at most the socket timeout.
"""

from __future__ import annotations

import base64
import encodings.idna  # noqa: F401  (imported here: a first import from a thread of a forked child can fail)
import hashlib
import math
import os
import re
import select
import socket
import struct
import threading
import time
from urllib.parse import urlsplit

__all__ = [
    "WebSocket",
    "WebSocketError",
    "HandshakeError",
    "ResolveError",
    "BadURL",
    "ConnectionClosed",
    "check_url",
    "FrameParser",
    "encode_frame",
    "OP_CONT",
    "OP_TEXT",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_PING",
    "OP_PONG",
]

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_MAX_HEADER_BYTES = 65536
_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

_H16 = struct.Struct(">BBH")
_H64 = struct.Struct(">BBQ")
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class WebSocketError(Exception):
    pass


class HandshakeError(WebSocketError):
    """The upgrade failed; ``status`` is the HTTP status the server answered with, if it answered."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


class ResolveError(WebSocketError):
    """The URL's host name could not be resolved (DNS); it may resolve later."""

    def __init__(self, host, error):
        self.host = host
        self.error = error
        super().__init__("cannot resolve host %r: %s" % (host, error))


class BadURL(WebSocketError):
    """A URL that no retry can make work (scheme, host, port, syntax)."""


ACCEPTED_URLS = "ws://HOST[:PORT][/PATH] or wss://HOST[:PORT][/PATH]"


def check_url(url):
    """``(scheme, host, port, path)`` of a websocket URL, or :class:`BadURL` saying what is wrong."""
    if not isinstance(url, str):
        raise BadURL("not a string but %s" % type(url).__name__)
    bad = [c for c in url if c.isspace() or ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0]
    if bad:
        raise BadURL("it contains %s" % ("whitespace" if bad[0].isspace() else "a control character"))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Port out of range 0-65535", "Invalid IPv6 URL", ...
        raise BadURL(str(exc)) from None
    scheme = parts.scheme.lower()
    if "://" not in url:
        raise BadURL("it has no scheme")
    if scheme not in ("ws", "wss"):
        raise BadURL("unsupported scheme %r" % parts.scheme)
    if parts.username is not None or parts.password is not None:
        raise BadURL("credentials in the URL are not supported (use STEPSCOPE_TOKEN)")
    host = parts.hostname
    if not host:
        raise BadURL("it has no host")
    if ":" not in host:  # not an IPv6 literal: a name must be one DNS could ever resolve
        try:
            host.encode("idna")
        except UnicodeError:
            raise BadURL("%r is not a valid host name" % host) from None
    if port == 0:
        raise BadURL("port 0")
    if parts.fragment or url.endswith("#"):
        raise BadURL("a websocket URL has no #fragment")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port or (443 if scheme == "wss" else 80), path


def redact_url(url):
    """``url`` with any password replaced, for messages."""
    try:
        return re.sub(r"^([^/?#]*//[^/?#@:]*:)[^/?#@]*@", r"\1***@", str(url))
    except Exception:
        return "<unprintable URL>"


# --- sockets and fork ---------------------------------------------------------
#
# Every socket the hook opens is listed here (by descriptor) from its creation to its close, under
# a lock that a fork waits for (briefly). A forked child -- a DataLoader worker -- must not keep the
# training process's connection open: the sidecar would see it end only when the last worker exits.
# In the child each listed descriptor is pointed at /dev/null (dup2), which drops the child's hold on
# the connection without a byte sent (the parent still uses it) and leaves no number free to reuse
# while Python objects that think they own it are still alive. Sockets are created non-inheritable
# (Python's default, PEP 446), so exec'd children never get them.

_fd_lock = threading.Lock()
_open_sockets = {}  # descriptor -> the socket object that owns it (held, so that no GC closes it unlisted)
_fork_held = False


def _new_socket(family, kind, proto):
    with _fd_lock:
        sock = socket.socket(family, kind, proto)
        _open_sockets[sock.fileno()] = sock
    return sock


def _wrap_tls(sock, host: str):
    """The TLS socket over ``sock`` (same descriptor, listed in its place); no handshake yet."""
    import ssl

    context = ssl.create_default_context()
    fd = sock.fileno()
    with _fd_lock:  # wrap_socket closes the descriptor itself when it fails: never while it is listed
        try:
            tls = context.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        except BaseException:
            _open_sockets.pop(fd, None)
            try:
                sock.close()
            except (OSError, ValueError):
                pass
            raise
        _open_sockets[fd] = tls
    return tls


def _close_socket(sock) -> None:
    with _fd_lock:
        try:
            fd = sock.fileno()
        except (OSError, ValueError):
            fd = -1
        if _open_sockets.get(fd) is sock:
            del _open_sockets[fd]
        try:
            sock.close()
        except (OSError, ValueError):
            pass


def open_fds():
    """Descriptors of the hook's open sockets (tests)."""
    with _fd_lock:
        return set(_open_sockets)


def _before_fork() -> None:
    global _fork_held
    # Bounded: a fork is never held up for long, even by a bug.
    _fork_held = _fd_lock.acquire(timeout=0.1)


def _after_fork_in_parent() -> None:
    global _fork_held
    if _fork_held:
        _fork_held = False
        _fd_lock.release()


def _after_fork_in_child() -> None:
    global _fd_lock, _fork_held, _keys_lock
    _fd_lock = threading.Lock()
    _fork_held = False
    _keys_lock = threading.Lock()
    _keys.clear()  # the parent's next keys are not the child's
    if _open_sockets:
        _detach_in_child(list(_open_sockets))
    # Whatever still holds these objects in the child now holds /dev/null; closing them is harmless.
    _open_sockets.clear()


def _detach_in_child(fds) -> None:
    spare = []
    try:
        null = os.open(os.devnull, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        try:  # no /dev/null here: any descriptor that is not the socket will do
            null, other = os.pipe()
            spare.append(other)
        except OSError:
            return
    spare.append(null)
    for fd in fds:
        try:
            os.dup2(null, fd, inheritable=False)
        except OSError:
            pass
    for fd in spare:
        try:
            os.close(fd)
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


class ConnectionClosed(WebSocketError):
    """The peer closed the connection (``code`` is None when the TCP stream just ended)."""

    def __init__(self, code=None, reason=""):
        self.code = code
        self.reason = reason
        super().__init__("connection closed" + ("" if code is None else " (%d %s)" % (code, reason)).rstrip())


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")


def mask_payload(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    if not n:
        return b""
    # One big-int XOR is far quicker in CPython than a per-byte loop.
    repeated = (mask * ((n + 3) // 4))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")).to_bytes(n, "little")


def encode_frame(opcode: int, payload: bytes, *, mask: bool = True, fin: bool = True) -> bytes:
    first = (0x80 if fin else 0) | opcode
    n = len(payload)
    mask_bit = 0x80 if mask else 0
    if n < 126:
        header = bytes((first, mask_bit | n))
    elif n < 0x10000:
        header = _H16.pack(first, mask_bit | 126, n)
    else:
        header = _H64.pack(first, mask_bit | 127, n)
    if not mask:
        return header + payload
    key = _mask_key()
    return header + key + mask_payload(payload, key)


# Masking keys come from os.urandom, as RFC 6455 asks, drawn 1,024 at a time: one getrandom
# call per frame was one of the few system calls of each of the sender's wakes.
_KEYS_AT_ONCE = 1024
_keys = []
_keys_lock = threading.Lock()


def _mask_key() -> bytes:
    with _keys_lock:
        if not _keys:
            block = os.urandom(4 * _KEYS_AT_ONCE)
            _keys.extend(block[i : i + 4] for i in range(0, len(block), 4))
        return _keys.pop()


class FrameParser:
    """Incremental parser of server frames; yields ``(fin, opcode, payload)``."""

    def __init__(self, *, expect_masked: bool = False):
        self._buf = bytearray()
        self._expect_masked = expect_masked

    def feed(self, data: bytes) -> None:
        self._buf += data

    def frames(self):
        buf = self._buf
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]
            if b0 & 0x70:
                raise WebSocketError("reserved bits set (no extension was negotiated)")
            masked = bool(b1 & 0x80)
            if masked != self._expect_masked:
                raise WebSocketError("unexpected frame masking")
            n = b1 & 0x7F
            pos = 2
            if n == 126:
                if len(buf) < 4:
                    return
                n = _U16.unpack_from(buf, 2)[0]
                pos = 4
            elif n == 127:
                if len(buf) < 10:
                    return
                n = _U64.unpack_from(buf, 2)[0]
                pos = 10
            if n > _MAX_MESSAGE_BYTES:
                raise WebSocketError("frame too large (%d bytes)" % n)
            key = b""
            if masked:
                if len(buf) < pos + 4:
                    return
                key = bytes(buf[pos : pos + 4])
                pos += 4
            if len(buf) < pos + n:
                return
            payload = bytes(buf[pos : pos + n])
            del buf[: pos + n]
            if masked:
                payload = mask_payload(payload, key)
            yield bool(b0 & 0x80), b0 & 0x0F, payload


class WebSocket:
    """A connected client websocket. Not thread-safe except that sends are serialised."""

    def __init__(self, sock: socket.socket, leftover: bytes = b""):
        self._sock = sock
        self._parser = FrameParser()
        self._parser.feed(leftover)
        self._send_lock = threading.Lock()
        self._fragments = []
        self._fragment_opcode = None
        self._fragment_bytes = 0
        self._closed = False
        self._forgotten = False
        self._error = None
        self._poller = None
        if hasattr(select, "poll"):
            self._poller = select.poll()
            self._poller.register(sock, select.POLLIN)

    @classmethod
    def connect(cls, url: str, *, headers=None, timeout: float = 5.0) -> "WebSocket":
        scheme, host, port, path = check_url(url)
        sock = _connect_tcp(host, port, timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "wss":
                sock = _wrap_tls(sock, host)
                sock.do_handshake()
            host_header = "[%s]" % host if ":" in host else host
            if urlsplit(url).port is not None:
                host_header += ":%d" % port
            leftover = _handshake(sock, host_header, path, headers or {})
            return cls(sock, leftover)
        except BaseException:
            _close_socket(sock)
            raise

    def set_timeout(self, timeout: float) -> None:
        """Bound blocking sends (reads go through poll/recv and never wait longer than asked)."""
        self._sock.settimeout(timeout)

    def send_binary(self, payload: bytes) -> None:
        self._send(OP_BINARY, payload)

    def _send(self, opcode: int, payload: bytes) -> None:
        if self._closed:
            raise ConnectionClosed()
        frame = encode_frame(opcode, payload)
        try:
            with self._send_lock:
                self._sock.sendall(frame)
        except OSError:
            self._abort()
            raise

    def poll(self) -> list:
        """Return the complete ``(opcode, payload)`` messages that arrived, without blocking.

        Messages that arrived before a close are returned first; the next call raises
        :class:`ConnectionClosed`.
        """
        messages = self._drain_frames()
        while self._error is None and self._readable(0.0):
            self._read_some()
            messages.extend(self._drain_frames())
        if not messages and self._error is not None:
            raise self._error
        return messages

    def recv(self, timeout: float):
        """Block up to ``timeout`` seconds for one message; None on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            messages = self._drain_frames(limit=1)
            if messages:
                return messages[0]
            if self._error is not None:
                raise self._error
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._readable(remaining):
                return None
            self._read_some()

    def wait_readable(self, timeout: float) -> bool:
        return self._readable(timeout)

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame (best effort) and release the socket; never raises."""
        if self._closed or self._forgotten:
            return
        try:
            payload = _U16.pack(code) + reason.encode("utf-8")[:123]
            with self._send_lock:
                self._sock.sendall(encode_frame(OP_CLOSE, payload))
        except (OSError, ValueError):
            pass
        self._abort()

    def _abort(self) -> None:
        if self._forgotten:
            return
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError):
            pass
        _close_socket(self._sock)

    def forget_after_fork(self) -> None:
        """In a forked child: never touch this connection again (it is the parent's).

        The descriptor was already pointed away by the fork handler; nothing is sent or shut down.
        """
        self._forgotten = True
        self._closed = True
        self._send_lock = threading.Lock()  # the parent's sender may have held it at the fork
        self._poller = None

    def fileno(self) -> int:
        return self._sock.fileno()

    def _readable(self, timeout: float) -> bool:
        pending = getattr(self._sock, "pending", None)
        if pending is not None and pending():
            return True
        try:
            if self._poller is not None:
                # poll() rather than select(): training processes can hold > 1024 descriptors.
                return bool(self._poller.poll(max(0, math.ceil(timeout * 1000))))
            return bool(select.select([self._sock], [], [], timeout)[0])
        except (OSError, ValueError):
            self._error = self._error or ConnectionClosed()
            self._abort()
            raise self._error from None

    def _read_some(self) -> None:
        try:
            data = self._sock.recv(65536)
        except socket.timeout:
            return
        except OSError:
            data = b""
        if not data:
            self._error = ConnectionClosed()
            self._abort()
            return
        self._parser.feed(data)

    def _drain_frames(self, limit: int = 0) -> list:
        messages = []
        if self._closed and self._error is None:
            self._error = ConnectionClosed()
        try:
            for fin, opcode, payload in self._parser.frames():
                message = self._on_frame(fin, opcode, payload)
                if message is not None:
                    messages.append(message)
                    if limit and len(messages) >= limit:
                        break
        except ConnectionClosed as exc:
            self._error = exc
        return messages

    def _on_frame(self, fin: bool, opcode: int, payload: bytes):
        if opcode >= 0x8:
            if not fin or len(payload) > 125:
                raise WebSocketError("invalid control frame")
            if opcode == OP_PING:
                self._send(OP_PONG, payload)
            elif opcode == OP_CLOSE:
                code = _U16.unpack_from(payload)[0] if len(payload) >= 2 else 1005
                reason = payload[2:].decode("utf-8", "replace")
                self.close(code if code not in (1005, 1006, 1015) else 1000)
                raise ConnectionClosed(code, reason)
            elif opcode != OP_PONG:
                raise WebSocketError("unknown control opcode %d" % opcode)
            return None
        if opcode == OP_CONT:
            if self._fragment_opcode is None:
                raise WebSocketError("continuation frame without a message")
        elif opcode in (OP_TEXT, OP_BINARY):
            if self._fragment_opcode is not None:
                raise WebSocketError("new message inside a fragmented one")
            self._fragment_opcode = opcode
        else:
            raise WebSocketError("unknown opcode %d" % opcode)
        self._fragment_bytes += len(payload)
        if self._fragment_bytes > _MAX_MESSAGE_BYTES:
            raise WebSocketError("message too large")
        self._fragments.append(payload)
        if not fin:
            return None
        message = (self._fragment_opcode, b"".join(self._fragments))
        self._fragments = []
        self._fragment_opcode = None
        self._fragment_bytes = 0
        return message


_resolve = socket.getaddrinfo  # a module global, so that tests can stand in for DNS


def _connect_tcp(host: str, port: int, timeout: float):
    """Like ``socket.create_connection``, with every socket listed from its creation (see above)."""
    try:
        infos = _resolve(host, port, 0, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ResolveError(host, exc) from None
    error = None
    for family, kind, proto, _, address in infos:
        sock = None
        try:
            sock = _new_socket(family, kind, proto)
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            error = exc
            if sock is not None:
                _close_socket(sock)
    raise error if error is not None else OSError("getaddrinfo returned nothing for %r" % host)


def _handshake(sock, host_header: str, path: str, headers: dict) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    lines = [
        "GET %s HTTP/1.1" % path,
        "Host: %s" % host_header,
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: %s" % key,
        "Sec-WebSocket-Version: 13",
    ]
    for name, value in headers.items():
        if "\r" in name + value or "\n" in name + value:
            raise HandshakeError("invalid header %r" % name)
        lines.append("%s: %s" % (name, value))
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    response = bytearray()
    while True:
        end = response.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(response) > _MAX_HEADER_BYTES:
            raise HandshakeError("handshake response too large")
        chunk = sock.recv(4096)
        if not chunk:
            raise HandshakeError("connection closed during handshake")
        response += chunk
    head = bytes(response[:end]).decode("latin-1")
    leftover = bytes(response[end + 4 :])
    status_line, _, header_block = head.partition("\r\n")
    fields = status_line.split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/"):
        raise HandshakeError("malformed handshake response: %r" % status_line[:80])
    if fields[1] != "101":
        status = int(fields[1]) if fields[1].isdigit() and len(fields[1]) == 3 else None
        raise HandshakeError("handshake refused: %s" % status_line[:80].strip(), status)
    received = {}
    for line in header_block.split("\r\n"):
        name, sep, value = line.partition(":")
        if sep:
            received[name.strip().lower()] = value.strip()
    if received.get("upgrade", "").lower() != "websocket":
        raise HandshakeError("handshake response lacks 'Upgrade: websocket'")
    tokens = [t.strip().lower() for t in received.get("connection", "").split(",")]
    if "upgrade" not in tokens:
        raise HandshakeError("handshake response lacks 'Connection: Upgrade'")
    if received.get("sec-websocket-accept") != accept_key(key):
        raise HandshakeError("bad Sec-WebSocket-Accept")
    if received.get("sec-websocket-extensions"):
        raise HandshakeError("server negotiated an extension that was not offered")
    return leftover
