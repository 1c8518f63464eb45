"""The allocator statistics the hook forwards as `counters` of source "memory" (issue 13).

There is no GPU here: a stand-in torch.cuda answers with literal outputs of the real calls
(tests/fixtures/cuda_memory.py, sources in tests/SOURCES.md). Real torch, where installed, checks
that the hook never initialises CUDA.
"""

import importlib.util
import os
import subprocess
import sys
import types
import unittest
from unittest import mock

from stepscope import _counters, _memory
from stepscope._counters import CounterSchedule
from stepscope._memory import MemorySampler

from .fake_sidecar import FakeSidecar, wait_until
from .fixtures import cuda_memory as real

KEYS = {
    "at_ns", "device", "allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "alloc_retries",
    "ooms", "inactive_split_bytes", "total_bytes", "free_bytes",
}


class StandInCuda:
    """torch.cuda as the hook calls it, answering from fixtures; a call that would initialise,
    synchronise or reset CUDA is recorded in ``forbidden`` (the hook swallows the exception)."""

    def __init__(self, stats, initialized=True, mem_info=None, total=None):
        self.stats = stats  # device -> list of dicts, one per read (the last one repeats)
        self.initialized = initialized
        self.mem_info = mem_info if mem_info is not None else {}
        self.total = total if total is not None else {}
        self.calls = []
        self.forbidden = []  # what the hook called that it must not (it would swallow an exception)

    def is_initialized(self):
        self.calls.append("is_initialized")
        return self.initialized

    def device_count(self):
        self.calls.append("device_count")
        return len(self.stats)

    def memory_stats(self, device=None):
        self.calls.append(("memory_stats", device))
        reads = self.stats[device]
        return dict(reads.pop(0) if len(reads) > 1 else reads[0])

    def mem_get_info(self, device=None):
        self.calls.append(("mem_get_info", device))
        info = self.mem_info.get(device)
        if isinstance(info, Exception):
            raise info
        if info is None:
            raise RuntimeError("CUDA error: invalid device ordinal")
        return info

    def get_device_properties(self, device):
        self.calls.append(("get_device_properties", device))
        total = self.total.get(device)
        if total is None:
            raise AssertionError("get_device_properties(%r) read although not expected" % device)
        return types.SimpleNamespace(total_memory=total, name="Tesla V100-SXM2-16GB")

    FORBIDDEN = ("init", "_lazy_init", "synchronize", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache", "set_device")

    def __getattr__(self, name):
        if name in StandInCuda.FORBIDDEN:
            self.__dict__["forbidden"].append(name)
            raise AssertionError("the hook must not call torch.cuda.%s" % name)
        raise AttributeError(name)  # what the stand-in does not serve (the env fingerprint's current_device)


def torch_with(cuda):
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    return torch


class SamplerTest(unittest.TestCase):
    def samples(self, cuda, at_ns=7, sampler=None):
        sampler = sampler or MemorySampler({"torch": torch_with(cuda)})
        samples = sampler.samples(at_ns)
        self.assertEqual(cuda.forbidden, [])
        return samples

    def test_nothing_without_torch(self):
        modules = {}
        self.assertEqual(MemorySampler(modules).samples(1), [])
        self.assertNotIn("torch", modules)

    def test_nothing_while_cuda_is_not_initialised(self):
        cuda = StandInCuda({0: [real.STATS_RETRIES_2]}, initialized=False)
        self.assertEqual(self.samples(cuda), [])
        self.assertEqual(cuda.calls, ["is_initialized"])  # no device_count, no memory_stats: nothing that could init

    def test_a_device_in_use(self):
        cuda = StandInCuda({0: [real.STATS_RETRIES_2]}, mem_info={0: real.MEM_GET_INFO_V100})
        [sample] = self.samples(cuda, at_ns=123)
        self.assertEqual(set(sample), KEYS)
        self.assertEqual(
            sample,
            {
                "at_ns": 123,
                "device": 0,
                "allocated_bytes": None,  # not in this passage of the dump: absent, not 0
                "reserved_bytes": 50331648,
                "peak_allocated_bytes": None,
                "alloc_retries": 2,
                "ooms": 0,
                "inactive_split_bytes": 7514112,
                "total_bytes": 16945512448,
                "free_bytes": 16488464384,
            },
        )

    def test_allocated_and_peak(self):
        # A passage without reserved_bytes: the device is known from an earlier read.
        cuda = StandInCuda({0: [real.STATS_RETRIES_2, real.STATS_ALLOCATED]}, mem_info={0: real.MEM_GET_INFO_V100})
        sampler = MemorySampler({"torch": torch_with(cuda)})
        self.samples(cuda, sampler=sampler)
        [sample] = self.samples(cuda, sampler=sampler)
        self.assertEqual(sample["allocated_bytes"], 42817536)
        self.assertEqual(sample["peak_allocated_bytes"], 14244352000)
        self.assertIsNone(sample["reserved_bytes"])
        self.assertIsNone(sample["alloc_retries"])

    def test_cumulative_counters_stay_cumulative(self):
        cuda = StandInCuda({0: [real.STATS_RETRIES_2, real.STATS_AFTER_OOM]}, mem_info={0: real.MEM_GET_INFO_V100})
        sampler = MemorySampler({"torch": torch_with(cuda)})
        first = self.samples(cuda, 1, sampler)[0]
        second = self.samples(cuda, 2, sampler)[0]
        self.assertEqual((first["alloc_retries"], first["ooms"]), (2, 0))
        self.assertEqual((second["alloc_retries"], second["ooms"]), (31, 1))
        self.assertEqual(second["reserved_bytes"], 50331648)

    def test_a_device_never_used_is_left_alone(self):
        # Device 1 is visible but this process never allocated there: no sample, and no
        # mem_get_info on it (which would create a CUDA context on that GPU).
        cuda = StandInCuda({0: [real.STATS_RETRIES_2], 1: [real.STATS_UNUSED]}, mem_info={0: real.MEM_GET_INFO_V100})
        samples = self.samples(cuda)
        self.assertEqual([s["device"] for s in samples], [0])
        self.assertNotIn(("mem_get_info", 1), cuda.calls)

    def test_total_from_device_properties_when_mem_get_info_fails(self):
        cuda = StandInCuda(
            {0: [real.STATS_RETRIES_2]}, mem_info={0: RuntimeError("CUDA error: out of memory")}, total={0: real.TOTAL_MEMORY_V100}
        )
        [sample] = self.samples(cuda)
        self.assertEqual(sample["total_bytes"], real.TOTAL_MEMORY_V100)
        self.assertIsNone(sample["free_bytes"])

    def test_unreadable_figures_are_none(self):
        broken = dict(real.STATS_RETRIES_2)
        broken.update({"num_alloc_retries": -1, "num_ooms": True, "inactive_split_bytes.all.current": 1.5})
        cuda = StandInCuda({0: [broken]}, mem_info={0: ("x", None)}, total={0: None})
        cuda.total = {}
        cuda.get_device_properties = lambda device: (_ for _ in ()).throw(RuntimeError("no"))
        [sample] = self.samples(cuda)
        for key in ("alloc_retries", "ooms", "inactive_split_bytes", "total_bytes", "free_bytes"):
            self.assertIsNone(sample[key], key)
        self.assertEqual(sample["reserved_bytes"], 50331648)

    def test_memory_stats_raising_is_no_sample(self):
        cuda = StandInCuda({0: [real.STATS_RETRIES_2]})
        cuda.memory_stats = lambda device=None: (_ for _ in ()).throw(RuntimeError("boom"))
        self.assertEqual(self.samples(cuda), [])


class ScheduleTest(unittest.TestCase):
    def test_memory_only_when_asked_and_at_most_once_a_second(self):
        cuda = StandInCuda({0: [real.STATS_RETRIES_2]}, mem_info={0: real.MEM_GET_INFO_V100})
        sampler = MemorySampler({"torch": torch_with(cuda)})
        schedule = CounterSchedule(memory_sampler=sampler)
        schedule.configure({"process": False, "nvml": False}, 0.0)
        schedule.sample_due(0.0, 1)
        self.assertEqual(schedule.take(), [])
        schedule.configure({"memory": True}, 0.0)
        for i, now in enumerate([0.0, 0.3, 0.6, 0.9, 1.0, 1.5, 2.2]):
            schedule.sample_due(now, i)
        [(source, samples)] = schedule.take()
        self.assertEqual(source, "memory")
        self.assertEqual([s["at_ns"] for s in samples], [0, 4, 6])

    def test_memory_sampler_is_made_only_when_asked(self):
        with mock.patch.object(_memory, "sampler", side_effect=AssertionError("made")):
            schedule = CounterSchedule()
            schedule.configure({"process": False, "nvml": False, "interval_ms": 500}, 0.0)
        with mock.patch.object(_memory, "sampler", return_value=MemorySampler({})) as made:
            schedule.configure({"memory": True}, 0.0)
            schedule.sample_due(0.0, 1)
        made.assert_called_once()
        self.assertEqual(schedule.take(), [])  # no CUDA in use: nothing to send

    def test_counters_module_uses_the_memory_sampler(self):
        self.assertIs(_counters._memory, _memory)


class DeliveryTest(unittest.TestCase):
    """Through a scope and its sender thread to a sidecar stand-in that asks for memory."""

    def run_scope(self, counters, cuda):
        import stepscope

        server = FakeSidecar(counters=counters)
        self.addCleanup(server.stop)
        with mock.patch.dict(sys.modules, {"torch": torch_with(cuda)}):
            scope = stepscope.init(url=server.url, job="mem", rank=0, world_size=1, cuda=False, batch_interval=0.02)
            for _ in range(3):
                scope.step()
            if counters and counters.get("memory"):
                self.assertTrue(wait_until(lambda: server.of_type("counters"), timeout=5.0))
            self.assertTrue(scope.close(2.0))
        return server

    def test_memory_counters_reach_the_sidecar(self):
        cuda = StandInCuda({0: [real.STATS_AFTER_OOM]}, mem_info={0: real.MEM_GET_INFO_V100})
        server = self.run_scope({"nvml": False, "interval_ms": 500, "process": False, "memory": True}, cuda)
        frames = server.of_type("counters")
        self.assertEqual({f["source"] for f in frames}, {"memory"})
        sample = frames[0]["samples"][0]
        hello = server.of_type("hello")[0]
        self.assertGreaterEqual(sample["at_ns"], hello["clock"]["mono_ns"])
        self.assertEqual((sample["device"], sample["alloc_retries"], sample["ooms"]), (0, 31, 1))
        self.assertEqual(sample["total_bytes"], 16945512448)
        self.assertEqual(cuda.forbidden, [])

    def test_no_memory_counters_unless_asked(self):
        # An older sidecar does not know the source (it would refuse the frame): not asked, not sent.
        cuda = StandInCuda({0: [real.STATS_AFTER_OOM]}, mem_info={0: real.MEM_GET_INFO_V100})
        server = self.run_scope({"nvml": False, "interval_ms": 500, "process": False}, cuda)
        self.assertEqual(server.of_type("counters"), [])
        self.assertNotIn(("memory_stats", 0), cuda.calls)
        self.assertEqual(cuda.forbidden, [])


@unittest.skipUnless(importlib.util.find_spec("torch"), "torch is not installed for this Python")
class RealTorchTest(unittest.TestCase):
    def test_real_torch_without_cuda_in_use_gives_nothing_and_initialises_nothing(self):
        # In a child: this test process must not import torch for the other tests.
        code = (
            "import torch\n"
            "from stepscope._memory import MemorySampler\n"
            "print(MemorySampler().samples(1), torch.cuda.is_initialized())\n"
        )
        hook = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=hook, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["[]", "False"])


if __name__ == "__main__":
    unittest.main()
