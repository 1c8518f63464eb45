"""Configuration errors: said once, clearly, and nothing retried that cannot succeed.

A bad URL turns sending off at init; a refused token or hello stops the sender for good; a host
that does not resolve (yet) and a sidecar that says "try again later" are retried with backoff,
each kind of problem said once.
"""

import os
import socket
import time
import unittest
from unittest import mock

import stepscope
from stepscope import _env, _log, _ws
from stepscope._scope import Scope

from .fake_sidecar import FakeSidecar, wait_until
from .quiet import Quiet
from .test_delivery import free_port, run_steps

ACCEPTED = (
    "Accepted: ws://HOST[:PORT][/PATH] or wss://HOST[:PORT][/PATH], e.g. ws://127.0.0.1:9477/v1/ingest; "
    "not sending: steps are still timed here"
)
NOT_SENT = "; not retrying: steps are still timed here but not sent"


class RefusalCase(Quiet):

    def server(self, **kwargs):
        server = FakeSidecar(**kwargs)
        self.addCleanup(server.stop)
        return server

    def scope(self, url, token=None):
        """A scope like init()'s, retrying every 10-50 ms instead of 0.1-5 s."""
        connection = {
            "url": url,
            "identity": _env.identity(job="refusals", rank=0, world_size=1, local_rank=0),
            "env": {},
            "headers": {"Authorization": "Bearer " + token} if token else {},
            "batch_interval": 0.02,
            "backoff": (0.01, 0.05),
        }
        scope = Scope(connection)
        self.addCleanup(scope.close, 0.2)
        return scope

    def assert_stopped(self, scope, server, connections=1):
        """The sender gave up: its thread ended (nothing else connects), after ``connections`` tries."""
        self.assertTrue(wait_until(lambda: not scope._sender._thread.is_alive()))
        self.assertEqual(server.connections, connections)
        self.assertIsNotNone(scope.stats()["disabled"])


class BadUrlTest(RefusalCase):
    def init(self, **kwargs):
        scope = stepscope.init(**kwargs)
        self.addCleanup(scope.close, 0.2)
        return scope

    def test_bad_urls_are_said_once_and_turn_sending_off(self):
        cases = [
            ("http://127.0.0.1:9477/v1/ingest", "unsupported scheme 'http'"),
            ("sidecar:9477", "it has no scheme"),
            ("ws://", "it has no host"),
            ("ws:///v1/ingest", "it has no host"),
            ("ws://sidecar:99999/v1/ingest", "Port out of range 0-65535"),
            ("ws://sidecar:http/v1/ingest", "Port could not be cast to integer value as 'http'"),
            ("ws://sidecar:0/v1/ingest", "port 0"),
            ("ws://[::1/v1/ingest", "Invalid IPv6 URL"),
            ("ws://side car:9477/", "it contains whitespace"),
            ("ws://sidecar:9477/\x1b[2J", "it contains a control character"),
            ("ws://a..b:9477/", "'a..b' is not a valid host name"),
            ("ws://sidecar:9477/v1/ingest#x", "a websocket URL has no #fragment"),
        ]
        for url, problem in cases:
            with self.subTest(url=url), mock.patch.dict(os.environ, {"STEPSCOPE_URL": url}):
                _log.reset()
                self.stderr.truncate(0)
                self.stderr.seek(0)
                scope = self.init()
                self.assertIsNone(scope._sender)  # no thread, no socket: nothing to retry
                run_steps(scope, 3)
                self.assertEqual(scope.stats()["records"], 3)  # still timed here
                self.assertEqual(
                    self.warnings(),
                    ["stepscope: STEPSCOPE_URL=%r is not a usable sidecar URL: %s. %s" % (url, problem, ACCEPTED)],
                )
                self.assertIn(problem, scope.stats()["disabled"])
                self.init()  # said once: another init with the same URL adds nothing
                self.assertEqual(len(self.warnings()), 2)  # ... but the close line of the scope it closed
                self.assertIn("close: 0 of 3 step records delivered", self.warnings()[1])

    def test_the_url_argument_is_named_and_a_password_is_not_shown(self):
        scope = self.init(url="ws://user:hunter2@sidecar:9477/v1/ingest")
        self.assertIsNone(scope._sender)
        self.assertEqual(
            self.warnings(),
            [
                "stepscope: init(url='ws://user:***@sidecar:9477/v1/ingest') is not a usable sidecar URL: "
                "credentials in the URL are not supported (use STEPSCOPE_TOKEN). " + ACCEPTED
            ],
        )
        self.assertIs(scope.close(0.1), False)
        result = scope.close_result
        self.assertEqual((result.records, result.undelivered), (0, 0))
        self.assertEqual(len(self.warnings()), 1)  # nothing lost: no close line

    def test_good_urls_pass(self):
        for url in ("ws://127.0.0.1:9477/v1/ingest", "wss://sidecar.ns.svc/v1/ingest", "ws://[::1]:9477/x?a=b", "WS://h"):
            with self.subTest(url=url):
                _ws.check_url(url)
        server = self.server()
        with mock.patch.dict(os.environ, {"STEPSCOPE_URL": "  %s\n" % server.url}):  # as read from a file
            scope = self.init()
        run_steps(scope, 2)
        self.assertTrue(scope.close(2.0))
        self.assertEqual(self.warnings(), [])


