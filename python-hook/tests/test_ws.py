import os
import socket
import struct
import threading
import unittest

from stepscope import _msgpack, _ws
from stepscope._ws import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_TEXT,
    BadURL,
    ConnectionClosed,
    FrameParser,
    HandshakeError,
    WebSocket,
    WebSocketError,
    encode_frame,
    mask_payload,
)

from .fake_sidecar import FakeSidecar, wait_until


def _naive_mask(payload, key):
    return bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class FramingTest(unittest.TestCase):
    def test_mask_matches_naive_xor(self):
        for n in (0, 1, 3, 4, 5, 125, 126, 1000, 65537):
            payload = os.urandom(n)
            key = os.urandom(4)
            with self.subTest(n=n):
                self.assertEqual(mask_payload(payload, key), _naive_mask(payload, key))

    def test_client_frames_are_masked_and_parse_back(self):
        for n in (0, 125, 126, 65535, 65536, 200000):
            payload = os.urandom(n)
            frame = encode_frame(OP_BINARY, payload)
            self.assertEqual(frame[0], 0x80 | OP_BINARY)
            self.assertTrue(frame[1] & 0x80, "client frames must be masked")
            parser = FrameParser(expect_masked=True)
            parser.feed(frame)
            with self.subTest(n=n):
                self.assertEqual(list(parser.frames()), [(True, OP_BINARY, payload)])

    def test_length_encodings(self):
        self.assertEqual(len(encode_frame(OP_BINARY, b"x" * 125, mask=False)), 2 + 125)
        self.assertEqual(len(encode_frame(OP_BINARY, b"x" * 126, mask=False)), 4 + 126)
        self.assertEqual(len(encode_frame(OP_BINARY, b"x" * 65536, mask=False)), 10 + 65536)

    def test_incremental_parsing(self):
        frames = encode_frame(OP_BINARY, b"hello", mask=False) + encode_frame(OP_PING, b"p", mask=False)
        frames += encode_frame(OP_BINARY, b"y" * 300, mask=False)
        parser = FrameParser()
        seen = []
        for i in range(len(frames)):
            parser.feed(frames[i : i + 1])
            seen.extend(parser.frames())
        self.assertEqual(seen, [(True, OP_BINARY, b"hello"), (True, OP_PING, b"p"), (True, OP_BINARY, b"y" * 300)])

    def test_fragments_and_close_frames_parse(self):
        close_payload = struct.pack(">H", 1000) + b"bye"
        data = encode_frame(OP_TEXT, b"ab", mask=False, fin=False) + encode_frame(OP_CONT, b"cd", mask=False)
        data += encode_frame(OP_CLOSE, close_payload, mask=False)
        parser = FrameParser()
        parser.feed(data)
        self.assertEqual(
            list(parser.frames()), [(False, OP_TEXT, b"ab"), (True, OP_CONT, b"cd"), (True, OP_CLOSE, close_payload)]
        )

    def test_rejects_masked_server_frames_and_reserved_bits(self):
        parser = FrameParser()
        parser.feed(encode_frame(OP_BINARY, b"x", mask=True))
        with self.assertRaises(WebSocketError):
            list(parser.frames())
        parser = FrameParser()
        parser.feed(bytes((0x80 | 0x40 | OP_BINARY, 0)))
        with self.assertRaises(WebSocketError):
            list(parser.frames())


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeSidecar()
        self.addCleanup(self.server.stop)

    def _connect(self, **kwargs):
        ws = WebSocket.connect(self.server.url, timeout=2.0, **kwargs)
        self.addCleanup(ws.close)
        return ws

    def _hello(self, ws):
        ws.send_binary(_msgpack.packb({"v": 1, "type": "hello", "session": "s1"}))
        opcode, payload = ws.recv(2.0)
        self.assertEqual(opcode, OP_BINARY)
        return _msgpack.unpackb(payload)

    def test_handshake_and_binary_round_trip(self):
        ws = self._connect()
        welcome = self._hello(ws)
        self.assertRegex(welcome.pop("resume"), r"^[0-9a-f]{32}$")
        self.assertEqual(welcome, {"v": 1, "type": "welcome", "session": "s1", "ack": 0})
        headers = self.server.request_headers[0]
        self.assertEqual(headers["upgrade"].lower(), "websocket")
        self.assertEqual(headers["sec-websocket-version"], "13")
        self.assertEqual(len(headers["sec-websocket-key"]), 24)

    def test_extra_headers_are_sent(self):
        self._connect(headers={"Authorization": "Bearer abc"})
        self.assertTrue(wait_until(lambda: self.server.request_headers))
        self.assertEqual(self.server.request_headers[0]["authorization"], "Bearer abc")

    def test_refused_upgrade(self):
        self.server.token = "secret"
        with self.assertRaises(HandshakeError) as caught:
            WebSocket.connect(self.server.url, timeout=2.0)
        self.assertIn("401", str(caught.exception))

    def test_ping_gets_pong_and_fragments_are_reassembled(self):
        self.server.fragment_acks = True  # replies come as two fragments with a ping between
        ws = self._connect()
        welcome = self._hello(ws)
        self.assertEqual(welcome["type"], "welcome")
        self.assertTrue(wait_until(lambda: self.server.pongs == [b"mid"]))
        self.server.ping_all(b"again")
        self.assertTrue(wait_until(lambda: ws.poll() == [] and b"again" in self.server.pongs))

    def test_messages_before_close_are_returned_then_close_raises(self):
        ws = self._connect()
        self._hello(ws)
        self.server.send_all({"v": 1, "type": "ack", "ack": 3})
        self.server.close_all(code=1008, reason="policy")
        messages = []
        self.assertTrue(wait_until(lambda: messages.extend(ws.poll()) or messages))
        self.assertEqual(_msgpack.unpackb(messages[0][1])["ack"], 3)
        with self.assertRaises(ConnectionClosed) as caught:
            wait_until(lambda: ws.poll() and False)
        self.assertEqual(caught.exception.code, 1008)
        self.assertEqual(caught.exception.reason, "policy")

    def test_text_messages_are_returned_with_their_opcode(self):
        ws = self._connect()
        self._hello(ws)
        self.server.send_all(b"hi", opcode=OP_TEXT)
        self.assertEqual(ws.recv(2.0), (OP_TEXT, b"hi"))

    def test_abrupt_end_of_stream_raises(self):
        ws = self._connect()
        self._hello(ws)
        self.server.close_all()
        with self.assertRaises(ConnectionClosed) as caught:
            wait_until(lambda: ws.poll() and False)
        self.assertIsNone(caught.exception.code)

    def test_send_after_close_raises_connection_closed(self):
        ws = self._connect()
        ws.close()
        with self.assertRaises(ConnectionClosed):
            ws.send_binary(b"x")

    def test_every_socket_is_listed_until_it_is_closed(self):
        before = _ws.open_fds()
        ws = WebSocket.connect(self.server.url, timeout=2.0)
        self.assertEqual(_ws.open_fds() - before, {ws.fileno()})
        self.assertFalse(os.get_inheritable(ws.fileno()))
        ws.close()
        self.assertEqual(_ws.open_fds(), before)
        self.server.token = "secret"
        with self.assertRaises(HandshakeError):
            WebSocket.connect(self.server.url, timeout=2.0)
        self.assertEqual(_ws.open_fds(), before)  # a failed upgrade leaves nothing listed either

    def test_unsupported_scheme(self):
        with self.assertRaises(BadURL):
            WebSocket.connect("http://127.0.0.1:1/")

    def test_refused_upgrade_carries_the_status(self):
        self.server.http_status = 403
        with self.assertRaises(HandshakeError) as caught:
            WebSocket.connect(self.server.url, timeout=2.0)
        self.assertEqual(caught.exception.status, 403)


