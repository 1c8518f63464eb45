"""Whole-process behaviour, in child interpreters: atexit, fork, and a real torch when present."""

import importlib.util
import os
import subprocess
import sys
import textwrap
import unittest

import stepscope

from .fake_sidecar import FakeSidecar

HOOK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(stepscope.__file__)))
HAS_TORCH = importlib.util.find_spec("torch") is not None


def run_script(source, url, timeout=60, **env):
    environ = dict(os.environ)
    environ["PYTHONPATH"] = HOOK_DIR + os.pathsep + environ.get("PYTHONPATH", "")
    environ["STEPSCOPE_URL"] = url
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STEPSCOPE_JOB", "STEPSCOPE_TOKEN"):
        environ.pop(name, None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(source)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ProcessTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeSidecar()
        self.addCleanup(self.server.stop)

    def check(self, result):
        self.assertEqual(result.returncode, 0, result.stderr)
        return result

    def test_exit_without_close_sends_end_exit(self):
        result = self.check(
            run_script(
                """
                import stepscope
                scope = stepscope.init()
                for _ in scope.loader(range(40)):
                    scope.step()
                print("done")
                """,
                self.server.url,
            )
        )
        self.assertEqual(result.stdout.strip(), "done")
        self.assertEqual(result.stderr, "")
        self.assertEqual(self.server.store.seqs(), list(range(1, 41)))
        self.assertEqual([m["reason"] for m in self.server.of_type("end")], ["exit"])

    def test_forked_child_stays_quiet(self):
        result = self.check(
            run_script(
                """
                import os, threading, stepscope
                from stepscope import _ws
                scope = stepscope.init()
                for _ in range(5):
                    scope.step()
                pid = os.fork()
                if pid == 0:
                    # Inert: no thread, no socket, every call a no-op that records nothing.
                    assert threading.active_count() == 1, threading.enumerate()
                    assert _ws.open_fds() == set()
                    assert type(scope).__name__ == "_ForkedScope"
                    for _ in scope.loader(range(50)):
                        with scope.phase("compute"):
                            pass
                        scope.step()
                    assert len(scope._queue) == 0
                    assert scope.close(timeout=5.0) is False
                    result = scope.close_result
                    assert not result and result.records == 0 and "forked child" in result.reason, result
                    assert scope.close(timeout=5.0) is False and scope.close_result is result
                    assert scope.stats()["closed"] and scope.stats()["records"] == 0
                    again = stepscope.init(exit_timeout=0.1)  # a fresh scope in the child works
                    again.step()
                    os._exit(0 if again.close(timeout=5.0) else 3)
                _, status = os.waitpid(pid, 0)
                assert os.WEXITSTATUS(status) == 0, status
                for _ in range(5):
                    scope.step()
                assert scope.close(timeout=5.0)
                # The child closed nothing of the parent's: one connection all along.
                assert scope.stats()["connects"] == 1, scope.stats()
                print(os.getpid(), pid)
                """,
                self.server.url,
            )
        )
        # Python 3.12+ itself warns about fork() in a process with threads; the hook says nothing.
        self.assertNotIn("stepscope", result.stderr)
        parent_pid, child_pid = map(int, result.stdout.split())
        hellos = {m["pid"]: m["session"] for m in self.server.of_type("hello")}
        self.assertEqual(set(hellos), {parent_pid, child_pid})  # the child's own new scope only
        self.assertEqual(self.server.store.seqs(hellos[parent_pid]), list(range(1, 11)))
        self.assertEqual(self.server.store.seqs(hellos[child_pid]), [1])
        self.assertEqual(sorted(m["reason"] for m in self.server.of_type("end")), ["close", "close"])

    def test_exit_without_close_reports_what_was_lost(self):
        server_url = self.server.url
        self.server.stop()  # nobody listens there any more
        result = self.check(
            run_script(
                """
                import stepscope
                scope = stepscope.init(exit_timeout=0.2)
                for _ in range(40):
                    scope.step()
                """,
                server_url,
            )
        )
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 2, result.stderr)
        self.assertIn("unreachable", lines[0])
        self.assertRegex(lines[1], r"^stepscope: at exit: 0 of 40 step records delivered to the sidecar; 40 not delivered: ")

    @unittest.skipUnless(HAS_TORCH, "torch is not installed for this interpreter")
    def test_with_torch_dataloader_and_workers(self):
        result = self.check(
            run_script(
                """
                import os, torch, stepscope
                from torch.utils.data import DataLoader, TensorDataset
                data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
                loader = DataLoader(data, batch_size=8, num_workers=2, pin_memory=False)
                model = torch.nn.Linear(4, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                scope = stepscope.init(job="torch-test")
                for x, y in scope.loader(loader):
                    with scope.phase("h2d"):
                        x, y = x.to("cpu"), y.to("cpu")
                    with scope.phase("compute"):
                        loss = torch.nn.functional.mse_loss(model(x), y)
                        opt.zero_grad(); loss.backward(); opt.step()
                    scope.step(samples=x.shape[0])
                assert scope.close(timeout=5.0), scope.stats()
                print(torch.__version__)
                """,
                self.server.url,
            )
        )
        hellos = self.server.of_type("hello")
        self.assertEqual(len(hellos), 1, "DataLoader workers must not connect")
        env = hellos[0]["env"]
        loader_env = env.get("loader") or self.server.of_type("env")[0]["env"]["loader"]
        self.assertEqual(env["torch"], result.stdout.strip())
        self.assertEqual(loader_env["batch_size"], 8)
        self.assertEqual(loader_env["num_workers"], 2)
        self.assertIs(loader_env["pin_memory"], False)
        rows = self.server.rows()
        self.assertEqual(len(rows), 8)
        self.assertTrue(all(r["samples"] == 8 and r["gpu_compute_ns"] is None for r in rows))


if __name__ == "__main__":
    unittest.main()