class UnresolvableHostTest(RefusalCase):
    def test_said_once_naming_the_host_and_retried_until_it_resolves(self):
        port = free_port()
        calls = []
        resolvable = []
        real = socket.getaddrinfo

        def resolve(host, port_, *args):
            calls.append(host)
            if host == "sidecar.test" and not resolvable:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
            return real("127.0.0.1" if host == "sidecar.test" else host, port_, *args)

        patcher = mock.patch.object(_ws, "_resolve", resolve)
        patcher.start()
        self.addCleanup(patcher.stop)
        scope = self.scope("ws://sidecar.test:%d/v1/ingest" % port)
        run_steps(scope, 10)
        self.assertTrue(wait_until(lambda: len(calls) >= 5))
        self.assertEqual(
            self.warnings(),
            [
                "stepscope: sidecar host 'sidecar.test' (in ws://sidecar.test:%d/v1/ingest) cannot be resolved "
                "([Errno -2] Name or service not known); buffering and retrying until it can" % port
            ],
        )
        # The name resolves (the service came up) but nothing listens yet: a different problem, said once.
        resolvable.append(True)
        tried = len(calls)
        self.assertTrue(wait_until(lambda: len(calls) >= tried + 5))
        self.assertEqual(len(self.warnings()), 2)
        self.assertIn("unreachable (ConnectionRefusedError)", self.warnings()[1])
        server = self.server(port=port)
        self.assertTrue(wait_until(lambda: server.store.seqs() == list(range(1, 11))))
        self.assertTrue(scope.close(2.0))
        self.assertEqual(len(self.warnings()), 2)


class TokenRefusedTest(RefusalCase):
    def check_refused(self, server, scope, hint, status):
        run_steps(scope, 5)
        self.assert_stopped(scope, server)
        run_steps(scope, 5)  # the training loop goes on, timed
        self.assertEqual(
            self.warnings(),
            [
                "stepscope: token refused: check STEPSCOPE_TOKEN (the sidecar at %s answered HTTP %d; %s)%s"
                % (server.url, status, hint, NOT_SENT)
            ],
        )
        self.assertTrue(scope.stats()["disabled"].startswith("token refused"))
        started = time.monotonic()
        self.assertIs(scope.close(5.0), False)
        self.assertLess(time.monotonic() - started, 0.5)
        result = scope.close_result
        self.assertEqual((result.records, result.delivered, result.undelivered), (10, 0, 10))
        self.assertTrue(result.reason.startswith("token refused"))
        self.assertEqual(len(self.warnings()), 2)
        self.assertIn("close: 0 of 10 step records delivered", self.warnings()[1])

    def test_401_wrong_token(self):
        server = self.server(token="right")
        self.check_refused(server, self.scope(server.url, token="wrong"), "the token sent is not the sidecar's", 401)

    def test_401_no_token(self):
        server = self.server(token="right")
        self.check_refused(server, self.scope(server.url), "no token is set", 401)

    def test_token_whitespace_is_trimmed_and_control_characters_turn_sending_off(self):
        server = self.server(token="right")
        with mock.patch.dict(os.environ, {"STEPSCOPE_TOKEN": "right\n", "STEPSCOPE_URL": server.url}):
            scope = stepscope.init()  # as read from a secret file
        self.addCleanup(scope.close, 0.2)
        run_steps(scope, 2)
        self.assertTrue(scope.close(2.0))
        self.assertEqual(self.warnings(), [])
        scope = stepscope.init(url=server.url, token="ri\nght")
        self.addCleanup(scope.close, 0.2)
        self.assertIsNone(scope._sender)
        self.assertEqual(
            self.warnings(),
            [
                "stepscope: init(token=...) contains a control character, which no HTTP header can carry; "
                "not sending: steps are still timed here"
            ],
        )
        self.assertEqual(server.connections, 1)

    def test_403(self):
        server = self.server(http_status=403)
        self.check_refused(server, self.scope(server.url, token="t"), "the token sent is not the sidecar's", 403)

    def test_other_statuses_are_retried(self):
        server = self.server(http_status=503)
        scope = self.scope(server.url)
        self.assertTrue(wait_until(lambda: server.connections >= 4))
        self.assertEqual(len(self.warnings()), 1)
        self.assertIn("refused the connection (HandshakeError: handshake refused: HTTP/1.1 503", self.warnings()[0])
        server.http_status = None
        run_steps(scope, 3)
        self.assertTrue(scope.close(2.0))