class BadServerTest(unittest.TestCase):
    """Servers that answer the upgrade wrongly."""

    def _serve_once(self, response):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)

        def serve():
            conn, _ = listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return  # the client gave up: no spinning on EOF
                    data += chunk
                conn.sendall(response)
                conn.recv(10)

        threading.Thread(target=serve, daemon=True).start()
        return "ws://127.0.0.1:%d/v1/ingest" % listener.getsockname()[1]

    def test_wrong_accept_key(self):
        url = self._serve_once(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: d3Jvbmc=\r\n\r\n"
        )
        with self.assertRaises(HandshakeError):
            WebSocket.connect(url, timeout=2.0)

    def test_tls_to_a_plain_server_fails_and_leaves_no_socket_listed(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        self.addCleanup(listener.close)

        def serve():  # answers a TLS ClientHello with plain HTTP
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        self.addCleanup(server.join, 5)
        url = "wss://127.0.0.1:%d/v1/ingest" % listener.getsockname()[1]
        before = _ws.open_fds()
        with self.assertRaises(OSError):  # ssl.SSLError: the server does not speak TLS
            WebSocket.connect(url, timeout=2.0)
        self.assertEqual(_ws.open_fds(), before)

    def test_not_a_websocket(self):
        url = self._serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        with self.assertRaises(HandshakeError):
            WebSocket.connect(url, timeout=2.0)


if __name__ == "__main__":
    unittest.main()
