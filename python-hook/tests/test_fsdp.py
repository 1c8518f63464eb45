"""FSDP's all-gathers and reduce-scatters are counted (issue 21): FSDP2 (torch >= 2.6) calls
torch.distributed's all_gather_single and reduce_scatter_single, which the hook wraps. Real torch on
gloo, two ranks, in a child process (tests/fixtures/fsdp_checks.py); run under the test environment's
current PyTorch (scripts/test-python.mjs), skipped where torch is older."""

import json
import os
import re
import subprocess
import sys
import unittest


def _torch_version():
    try:
        from importlib import metadata

        match = re.match(r"(\d+)\.(\d+)", metadata.version("torch"))
        return (int(match.group(1)), int(match.group(2))) if match else None
    except Exception:
        return None


@unittest.skipUnless((_torch_version() or (0, 0)) >= (2, 6), "needs torch >= 2.6 (FSDP2's fully_shard)")
class FsdpTest(unittest.TestCase):
    def test_all_gathers_and_reduce_scatters_are_timed_with_their_bytes(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "fsdp_checks.py")
        run = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180)
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        ranks = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([r["rank"] for r in ranks], [0, 1])
        for rank in ranks:
            # All-gathers of each layer's parameters (forward, and again in backward) and
            # reduce-scatters of its gradients, synchronous on gloo and timed where they run; each
            # counted at (n-1)/n of the gathered size: the layers hold 272 and 68 float32 values.
            self.assertEqual(rank["kinds"], ["S"])
            self.assertGreaterEqual(rank["count"], 8)
            self.assertEqual(rank["timed"], [True])
            self.assertEqual(sorted(set(rank["bytes"])), [68 * 4 // 2, 272 * 4 // 2])


if __name__ == "__main__":
    unittest.main()
