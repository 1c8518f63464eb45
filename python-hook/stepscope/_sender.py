"""The background thread: turns step records into `steps` frames and delivers them.

Delivery is at-least-once. Records stay in the delivery window (_window.py) until the sidecar acknowledges
them; after a reconnect, `hello` is sent again and everything above ``welcome.ack`` is
resent in order. The training thread only ever appends to ``queue`` (and ``env`` updates).

Where the sidecar asks for them (`welcome`), this thread also sends a `heartbeat` whenever nothing
else went out for a second, so that the sidecar can tell a live process whose loop is stuck from one
that is gone or whose training thread never lets this one run, and answers a `capture` request with
the training thread's stack (see _where.py).
"""

from __future__ import annotations

import collections
import random
import threading
import time

from . import _profile, _log, _protocol, _where
from ._record import DUR_NS, END_NS, GPU, SEQ
from ._window import Window
from ._counters import CounterSchedule
from ._protocol import ProtocolError
from ._ws import OP_BINARY, BadURL, ConnectionClosed, HandshakeError, ResolveError, WebSocket, WebSocketError, redact_url

__all__ = ["Sender"]

_NETWORK_ERRORS = (OSError, WebSocketError, ProtocolError)
# Refusals that sending the same again cannot change: a text frame (1003), a message the sidecar
# finds invalid (1007), and a hello it will not take (1008 with a reason "hello: ...": too many jobs
# or ranks, a session id another job holds, a resume without the session's secret). Other 1008s
# (too many frames a second, no hello in time) pass, and are retried.
_REFUSAL_CODES = (1003, 1007)
_HELLO_REFUSED = 1008
# Close codes worth a line (once each) without giving up: a policy limit, frame too big, a sidecar
# bug, try again later.
_NOTED_CODES = (1008, 1009, 1011, 1013)
_TOKEN_STATUSES = (401, 403)
_NOT_SENT = "steps are still timed here but not sent"
_NO_COMM = (None, None, None)
# How often the dump files of loader workers that are gone are removed (see _where.worker_stacks).
_PRUNE_EVERY_S = 60.0
# The batch interval while the sidecar says no viewer watches: each wake of this thread costs about
# 0.3 ms of CPU whatever it sends, so ten a second alone were 0.3% of a core (issue 24, target 5).
# Kept under the second without a step after which the sidecar shows a rank as waiting
# (src/analysis/stall.ts, waitFloorMs), so that its state and /metrics read the same unwatched.
UNWATCHED_INTERVAL_S = 0.5
# How often the sidecar's messages (acks, watch, capture and profile requests) are read while a
# viewer watches and rows go out every 0.08 s (unwatched, at every wake): each read costs ~0.15 ms of CPU (poll and recv system
# calls, the ack's decoding), so at every wake they were a third of the watched cost (target 5).
# Requests then wait no longer than they do unwatched (a sender waiting for a slow job's next step,
# see Pace, wakes to read them when due); acks only free the delivery window later.
READ_EVERY_S = UNWATCHED_INTERVAL_S


def until_beat(now: float, period: float) -> float:
    """Seconds from ``now`` to the next beat of ``period`` on the host's monotonic clock, at least a
    quarter period on (so in (period / 4, period * 5 / 4]). While watched the sender wakes on these
    beats: the ranks beside this one send at the same moments, and the sidecar, which ticks on what
    comes in, shows them in one tick; a wake a hair before its beat does not wake again at once."""
    if period <= 0:
        return 0.0  # no interval: send at every turn, as a zero wait always did
    return period * 1.25 - (now + period * 0.25) % period


class Pace:
    """While watched: send on the beats, or, once a beat found no step (the job steps slower than
    the beats), send each step the moment it ends (the training thread wakes the sender at the first
    record it queues); back to the beats once steps come closer than a beat apart. A slow job's steps
    then reach a viewer in milliseconds, and its sender wakes once a step instead of at every beat."""

    def __init__(self, period: float):
        self.period = period
        self.on_first = False  # waiting for the first step rather than the next beat
        self._came_at = None  # when the last wake found steps

    def woke(self, came: bool, now: float) -> bool:
        """After a wake that found steps (``came``) or none: whether to wait for the first step next."""
        if came:
            if self.on_first and self._came_at is not None and now - self._came_at < self.period:
                self.on_first = False  # steps faster than the beats: the beats again
            self._came_at = now
        else:
            self.on_first = True
        return self.on_first


