import os
import re
import types
import unittest
import uuid
from unittest import mock

from stepscope import _env, _log

from .quiet import Quiet

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "STEPSCOPE_JOB", "TORCHELASTIC_RUN_ID")


def clean_environ(**values):
    environ = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    environ.update(values)
    return mock.patch.dict(os.environ, environ, clear=True)


class IdentityTest(Quiet):
    def warnings(self):
        return self.stderr.getvalue().splitlines()

    def identity(self, **kwargs):
        _log.reset()
        self.stderr.seek(0)
        self.stderr.truncate()
        return _env.identity(**kwargs)

    def test_defaults(self):
        with clean_environ():
            ident = _env.identity(host="node7.cluster")
        self.assertEqual((ident["rank"], ident["local_rank"], ident["world_size"]), (0, 0, 1))
        self.assertEqual(ident["pid"], os.getpid())
        self.assertEqual(ident["host"], "node7.cluster")
        self.assertRegex(ident["job"], r"^node7-\d{8}T\d{6}Z-%d$" % os.getpid())

    def test_torchrun_variables(self):
        with clean_environ(RANK="5", WORLD_SIZE="16", LOCAL_RANK="1", TORCHELASTIC_RUN_ID="abc123"):
            ident = _env.identity(host="h")
        self.assertEqual((ident["rank"], ident["local_rank"], ident["world_size"]), (5, 1, 16))
        self.assertEqual(ident["job"], "torchrun-abc123")

    def test_launcher_without_run_id_uses_the_parent(self):
        with clean_environ(LOCAL_RANK="0", TORCHELASTIC_RUN_ID="none"):
            job = _env.identity(host="h")["job"]
        self.assertTrue(job.endswith("-%d" % os.getppid()), job)

    def test_explicit_arguments_and_job_env(self):
        with clean_environ(STEPSCOPE_JOB="from-env", RANK="9"):
            self.assertEqual(_env.identity()["job"], "from-env")
            ident = _env.identity(job="j" * 300, rank=2, world_size=4, local_rank=2)
        self.assertEqual(len(ident["job"]), 128)
        self.assertEqual((ident["rank"], ident["world_size"], ident["local_rank"]), (2, 4, 2))

    def test_valid_settings_say_nothing(self):
        with clean_environ(RANK="3", WORLD_SIZE="4", LOCAL_RANK="3"):
            ident = self.identity()
        self.assertEqual((ident["rank"], ident["world_size"], ident["local_rank"]), (3, 4, 3))
        with clean_environ(RANK="", WORLD_SIZE=" 2 "):  # empty is unset; spaces around a number are fine
            ident = self.identity()
        self.assertEqual((ident["rank"], ident["world_size"]), (0, 2))
        self.assertEqual(self.warnings(), [])

    def test_inconsistent_values_are_made_valid_and_said_once(self):
        cases = [
            (dict(RANK="garbage"), {}, (0, 1, 0), ["RANK='garbage' is not an integer: using rank 0"]),
            (dict(WORLD_SIZE="0"), {}, (0, 1, 0), ["WORLD_SIZE='0' is below 1: using world_size 1"]),
            (dict(RANK="-2", WORLD_SIZE="4"), {}, (0, 4, 0), ["RANK='-2' is negative: using rank 0"]),
            (dict(LOCAL_RANK="-1"), {}, (0, 1, 0), ["LOCAL_RANK='-1' is negative: using local_rank 0"]),
            (dict(LOCAL_RANK="1.5"), {}, (0, 1, 0), ["LOCAL_RANK='1.5' is not an integer: using local_rank 0"]),
            (
                dict(RANK="5", WORLD_SIZE="4"),
                {},
                (5, 6, 0),
                ["rank 5 (RANK='5') is not below world_size 4 (WORLD_SIZE='4'): using world_size 6"],
            ),
            (
                dict(RANK="3"),
                {},
                (3, 4, 0),
                ["rank 3 (RANK='3') is not below world_size 1 (default): using world_size 4"],
            ),
            ({}, dict(rank=7, world_size=2), (7, 8, 0), ["rank 7 (init(rank=7)) is not below world_size 2 (init(world_size=2)): using world_size 8"]),
            ({}, dict(rank="x", world_size=2), (0, 2, 0), ["init(rank='x') is not an integer: using rank 0"]),
            (dict(WORLD_SIZE="100000"), {}, (0, 65536, 0), ["WORLD_SIZE='100000' is beyond the sidecar's limit: using world_size 65536"]),
            (
                dict(RANK="x", WORLD_SIZE="-1", LOCAL_RANK="y"),
                {},
                (0, 1, 0),
                [
                    "RANK='x' is not an integer: using rank 0",
                    "LOCAL_RANK='y' is not an integer: using local_rank 0",
                    "WORLD_SIZE='-1' is below 1: using world_size 1",
                ],
            ),
        ]
        for environ, kwargs, expected, problems in cases:
            with self.subTest(environ=environ, kwargs=kwargs):
                with clean_environ(**environ):
                    ident = self.identity(**kwargs)
                    self.assertEqual((ident["rank"], ident["world_size"], ident["local_rank"]), expected)
                    self.assertEqual(self.warnings(), ["stepscope: invalid rank settings: " + "; ".join(problems)])
                    _env.identity(**kwargs)  # said once: a second init in the process adds no line
                    self.assertEqual(len(self.warnings()), 1)

    def test_session_is_random(self):
        self.assertNotEqual(_env.identity()["session"], _env.identity()["session"])

    def test_process_start_time(self):
        started = _env.process_start_time(os.getpid())
        if started is None:
            self.skipTest("no /proc on this platform")
        import time

        self.assertLess(abs(time.time() - started), 24 * 3600)
        self.assertIsNone(_env.process_start_time(2**22 + 12345))


class FingerprintTest(unittest.TestCase):
    def test_basic_keys(self):
        with mock.patch.dict(os.environ, {"CUDA_VISIBLE_DEVICES": "0,1"}):
            env = _env.fingerprint("9.9.9")
        self.assertEqual(env["hook"], "9.9.9")
        self.assertEqual(env["cuda_visible_devices"], "0,1")
        self.assertTrue(re.match(r"^\d+\.\d+", env["python"]))

    def test_gpu_uuid_formats(self):
        raw = uuid.UUID("12345678-1234-5678-1234-567812345678")
        self.assertEqual(_env.format_gpu_uuid(types.SimpleNamespace(bytes=raw.bytes)), "GPU-" + str(raw))
        self.assertEqual(_env.format_gpu_uuid(str(raw)), "GPU-" + str(raw))
        self.assertEqual(_env.format_gpu_uuid("GPU-" + str(raw)), "GPU-" + str(raw))
        self.assertIsNone(_env.format_gpu_uuid(None))

    def test_loader_fingerprint_is_tolerant(self):
        class Loader:
            batch_size = None
            num_workers = 2
            dataset = ()

            @property
            def pin_memory(self):
                raise RuntimeError("no")

            prefetch_factor = object()

        env = _env.loader_fingerprint(Loader())
        self.assertEqual(env["num_workers"], 2)
        self.assertNotIn("batch_size", env)
        self.assertNotIn("pin_memory", env)
        self.assertIsInstance(env["prefetch_factor"], str)
        self.assertTrue(_env.looks_like_dataloader(Loader()))
        self.assertFalse(_env.looks_like_dataloader([1, 2]))


if __name__ == "__main__":
    unittest.main()
