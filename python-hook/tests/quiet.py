"""A test case whose hook messages land in ``self.stderr``, with the hook's say-once log reset around it."""

import io
import sys
import unittest
from unittest import mock

from stepscope import _log


class Quiet(unittest.TestCase):
    def setUp(self):
        _log.reset()
        self.addCleanup(_log.reset)
        self.stderr = io.StringIO()
        patcher = mock.patch.object(sys, "stderr", self.stderr)
        patcher.start()
        self.addCleanup(patcher.stop)

    def warnings(self):
        """The lines the hook wrote, blank ones left out."""
        return [line for line in self.stderr.getvalue().splitlines() if line]
