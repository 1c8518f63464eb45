"""A tiny stdlib websocket server that plays the sidecar's side of protocol version 1.

It keeps what it stored in a :class:`Store` that outlives the server, so a test can stop
the "sidecar" and start another on the same port holding the same records, as a sidecar
restarted on the same ``--out`` would.
"""

from __future__ import annotations

import re
import secrets
import socket
import struct
import threading
import time

from stepscope import _msgpack
from stepscope._ws import OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, FrameParser, accept_key, encode_frame


def wait_until(predicate, timeout=5.0, interval=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


class Store:
    """Rows held per session, as the sidecar's journal would, and each session's owner and secret."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows = {}  # session -> {seq: row dict}
        self.owners = {}  # session -> (job, rank, resume secret)
        self.duplicates = 0

    def claim(self, hello):
        """The resume secret for this hello's session, or a refusal reason (as the sidecar's 1008).

        A session new to the store (or held without a secret: rows put there by a test, as a
        sidecar restarted without its journal would hold none) is given a fresh secret.
        """
        session, presented = hello["session"], hello.get("resume")
        with self.lock:
            owner = self.owners.get(session)
            if owner is not None:
                job, rank, secret = owner
                if (job, rank) != (hello.get("job"), hello.get("rank")):
                    return None, "hello: session %s belongs to another job or rank" % session
                if presented != secret:
                    return None, "hello: session %s is already held: resuming it needs its secret" % session
                return secret, None
            secret = secrets.token_hex(16)
            self.owners[session] = (hello.get("job"), hello.get("rank"), secret)
            return secret, None

    def max_seq(self, session):
        with self.lock:
            held = self.rows.get(session)
            return max(held) if held else 0

    def add(self, session, fields, rows):
        with self.lock:
            held = self.rows.setdefault(session, {})
            top = max(held) if held else 0
            for row in rows:
                record = dict(zip(fields, row))
                if record["seq"] <= top:
                    self.duplicates += 1
                    continue
                held[record["seq"]] = record
                top = record["seq"]
            return top

    def seqs(self, session=None):
        with self.lock:
            if session is None:
                return sorted(seq for held in self.rows.values() for seq in held)
            return sorted(self.rows.get(session, {}))

    def records(self, session=None):
        with self.lock:
            sessions = [session] if session is not None else list(self.rows)
            return [self.rows[s][q] for s in sessions if s in self.rows for q in sorted(self.rows[s])]


class FakeSidecar:
    """Accepts hook connections on 127.0.0.1; every received message lands in ``messages``.

    token            require ``Authorization: Bearer <token>`` (401 otherwise)
    ack              "auto" (ack each steps frame and the end), or "none" (never ack)
    fragment_acks    send each ack as two fragments with a ping between them
    close_after_rows abort a connection, without acking, once it carried that many rows
    max_rows_per_frame  close with 1009 (frame too big) on a steps frame with more rows
    counters         the `counters` map of `welcome` (what the hook should forward), or None
    refuse_hello     (code, reason): answer every hello by closing with them (e.g. 1008 "hello: too many ranks")
    http_status      answer every upgrade with this HTTP status (e.g. 403) instead of 101
    resume           hand out a resume secret in `welcome` and require it to resume a session (True),
                     or behave as a sidecar from before secrets (False: no `resume`, nothing checked)
    welcome          more fields of `welcome` (e.g. heartbeat_ms, capture), as a sidecar that knows them sends

    ``ended`` lists ``(session, time.monotonic())`` for every connection whose TCP stream ended.
    """

    def __init__(
        self,
        port=0,
        *,
        store=None,
        token=None,
        ack="auto",
        fragment_acks=False,
        close_after_rows=None,
        max_rows_per_frame=None,
        counters=None,
        refuse_hello=None,
        http_status=None,
        resume=True,
        welcome=None,
    ):
        self.store = store if store is not None else Store()
        self.refuse_hello = refuse_hello
        self.http_status = http_status
        self.resume = resume
        self.welcome = dict(welcome or {})
        self.ended = []
        self.refusals = []
        self.token = token
        self.ack = ack
        self.fragment_acks = fragment_acks
        self.close_after_rows = close_after_rows
        self.max_rows_per_frame = max_rows_per_frame
        self.counters = counters
        self.messages = []
        self.request_headers = []
        self.pongs = []
        self.connections = 0
        self._lock = threading.Lock()
        self._conns = []
        self._stopped = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self.url = "ws://127.0.0.1:%d/v1/ingest" % self.port
        threading.Thread(target=self._accept_loop, daemon=True).start()

    # --- test helpers --------------------------------------------------------

    def of_type(self, kind):
        with self._lock:
            return [m for m in self.messages if m.get("type") == kind]

    def rows(self):
        """Every row received (duplicates included), as dicts, in arrival order."""
        return [dict(zip(m["fields"], row)) for m in self.of_type("steps") for row in m["rows"]]

    def send_all(self, message, opcode=OP_BINARY):
        payload = _msgpack.packb(message) if opcode == OP_BINARY else message
        for conn in list(self._conns):
            conn.send(opcode, payload)

    def ping_all(self, payload=b"hi"):
        for conn in list(self._conns):
            conn.send(OP_PING, payload)

    def close_all(self, code=None, reason=""):
        """Close open connections: with a close frame if ``code`` is given, else abruptly."""
        for conn in list(self._conns):
            if code is not None:
                conn.send(OP_CLOSE, struct.pack(">H", code) + reason.encode())
            conn.abort()

    def stop(self):
        self._stopped = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() so the port is free now
        except OSError:
            pass
        self._listener.close()
        self.close_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # --- server ----------------------------------------------------------------

    def _accept_loop(self):
        while not self._stopped:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            conn = _Connection(self, sock)
            with self._lock:
                self.connections += 1
                self._conns.append(conn)
            threading.Thread(target=conn.run, daemon=True).start()

    def _record(self, message):
        with self._lock:
            self.messages.append(message)


class _Connection:
    def __init__(self, server, sock):
        self.server = server
        self.sock = sock
        self.parser = FrameParser(expect_masked=True)
        self.send_lock = threading.Lock()
        self.session = None
        self.rows = 0
        self.fragments = []

    def send(self, opcode, payload, fin=True):
        try:
            with self.send_lock:
                self.sock.sendall(encode_frame(opcode, payload, mask=False, fin=fin))
        except OSError:
            pass

    def abort(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def run(self):
        try:
            if self._handshake():
                self._serve()
        except (OSError, ValueError):
            pass
        finally:
            self.abort()
            with self.server._lock:
                self.server.ended.append((self.session, time.monotonic()))
                if self in self.server._conns:
                    self.server._conns.remove(self)

    def _handshake(self):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(4096)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        with self.server._lock:
            self.server.request_headers.append(headers)
        token = self.server.token
        if token is not None and headers.get("authorization") != "Bearer " + token:
            self.sock.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")
            return False
        if self.server.http_status is not None:
            self.sock.sendall(b"HTTP/1.1 %d Refused\r\nContent-Length: 0\r\n\r\n" % self.server.http_status)
            return False
        response = (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Accept: %s\r\n\r\n" % accept_key(headers["sec-websocket-key"])
        )
        self.sock.sendall(response.encode("latin-1"))
        self.parser.feed(rest)
        return True

    def _serve(self):
        while True:
            for fin, opcode, payload in self.parser.frames():
                if opcode == OP_CLOSE:
                    self.send(OP_CLOSE, payload[:2])
                    return
                if opcode == OP_PING:
                    self.send(OP_PONG, payload)
                    continue
                if opcode == OP_PONG:
                    self.server.pongs.append(payload)
                    continue
                self.fragments.append(payload)
                if not fin:
                    continue
                message, self.fragments = b"".join(self.fragments), []
                if opcode == OP_TEXT or (opcode == OP_CONT and not message):
                    self.send(OP_CLOSE, struct.pack(">H", 1003))
                    return
                if not self._on_message(_msgpack.unpackb(message)):
                    return
            chunk = self.sock.recv(65536)
            if not chunk:
                return
            self.parser.feed(chunk)

    def _on_message(self, message):
        server = self.server
        server._record(message)
        kind = message.get("type")
        if kind == "hello":
            if server.refuse_hello is not None:
                code, reason = server.refuse_hello
                return self._refuse(code, reason)
            acked, resume = message.get("acked"), message.get("resume")
            if acked is not None and (type(acked) is not int or acked < 0):  # optional, as in the sidecar
                return self._refuse(1007, "hello.acked: must be a non-negative integer")
            if resume is not None and not (isinstance(resume, str) and re.fullmatch(r"[0-9a-f]{32}", resume)):
                return self._refuse(1007, "hello.resume: must be 32 lowercase hex digits")
            self.session = message["session"]
            welcome = {"v": 1, "type": "welcome", "session": self.session, "ack": server.store.max_seq(self.session)}
            if server.resume:
                secret, refusal = server.store.claim(message)
                if refusal is not None:
                    return self._refuse(1008, refusal)
                welcome["resume"] = secret
            if server.counters is not None:
                welcome["counters"] = server.counters
            welcome.update(server.welcome)
            self._reply(welcome)
        elif kind == "steps":
            if server.max_rows_per_frame is not None and len(message["rows"]) > server.max_rows_per_frame:
                self.send(OP_CLOSE, struct.pack(">H", 1009) + b"frame too big")
                return False
            self.rows += len(message["rows"])
            if server.close_after_rows is not None and self.rows >= server.close_after_rows:
                # Crash before storing or acking this frame.
                return False
            top = server.store.add(self.session, message["fields"], message["rows"])
            if server.ack == "auto":
                self._reply({"v": 1, "type": "ack", "ack": top})
        elif kind == "end" and server.ack == "auto":
            self._reply({"v": 1, "type": "ack", "ack": server.store.max_seq(self.session), "end": True})
        return True

    def _refuse(self, code, reason):
        with self.server._lock:
            self.server.refusals.append((code, reason))
        self.send(OP_CLOSE, struct.pack(">H", code) + reason.encode())
        return False

    def _reply(self, message):
        payload = _msgpack.packb(message)
        if self.server.fragment_acks and len(payload) > 1:
            half = len(payload) // 2
            self.send(OP_BINARY, payload[:half], fin=False)
            self.send(OP_PING, b"mid")
            self.send(OP_CONT, payload[half:], fin=True)
        else:
            self.send(OP_BINARY, payload)
