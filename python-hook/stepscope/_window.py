"""The delivery window: encoded rows held until the sidecar acknowledges them.

Pure bookkeeping (no socket, no clock), so that at-least-once delivery is one small thing to test:
rows enter in seq order; the newest ``unsent`` of them are not on the current connection yet; a new
connection makes every held row unsent again (all above the sidecar's ack is resent, in order); an
ack releases rows; past ``limit`` the oldest are let go of. A row let go of before it was sent is
dropped; one already sent is in doubt: it is on its way and counts as delivered once an ack covers it,
or as dropped if the connection ends first (it cannot be sent again). Counting those as dropped at
once made a hook whose sidecar fell behind say it had delivered a tenth of what the sidecar kept.
"""

from __future__ import annotations

import collections
import itertools

__all__ = ["Window"]


class Window:
    __slots__ = ("_rows", "unsent", "limit", "_max_sent_seq", "_in_doubt")

    def __init__(self, limit: int):
        self._rows = collections.deque()  # (seq, encoded row), seq increasing
        self.unsent = 0  # the newest `unsent` rows are not on this connection yet
        self.limit = max(1, limit)
        self._max_sent_seq = 0
        self._in_doubt = collections.deque()  # [first, last] seqs of sent rows let go of before their ack, each run consecutive

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def in_doubt(self) -> int:
        """Rows sent and let go of, neither acknowledged nor lost yet."""
        return sum(last - first + 1 for first, last in self._in_doubt)

    def add(self, seq: int, row: bytes) -> None:
        self._rows.append((seq, row))
        self.unsent += 1

    def ack(self, seq: int) -> int:
        """Release the rows up to ``seq``; returns how many were delivered: those and the rows in doubt it covers."""
        rows = self._rows
        released = 0
        while rows and rows[0][0] <= seq:
            rows.popleft()
            released += 1
        if self.unsent > len(rows):
            self.unsent = len(rows)
        doubt = self._in_doubt
        while doubt and doubt[0][0] <= seq:
            first, last = doubt[0]
            if last > seq:
                doubt[0][0] = seq + 1
                return released + seq - first + 1
            doubt.popleft()
            released += last - first + 1
        return released

    def rewind(self) -> int:
        """A new connection (its welcome's ack applied): nothing held is on it yet. Returns how many
        rows in doubt its ack did not cover: lost with the connection before."""
        self.unsent = len(self._rows)
        lost = self.in_doubt
        self._in_doubt.clear()
        return lost

    def next_frame(self, max_rows: int) -> list:
        """The oldest unsent rows, at most ``max_rows``, as (seq, row) pairs; [] when all are sent.

        They stay unsent until :meth:`sent` says they went out: a send that fails leaves them to
        the next connection.
        """
        start = len(self._rows) - self.unsent
        return list(itertools.islice(self._rows, start, start + min(self.unsent, max_rows)))

    def sent(self, frame: list) -> int:
        """``frame`` (from :meth:`next_frame`) is on the wire; returns how many of its rows were
        sent before, on an earlier connection."""
        self.unsent -= len(frame)
        resent = 0
        if frame[0][0] <= self._max_sent_seq:
            resent = sum(1 for seq, _ in frame if seq <= self._max_sent_seq)
        if frame[-1][0] > self._max_sent_seq:
            self._max_sent_seq = frame[-1][0]
        return resent

    def shed(self, waiting: int) -> tuple:
        """Drop the oldest rows so that the held rows and ``waiting`` records (newer ones not yet
        encoded, waiting for their GPU times, which count against the limit too) fit in it.
        Returns (rows dropped, how many of the waiting must be dropped as well): rows already sent are
        not dropped but in doubt (see the module's docstring)."""
        overflow = len(self._rows) + waiting - self.limit
        if overflow <= 0:
            return 0, 0
        rows = self._rows
        from_rows = min(overflow, len(rows))
        sent = min(len(rows) - self.unsent, from_rows)  # the oldest rows are the ones on the connection
        doubt = self._in_doubt
        for _ in range(sent):
            seq = rows.popleft()[0]
            if doubt and doubt[-1][1] == seq - 1:
                doubt[-1][1] = seq
            else:
                doubt.append([seq, seq])
        for _ in range(from_rows - sent):
            rows.popleft()
        if self.unsent > len(rows):
            self.unsent = len(rows)
        return from_rows - sent, overflow - from_rows

    def clear(self) -> None:
        """Nothing more will be sent or acknowledged: what is held, and in doubt, is left undelivered."""
        self._rows.clear()
        self._in_doubt.clear()
        self.unsent = 0

