"""The hook's socket never outlives the training process in its children (forked or exec'd).

A DataLoader worker is forked from the training process. Had it kept a copy of the websocket's
descriptor, a training process killed with SIGKILL would leave its connection open until the
last worker exits, and the sidecar would see the rank go only then.
"""

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time
import unittest

import stepscope

from .fake_sidecar import FakeSidecar, wait_until
from .test_process import HOOK_DIR, run_script

PR_SET_CHILD_SUBREAPER = 36
HAS_PROC_FD = os.path.isdir("/proc/self/fd")


def _environ(url):
    environ = dict(os.environ)
    environ["PYTHONPATH"] = HOOK_DIR + os.pathsep + environ.get("PYTHONPATH", "")
    environ["STEPSCOPE_URL"] = url
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STEPSCOPE_JOB", "STEPSCOPE_TOKEN"):
        environ.pop(name, None)
    return environ


def _set_subreaper(on: bool) -> bool:
    """Adopt orphaned descendants (Linux), so that the test can reap a killed process's child."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _socket_inodes_script():
    return textwrap.dedent(
        """
        import os
        inodes = []
        for name in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink("/proc/self/fd/" + name)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.append(target[8:-1])
        print(" ".join(inodes))
        """
    )


class KilledParentTest(unittest.TestCase):
    @unittest.skipUnless(hasattr(os, "fork"), "needs fork()")
    def test_sidecar_sees_the_connection_end_when_the_parent_is_killed_not_when_its_worker_exits(self):
        if not _set_subreaper(True):
            self.skipTest("needs prctl(PR_SET_CHILD_SUBREAPER) to reap the orphaned worker")
        self.addCleanup(_set_subreaper, False)
        server = FakeSidecar()
        self.addCleanup(server.stop)
        script = textwrap.dedent(
            """
            import os, time, stepscope
            scope = stepscope.init()
            for _ in range(3):
                scope.step()
            deadline = time.monotonic() + 10
            while not scope.stats()["acked"] == 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            # Whatever may still refer to the connection in the child (a frame of the sender thread
            # the fork interrupted, user code) must not keep it open there: hold one on purpose.
            held = scope._sender._ws
            pid = os.fork()
            if pid == 0:  # a DataLoader worker: outlives its parent by far
                time.sleep(30)
                os._exit(0)
            print(pid, flush=True)
            time.sleep(60)
            """
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", script], env=_environ(server.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        child = None

        def cleanup():
            for pid in (proc.pid, child):
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
            if child is not None:
                try:
                    os.waitpid(child, 0)  # adopted by this process (subreaper) once its parent died
                except ChildProcessError:
                    pass

        self.addCleanup(cleanup)
        line = proc.stdout.readline()
        self.assertTrue(line.strip(), proc.stderr.read().decode() if proc.poll() is not None else "no child pid")
        child = int(line)
        self.assertTrue(wait_until(lambda: server.store.seqs() == [1, 2, 3]))
        self.assertEqual((server.connections, server.ended), (1, []))

        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait()
        self.assertTrue(wait_until(lambda: server.ended, timeout=5.0), "the connection outlived its process")
        eof_after = server.ended[0][1] - killed_at
        self.assertEqual(os.waitpid(child, os.WNOHANG), (0, 0), "the worker is still running")
        self.assertLess(eof_after, 0.5)


@unittest.skipUnless(HAS_PROC_FD, "needs /proc/self/fd")
class InheritanceTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeSidecar()
        self.addCleanup(self.server.stop)

    def test_the_socket_is_not_inherited_across_exec(self):
        scope = stepscope.init(url=self.server.url)
        self.addCleanup(scope.close, 0.5)
        self.assertTrue(wait_until(lambda: scope.stats()["connected"]))
        fd = scope._sender._ws.fileno()
        self.assertFalse(os.get_inheritable(fd))
        inode = str(os.fstat(fd).st_ino)
        # close_fds=False: only the descriptor's own close-on-exec flag keeps it out of the child.
        result = subprocess.run(
            [sys.executable, "-c", _socket_inodes_script()], close_fds=False, capture_output=True, text=True, timeout=30
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn(inode, result.stdout.split())

    def test_a_fork_mid_connect_leaves_no_socket_in_the_child(self):
        # A socket the sender thread has opened but not yet made a connection of is listed from
        # its creation: a fork at that moment points the child's copy at /dev/null too.
        result = run_script(
            """
            import os, socket
            from stepscope import _ws
            sock = _ws._new_socket(socket.AF_INET, socket.SOCK_STREAM, 0)
            fd = sock.fileno()
            pid = os.fork()
            if pid == 0:
                ok = os.readlink("/proc/self/fd/%d" % fd) == "/dev/null" and not os.get_inheritable(fd)
                ok = ok and _ws.open_fds() == set()
                sock.close()  # closing the child's stale object is harmless
                os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0, status
            assert os.readlink("/proc/self/fd/%d" % fd).startswith("socket:["), "the parent's socket is untouched"
            assert _ws.open_fds() == {fd}
            _ws._close_socket(sock)
            assert _ws.open_fds() == set()
            print("ok")
            """,
            self.server.url,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "ok")

    def test_forked_child_holds_no_copy_of_the_connection(self):
        result = run_script(
            """
            import os, stepscope
            scope = stepscope.init()
            scope.step()
            while not scope.stats()["connected"]:
                pass
            held = scope._sender._ws  # a reference that outlives the fork (see the test above)
            inode = str(os.fstat(held.fileno()).st_ino)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(read)
                    links = []
                    for name in os.listdir("/proc/self/fd"):
                        try:
                            links.append(os.readlink("/proc/self/fd/" + name))
                        except OSError:
                            pass  # the listing's own descriptor
                    os.write(write, (("socket:[%s]" % inode) in links and b"held" or b"free"))
                finally:
                    os._exit(0)
            os.close(write)
            answer = os.read(read, 16).decode()
            os.waitpid(pid, 0)
            scope.step()
            print(answer, bool(scope.close(5.0)))
            """,
            self.server.url,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["free", "True"])
        self.assertEqual(self.server.connections, 1)  # the child sent no close frame on the parent's connection
        self.assertEqual(self.server.store.seqs(), [1, 2])


if __name__ == "__main__":
    unittest.main()
