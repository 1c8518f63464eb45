"""The delivery window: encoded rows held until the sidecar acknowledges them.

Pure bookkeeping (no socket, no clock), so that at-least-once delivery is one small thing to test:
rows enter in seq order; the newest ``unsent`` of them are not on the current connection yet; a new
connection makes every held row unsent again (all above the sidecar's ack is resent, in order); an
ack releases rows; past ``limit`` the oldest are dropped.
"""

from __future__ import annotations

import collections
import itertools

__all__ = ["Window"]


class Window:
    __slots__ = ("_rows", "unsent", "limit", "_max_sent_seq")

    def __init__(self, limit: int):
        self._rows = collections.deque()  # (seq, encoded row), seq increasing
        self.unsent = 0  # the newest `unsent` rows are not on this connection yet
        self.limit = max(1, limit)
        self._max_sent_seq = 0

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, seq: int, row: bytes) -> None:
        self._rows.append((seq, row))
        self.unsent += 1

    def ack(self, seq: int) -> int:
        """Release the rows up to ``seq``; returns how many."""
        rows = self._rows
        released = 0
        while rows and rows[0][0] <= seq:
            rows.popleft()
            released += 1
        if self.unsent > len(rows):
            self.unsent = len(rows)
        return released

    def rewind(self) -> None:
        """A new connection: nothing held is on it yet."""
        self.unsent = len(self._rows)

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
        Returns (rows dropped, how many of the waiting must be dropped as well)."""
        overflow = len(self._rows) + waiting - self.limit
        if overflow <= 0:
            return 0, 0
        rows = self._rows
        from_rows = min(overflow, len(rows))
        for _ in range(from_rows):
            rows.popleft()
        if self.unsent > len(rows):
            self.unsent = len(rows)
        return from_rows, overflow - from_rows

    def clear(self) -> None:
        self._rows.clear()
        self.unsent = 0