class HelloRefusedTest(RefusalCase):
    def test_refusals_that_a_retry_cannot_change_stop_the_sender(self):
        for code, reason in (
            (1008, "hello: too many ranks: a job may have 2"),
            (1008, "hello: session 5f0e belongs to another job or rank: each process needs its own session id"),
            (1007, "hello.world_size: must be <= 65536"),
            (1003, "text frames are not accepted"),
        ):
            with self.subTest(code=code, reason=reason):
                _log.reset()
                self.stderr.truncate(0)
                self.stderr.seek(0)
                server = self.server(refuse_hello=(code, reason))
                scope = self.scope(server.url)
                run_steps(scope, 4)
                self.assert_stopped(scope, server)
                self.assertEqual(
                    self.warnings(),
                    [
                        "stepscope: the sidecar at %s refused this process (close code %d: %s)%s"
                        % (server.url, code, reason, NOT_SENT)
                    ],
                )
                self.assertIs(scope.close(1.0), False)
                result = scope.close_result
                self.assertEqual((result.delivered, result.undelivered), (0, 4))
                self.assertIn(reason, result.reason)

    def test_other_policy_closes_are_retried(self):
        # 1008 without "hello:" is a limit that passes (frame rate, no hello in time): not a refusal.
        server = self.server(refuse_hello=(1008, "no hello yet, and newer connections are waiting: send hello first"))
        scope = self.scope(server.url)
        run_steps(scope, 2)
        self.assertTrue(wait_until(lambda: server.connections >= 4))
        self.assertIsNone(scope.stats()["disabled"])
        server.refuse_hello = None
        self.assertTrue(wait_until(lambda: server.store.seqs() == [1, 2]))
        server.close_all(code=1008, reason="too many frames: at most 200 a second")
        run_steps(scope, 2)
        self.assertTrue(wait_until(lambda: server.store.seqs() == [1, 2, 3, 4]))
        self.assertTrue(scope.close(2.0))
        self.assertEqual(
            self.warnings(),
            [
                "stepscope: sidecar at %s refused the connection (1008 no hello yet, and newer connections are "
                "waiting: send hello first); buffering and retrying" % server.url,
            ],
        )  # one line for the kind (close code 1008), not one per try or per reason

    def test_the_reason_cannot_steer_the_terminal(self):
        server = self.server(refuse_hello=(1008, "hello: \x1b[2Jno"))
        scope = self.scope(server.url)
        self.assert_stopped(scope, server)
        self.assertIn("(close code 1008: hello: ?[2Jno)", self.warnings()[0])

    def test_a_refusal_after_the_welcome_stops_it_too(self):
        server = self.server()
        scope = self.scope(server.url)
        run_steps(scope, 3)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 3))
        server.close_all(code=1008, reason="hello: a connection cannot change its job, rank or session")
        self.assert_stopped(scope, server)
        self.assertEqual(len(self.warnings()), 1)
        self.assertIn("refused this process (close code 1008: hello: a connection cannot", self.warnings()[0])
        run_steps(scope, 2)
        self.assertIs(scope.close(1.0), False)
        result = scope.close_result
        self.assertEqual((result.records, result.delivered, result.undelivered), (5, 3, 2))

    def test_try_again_later_is_retried_with_backoff_and_said_once(self):
        server = self.server(refuse_hello=(1013, "try again later: too many connections"))
        scope = self.scope(server.url)
        run_steps(scope, 6)
        self.assertTrue(wait_until(lambda: server.connections >= 5))
        self.assertTrue(scope._sender._thread.is_alive())
        self.assertIsNone(scope.stats()["disabled"])
        self.assertEqual(
            self.warnings(),
            [
                "stepscope: sidecar at %s refused the connection (1013 try again later: too many connections); "
                "buffering and retrying" % server.url
            ],
        )
        server.refuse_hello = None
        self.assertTrue(wait_until(lambda: server.store.seqs() == list(range(1, 7))))
        self.assertTrue(scope.close(2.0))
        self.assertEqual(len(self.warnings()), 1)

    def test_try_again_later_on_an_open_connection_is_retried(self):
        server = self.server()
        scope = self.scope(server.url)
        run_steps(scope, 2)
        self.assertTrue(wait_until(lambda: scope.stats()["acked"] == 2))
        server.close_all(code=1013, reason="journal cannot write: ENOSPC")
        run_steps(scope, 2)
        self.assertTrue(wait_until(lambda: server.store.seqs() == [1, 2, 3, 4]))
        self.assertTrue(scope.close(2.0))
        self.assertEqual(len(self.warnings()), 1)
        self.assertIn("closed the connection (1013 journal cannot write: ENOSPC); retrying", self.warnings()[0])


if __name__ == "__main__":
    unittest.main()