class Sender:
    def __init__(
        self,
        queue: collections.deque,
        wake: threading.Event,
        *,
        url: str,
        identity: dict,
        env: dict,
        headers=None,
        batch_interval: float = 0.08,
        max_unacked: int = 100_000,
        connect_timeout: float = 2.0,
        welcome_timeout: float = 5.0,
        io_timeout: float = 5.0,
        backoff=(0.1, 5.0),
        tick=None,
        counters=None,
        wake_on_first=None,
    ):
        self._queue = queue
        self._wake = wake
        # The scope's: makes step() wake this thread at the first record queued (see Pace); None: never.
        self._wake_on_first = wake_on_first
        self._pace = Pace(batch_interval)
        self._url = url
        self._identity = dict(identity)
        self._env = dict(env)
        self._env_updates = collections.deque()
        self._headers = dict(headers or {})
        self._batch_interval = batch_interval
        self._watched = True  # until a sidecar says no viewer watches (an older one never does)
        self._connect_timeout = connect_timeout
        self._welcome_timeout = welcome_timeout
        self._io_timeout = io_timeout
        self._backoff_base, self._backoff_max = backoff
        self._tick = tick
        self._mono_origin = _protocol.monotonic_origin(time.perf_counter_ns())
        self.gpu = None
        self.comm = None  # a _comm.CommTracker: the comm_* columns of each row (None: nil)
        self._counters = counters if counters is not None else CounterSchedule(lambda: self._env)
        self.training_thread = None  # the thread whose stack a `capture` takes (set by the scope)
        self._heartbeat_s = None  # from welcome: send a heartbeat when nothing went out for this long
        self._last_sent = 0.0
        self._next_read = 0.0  # when _exchange next reads the sidecar's messages (see READ_EVERY_S)
        self._capture = None  # a `capture` request waiting for its answer
        self.on_profile = None  # the scope's: takes a profile window, or says why not
        self._profiles = collections.deque()  # windows done (or refused), to export and send
        self._deep = False  # welcome.capture.deep: every thread's whole stack, and more of it
        self._still = _where.Stillness()
        self._last_end_ns = None  # hook clock end of the newest step collected
        self._last_record_at = time.monotonic()
        self._proc_start = _proc_start()
        self._next_prune = time.monotonic() + _PRUNE_EVERY_S

        self._pending = collections.deque()  # records waiting for their GPU times
        self._window = Window(max_unacked)  # encoded rows until the sidecar acknowledges them
        self._next_seq = 1
        self._rows_per_frame = _protocol.MAX_ROWS_PER_FRAME
        self._last_frame_rows = 0

        self._ws = None
        self._failures = 0
        self._next_attempt = 0.0
        self._ever_connected = False
        self._resume = None  # the session's secret, from its first welcome; sent in every later hello
        self.disabled = None  # why sending stopped for good (token or hello refused), else None
        self.last_problem = None  # the latest connection problem, in words (for close's report)

        self._thread = None
        self._closing = False
        self._close_reason = "close"
        self._close_deadline = 0.0
        self._gpu_give_up_at = 0.0
        self._close_attempted = False
        self._end_sent = False
        self._end_acked = False
        self._finished = threading.Event()
        self._close_lock = threading.Lock()
        self._result = None

        self.sent = 0
        self.resent = 0
        self.acked = 0
        self.ack_seq = 0
        self.dropped = 0
        self.connects = 0
        self.errors = 0
        self.cpu_s = 0.0

    # --- any thread --------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="stepscope-sender", daemon=True)
        self._thread.start()

    def add_env(self, env: dict) -> None:
        self._env_updates.append(dict(env))
        self._wake.set()

    def close(self, reason: str, timeout: float) -> bool:
        """Deliver everything, send `end`, wait for its ack; True if all was acknowledged."""
        with self._close_lock:
            if self._result is not None:
                return self._result
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._result = False
                return False
            timeout = max(0.0, float(timeout))
            now = time.monotonic()
            self._close_reason = reason
            self._close_deadline = now + timeout
            self._gpu_give_up_at = now + timeout / 2
            self._closing = True
            self._wake.set()
            if thread is not threading.current_thread():
                thread.join(timeout + self._io_timeout + 0.5)
            self._result = self._end_acked and not self._window and self.disabled is None
            return self._result

    @property
    def end_acked(self) -> bool:
        return self._end_acked

    def abandon(self) -> None:
        """Forget the connection without a word (in a forked child, whose thread is gone).

        The socket's descriptor was already pointed away in the child by ``_ws``'s fork handler;
        no close frame is sent and nothing is shut down: the parent still uses the connection.
        """
        ws = self._ws
        self._thread = None
        self._ws = None
        self._result = False
        self._close_lock = threading.Lock()  # the parent's close() may have held it at the fork
        if ws is not None:
            ws.forget_after_fork()

    @property
    def connected(self) -> bool:
        return self._ws is not None

    def snapshot(self) -> dict:
        return {
            "disabled": self.disabled,
            "sent": self.sent,
            "acked": self.acked,
            "ack_seq": self.ack_seq,
            "dropped": self.dropped,
            "resent": self.resent,
            "pending": len(self._queue) + len(self._pending) + len(self._window) + self._window.in_doubt,
            "connected": self._ws is not None,
            "connects": self.connects,
            "reconnects": max(0, self.connects - 1),
            "errors": self.errors,
            "bg_cpu_s": self.cpu_s,
        }

    # --- the background thread --------------------------------------------

    def _run(self) -> None:
        try:
            while not self._finished.is_set() and self.disabled is None:
                try:
                    self._cycle()
                except Exception as exc:  # a bug here must never reach training
                    self.errors += 1
                    _log.warn_once(_log.INTERNAL, "internal error in the sender thread (%s: %s)" % (type(exc).__name__, exc))
                    self._drop_connection()
                    self._finished.wait(self._batch_interval)
                self.cpu_s = time.thread_time()
        finally:
            if self._ws is not None:
                self._ws.close(1000, "")
                self._ws = None

    def _cycle(self) -> None:
        if self._tick is not None:
            try:
                self._tick()
            except Exception:
                self.errors += 1
        seq = self._next_seq
        self._collect()
        came = self._next_seq != seq
        now = time.monotonic()
        self._counters.sample_due(now, time.perf_counter_ns() - self._mono_origin)
        if now >= self._next_prune:
            self._next_prune = now + _PRUNE_EVERY_S
            _where.forget_dead_children()
        if self.training_thread is not None:
            # Only once no step ended for a second: nothing at all while the job steps faster.
            self._still.sample(self.training_thread, now, now - self._last_record_at)
        if self._closing:
            self._close_cycle()
            return
        if self._ws is None and time.monotonic() >= self._next_attempt:
            self._connect(self._connect_timeout, self._welcome_timeout)
            if self.disabled is not None:
                return
        if self._ws is not None:
            self._exchange()
        # Steps waiting for their GPU or collective times go out at the beats, as they resolve.
        first = self._wake_on_first is not None and self._watched and self._ws is not None and self._pace.woke(came, now) and not self._pending
        timeout = self._interval(first)
        if self._ws is None:
            timeout = min(timeout, max(0.0, self._next_attempt - time.monotonic()))
        if first:
            self._wake_on_first(True)
            if self._queue:
                timeout = 0.0  # a step came before step() could see the wake asked for
        try:
            self._wake.wait(timeout)
            self._wake.clear()
        finally:
            if first:
                self._wake_on_first(False)

    def _interval(self, first: bool = False) -> float:
        """How long to wait for the next batch: to the next beat while a viewer watches; longer while
        the sidecar says no one does, or while waiting for a slow job's next step (``first``: the
        step wakes this thread), yet never past a heartbeat that falls due."""
        if self._ws is None:
            return self._batch_interval
        now = time.monotonic()
        if self._watched and not first:
            # Counters are sampled at the beats that follow their due times (80 ms apart by default).
            return until_beat(now, self._batch_interval)
        interval = max(self._batch_interval, UNWATCHED_INTERVAL_S)
        # A counter asked for more often than the batches (nvml under 0.5 s) is sampled when due.
        due = self._counters.next_due(interval)
        if due is not None:
            interval = min(interval, max(0.0, due - now))
        if first:
            # The sidecar's requests are read no later than unwatched.
            interval = min(interval, max(0.0, self._next_read - now))
        if self._heartbeat_s is not None:
            interval = min(interval, max(0.0, self._last_sent + self._heartbeat_s - now))
        return interval

    def _close_cycle(self) -> None:
        remaining = self._close_deadline - time.monotonic()
        if remaining <= 0 or self._end_acked or self.disabled is not None:
            self._finished.set()
            return
        if self._ws is None:
            # A sidecar never seen gets one try; one that was there is waited for (restarts).
            if self._close_attempted and not self._ever_connected:
                self._finished.set()
                return
            if not self._close_attempted or time.monotonic() >= self._next_attempt:
                self._close_attempted = True
                self._connect(min(self._connect_timeout, remaining), remaining)
        if self.disabled is not None:
            self._finished.set()
            return
        if self._ws is None:
            wait = max(0.0, self._next_attempt - time.monotonic())
        else:
            self._exchange()
            wait = 0.05
        if self._end_acked or self.disabled is not None:
            self._finished.set()
            return
        wait = min(wait, max(0.0, self._close_deadline - time.monotonic()))
        if self._ws is not None:
            try:
                self._ws.wait_readable(wait)
            except ConnectionClosed:
                pass
        else:
            self._finished.wait(wait)

    def _collect(self) -> None:
        """Move records from the training thread's queue to rows ready to send, in seq order."""
        queue = self._queue
        pending = self._pending
        expected = self._next_seq
        if queue:
            take = queue.popleft
            keep = pending.append
            while queue:  # only this thread takes from the queue: a record seen there is there
                record = take()
                seq = record[SEQ]
                if seq > expected:
                    self.dropped += seq - expected  # the queue was full: its oldest records fell off
                expected = seq + 1
                keep(record)
            self._last_end_ns = record[END_NS]
            self._last_record_at = time.monotonic()
        self._next_seq = expected

        gpu = self.gpu
        if gpu is not None and gpu.pending:
            gpu.resolve(give_up=self._closing and time.monotonic() >= self._gpu_give_up_at)

        window = self._window
        origin = self._mono_origin
        encode = _protocol.encode_record
        comm = self.comm
        if comm is not None:
            comm.drain()
            if comm.active_since is None:
                comm = None  # no process group yet, so nothing held: every step's comm columns are nil
        comm_times = _NO_COMM
        add = window.add
        while pending:
            record = pending[0]
            gpu_step = record[GPU]
            if gpu_step is not None and not gpu_step.done:
                break
            if comm is not None:
                give_up = self._closing and time.monotonic() >= self._gpu_give_up_at
                comm_times = comm.step_columns(record[END_NS] - record[DUR_NS], record[END_NS], self._closing, give_up)
                if comm_times is None:
                    break  # a collective of the step has yet to report its completion
            pending.popleft()
            add(record[SEQ], encode(record, origin, comm_times))

        from_rows, from_pending = window.shed(len(pending))
        for _ in range(from_pending):
            pending.popleft()
        self.dropped += from_rows + from_pending

    def _merge_env_updates(self) -> dict:
        update = {}
        while self._env_updates:
            update.update(self._env_updates.popleft())
        self._env.update(update)
        return update

    def _connect(self, connect_timeout: float, welcome_timeout: float) -> None:
        self._merge_env_updates()  # the hello below carries them
        try:
            ws = WebSocket.connect(self._url, headers=self._headers, timeout=connect_timeout)
        except Exception as exc:  # also a malformed URL: reported once, like an absent sidecar
            self._connection_failed(exc)
            return
        try:
            ws.set_timeout(self._io_timeout)
            ws.send_binary(
                _protocol.hello(
                    self._identity,
                    self._env,
                    time.time_ns(),
                    time.perf_counter_ns() - self._mono_origin,
                    acked=self.ack_seq,
                    resume=self._resume,
                    proc_start=self._proc_start,
                )
            )
            welcome = self._await_welcome(ws, welcome_timeout)
        except _NETWORK_ERRORS as exc:
            ws.close(1002 if isinstance(exc, ProtocolError) else 1000, "")
            self._connection_failed(exc)
            return
        self._ws = ws
        self.connects += 1
        self._ever_connected = True
        self.last_problem = None
        self._end_sent = False
        if welcome.get("resume") is not None:
            self._resume = welcome["resume"]
        self._apply_ack(welcome["ack"])
        self.dropped += self._window.rewind()  # resend everything the sidecar does not hold
        self._counters.configure(welcome.get("counters"), time.monotonic())
        beat = welcome.get("heartbeat_ms")
        self._heartbeat_s = beat / 1000.0 if isinstance(beat, int) else None
        capture = welcome.get("capture")
        self._deep = isinstance(capture, dict) and capture.get("deep") is True
        self._watched = welcome.get("watched") is not False
        self._capture = None
        self._last_sent = time.monotonic()

    def _await_welcome(self, ws: WebSocket, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            message = ws.recv(remaining) if remaining > 0 else None
            if message is None:
                raise ProtocolError("no welcome from the sidecar within %.1f s" % timeout)
            parsed = self._parse(message)
            if parsed["type"] == "welcome":
                return parsed

    def _exchange(self) -> None:
        """Read acks, then send env updates, rows and (when closing and all is sent) `end`."""
        ws = self._ws
        try:
            now = time.monotonic()
            if not self._watched or now >= self._next_read or self._closing:
                self._next_read = now + READ_EVERY_S
                for message in ws.poll():
                    self._on_message(self._parse(message))
            update = self._merge_env_updates()
            if update:
                ws.send_binary(_protocol.env_update(update))
                self._last_sent = time.monotonic()
            self._send_rows(ws)
            if self._capture is not None:
                self._send_stack(ws)
            if self._profiles:
                self._send_profile(ws)
            for source, samples in self._counters.take():
                ws.send_binary(_protocol.counters(source, samples))
            if self._heartbeat_s is not None and time.monotonic() - self._last_sent >= self._heartbeat_s:
                ws.send_binary(_protocol.heartbeat())
                self._last_sent = time.monotonic()
            if self._closing and not self._end_sent and not self._queue and not self._pending:
                ws.send_binary(_protocol.end(self._close_reason))
                self._end_sent = True
        except _NETWORK_ERRORS as exc:
            self._connection_lost(exc)

    def _parse(self, message) -> dict:
        opcode, payload = message
        if opcode != OP_BINARY:
            raise ProtocolError("text frame from the sidecar")
        return _protocol.parse_server_message(payload)

    def _on_message(self, message: dict) -> None:
        kind = message["type"]
        if kind in ("ack", "welcome"):
            self._apply_ack(message["ack"])
            self._failures = 0  # a working connection: the next loss retries quickly again
            self.last_problem = None
            if kind == "ack" and message.get("end") is True and self._end_sent:
                self._end_acked = True
        elif kind == "watch":
            self._watched = message["watched"]
        elif kind == "capture":
            self._capture = message["id"]
        elif kind == "profile":
            self._take_profile(message)

    def _take_profile(self, message: dict) -> None:
        """A `profile` request: handed to the training thread's next step end, or refused with why."""
        window = _profile.Window(message["id"], message["steps"], message["max_bytes"], message["chunk_bytes"])
        if not 1 <= window.steps <= _profile.MAX_STEPS:
            window.error = "steps=%d: a window holds 1 to %d steps" % (window.steps, _profile.MAX_STEPS)
        elif self.on_profile is None:
            window.error = "this process times no steps"
        else:
            window.error = self.on_profile(window)
        if window.error is not None:
            self._profiles.append(window)

    def profile_done(self, window) -> None:
        """Training thread: a window ended (or failed); the sender thread exports and sends it."""
        self._profiles.append(window)
        self._wake.set()

    def _send_profile(self, ws: WebSocket) -> None:
        window = self._profiles.popleft()
        if window.error is None:
            try:
                chunks = _profile.trace_chunks(window)
            except Exception as exc:
                window.error = "the trace could not be written: %s: %s" % (type(exc).__name__, str(exc)[:200])
        if window.error is not None:
            ws.send_binary(_protocol.profile_refused(window.id, window.error))
        else:
            for i, chunk in enumerate(chunks):
                ws.send_binary(_protocol.profile_chunk(window.id, i, i == len(chunks) - 1, chunk))
        self._last_sent = time.monotonic()

    def _apply_ack(self, ack: int) -> None:
        if ack > self.ack_seq:
            self.ack_seq = ack
        self.acked += self._window.ack(ack)

    def _send_rows(self, ws: WebSocket) -> None:
        window = self._window
        while window.unsent:
            frame = window.next_frame(self._rows_per_frame)
            self._last_frame_rows = len(frame)
            ws.send_binary(_protocol.steps([row for _, row in frame], self.dropped))
            self._last_sent = time.monotonic()
            self.resent += window.sent(frame)
            self.sent += len(frame)

    def _send_stack(self, ws: WebSocket) -> None:
        """Answer the `capture` request: where the training thread is (never raises for its own faults)."""
        request, self._capture = self._capture, None
        now_ns = time.perf_counter_ns()
        try:
            where = self.where(now_ns)
        except Exception as exc:
            self.errors += 1
            where = {"threads": [], "error": "%s: %s" % (type(exc).__name__, str(exc)[:200])}
        ws.send_binary(_protocol.stack(request, now_ns - self._mono_origin, self._next_seq - 1, where))
        self._last_sent = time.monotonic()

    def where(self, now_ns: int) -> dict:
        """The capture: threads, how still the training thread is, its collectives, its DataLoader
        workers, the Flight Recorder."""
        where = _where.capture(self.training_thread, exclude=(threading.get_ident(),), deep=self._deep)
        where["still_ms"] = self._still.still_ms(time.monotonic())
        comm = self.comm
        since = self._last_end_ns
        where["comm"] = comm.progress(since if since is not None else 0, now_ns) if comm is not None and comm.active_since is not None else None
        workers = _where.workers()
        _where.worker_stacks(workers)
        where["workers"] = workers
        where["flight"] = _where.flight_recorder()
        return where

    # --- connection state --------------------------------------------------

    def _connection_failed(self, exc: BaseException) -> None:
        """A connection attempt failed: give up for good on what no retry can fix, else retry later.

        Each kind of problem is said once (one line per kind for the life of the process), so a
        sidecar that stays away, or a host name that does not resolve yet, is not repeated every try.
        """
        if self._refused_for_good(exc):
            return
        self._schedule_retry()
        url = redact_url(self._url)
        self.last_problem = "sidecar at %s: %s" % (url, _describe(exc))
        if isinstance(exc, ResolveError):
            _log.warn_once(
                _log.SIDECAR + ":resolve:" + exc.host,
                "sidecar host %r (in %s) cannot be resolved (%s); buffering and retrying until it can"
                % (exc.host, url, _printable(str(exc.error))),
            )
        elif isinstance(exc, HandshakeError) and exc.status is not None:
            _log.warn_once(
                "%s:http:%d" % (_log.SIDECAR, exc.status),
                "sidecar at %s refused the connection (%s); buffering and retrying" % (url, _describe(exc)),
            )
        elif isinstance(exc, ConnectionClosed) and exc.code is not None:
            _log.warn_once(
                "%s:close:%d" % (_log.SIDECAR, exc.code),
                "sidecar at %s refused the connection (%s); buffering and retrying" % (url, _describe(exc)),
            )
        elif isinstance(exc, (HandshakeError, ProtocolError, ConnectionClosed, WebSocketError)):
            _log.warn_once(
                _log.SIDECAR + ":protocol",
                "sidecar at %s refused the connection (%s); buffering and retrying" % (url, _describe(exc)),
            )
        else:
            _log.warn_once(_log.SIDECAR, "sidecar at %s unreachable (%s); buffering and retrying" % (url, _describe(exc)))

    def _connection_lost(self, exc: BaseException) -> None:
        self._drop_connection()
        if self._refused_for_good(exc):
            return
        self._schedule_retry()
        self.last_problem = "sidecar at %s: %s" % (redact_url(self._url), _describe(exc))
        if isinstance(exc, ConnectionClosed):
            if exc.code == 1009:
                self._rows_per_frame = max(1, min(self._rows_per_frame, self._last_frame_rows) // 2)
            if exc.code in _NOTED_CODES:
                _log.warn_once(
                    "%s:close:%d" % (_log.SIDECAR, exc.code),
                    "sidecar at %s closed the connection (%s); retrying" % (redact_url(self._url), _describe(exc)),
                )

    def _refused_for_good(self, exc: BaseException) -> bool:
        """Stop sending (said once) if ``exc`` is a refusal that retrying cannot change."""
        url = redact_url(self._url)
        if isinstance(exc, HandshakeError) and exc.status in _TOKEN_STATUSES:
            token = self._headers.get("Authorization", "")[len("Bearer ") :]
            hint = "the token sent is not the sidecar's" if token else "no token is set"
            reason = "token refused: check STEPSCOPE_TOKEN (the sidecar at %s answered HTTP %d; %s)" % (
                url,
                exc.status,
                hint,
            )
        elif isinstance(exc, ConnectionClosed) and (
            exc.code in _REFUSAL_CODES or (exc.code == _HELLO_REFUSED and exc.reason.startswith("hello:"))
        ):
            reason = "the sidecar at %s refused this process (close code %d: %s)" % (
                url,
                exc.code,
                _printable(exc.reason) or "no reason given",
            )
        elif isinstance(exc, BadURL):
            reason = "%s is not a websocket URL (%s)" % (url, exc)
        else:
            return False
        self._stop(reason)
        return True

    def _stop(self, reason: str) -> None:
        self.disabled = reason
        self.last_problem = reason
        _log.warn_once(_log.SIDECAR + ":stopped", "%s; not retrying: %s" % (reason, _NOT_SENT))
        self._drop_connection()
        # Nothing will be sent: let go of what was kept for it (close() counts it as undelivered).
        self._window.clear()
        self._pending.clear()
        self._wake.set()

    def _drop_connection(self) -> None:
        if self._ws is not None:
            self._ws.close(1000, "")
        self._ws = None
        self._end_sent = False

    def _schedule_retry(self) -> None:
        delay = min(self._backoff_max, self._backoff_base * (2 ** min(self._failures, 30)))
        self._failures += 1
        self._next_attempt = time.monotonic() + delay * random.uniform(0.5, 1.0)


def _proc_start():
    """This process's start, in clock ticks after boot (field 22 of /proc/self/stat); None where unknown."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _printable(text: str, limit: int = 200) -> str:
    """``text`` with control characters replaced: what a peer sent must not steer a terminal."""
    text = str(text)[:limit]
    return "".join(c if c.isprintable() else "?" for c in text)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed) and exc.code is not None:
        return ("%d %s" % (exc.code, _printable(exc.reason))).strip()
    text = _printable(str(exc))
    name = type(exc).__name__
    if isinstance(exc, (ConnectionError, TimeoutError)) or not text:
        return name  # "ConnectionRefusedError" says it all
    return "%s: %s" % (name, text)
