import os
import subprocess
import sys
import tempfile
import threading
import types
import unittest
from unittest import mock

from stepscope._counters import CounterSchedule, GpmReader, NvmlSampler, ProcessSampler

HAS_PROC = os.path.exists("/proc/self/stat")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def stat_line(pid, ppid, utime=0, stime=0, comm="python (x)"):
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 30
    return "%d (%s) %s\n" % (pid, comm, " ".join(fields))


class FakeProcTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.root]))
        self.proc = os.path.join(self.root, "proc")
        self.cgroup = os.path.join(self.root, "cgroup")
        write(os.path.join(self.proc, "100/stat"), stat_line(100, 1, utime=250, stime=50))
        write(os.path.join(self.proc, "100/statm"), "5000 1200 300 1 0 900 0\n")
        write(os.path.join(self.proc, "101/stat"), stat_line(101, 100, utime=100, stime=100, comm="pt_data_worker"))
        write(os.path.join(self.proc, "102/stat"), stat_line(102, 100, utime=50, stime=0))
        write(os.path.join(self.proc, "103/stat"), stat_line(103, 1))
        os.makedirs(os.path.join(self.proc, "self"), exist_ok=True)

    def sampler(self):
        return ProcessSampler(pid=100, proc_root=self.proc, cgroup_root=self.cgroup)

    def test_process_tree(self):
        sample = self.sampler().sample(at_ns=42)
        self.assertEqual(sample["at_ns"], 42)
        tick = os.sysconf("SC_CLK_TCK")
        self.assertAlmostEqual(sample["cpu_main_s"], 300 / tick, places=3)
        self.assertEqual(sample["workers"], 2)
        self.assertAlmostEqual(sample["cpu_workers_s"], 250 / tick, places=3)
        self.assertEqual(sample["rss_bytes"], 1200 * os.sysconf("SC_PAGE_SIZE"))

    def test_workers_come_and_go(self):
        sampler = self.sampler()
        self.assertEqual(sampler.sample(0)["workers"], 2)
        os.remove(os.path.join(self.proc, "101/stat"))
        os.rmdir(os.path.join(self.proc, "101"))
        write(os.path.join(self.proc, "104/stat"), stat_line(104, 100))
        write(os.path.join(self.proc, "105/stat"), stat_line(105, 100))
        self.assertEqual(sampler.sample(0)["workers"], 3)

    def test_children_the_kernel_lists_per_thread(self):
        # Where the kernel lists them, the children come from there and no other process is read:
        # 102 (a child by its stat) is not listed, so it is not counted.
        write(os.path.join(self.proc, "100/task/100/children"), "101\n")
        write(os.path.join(self.proc, "100/task/107/children"), "")
        write(os.path.join(self.proc, "100/task/108/children"), "104 105")
        write(os.path.join(self.proc, "104/stat"), stat_line(104, 100, utime=7))
        sample = self.sampler().sample(0)
        self.assertEqual(sample["workers"], 3)
        self.assertAlmostEqual(sample["cpu_workers_s"], 207 / os.sysconf("SC_CLK_TCK"), places=3)

    def test_cgroup_v2(self):
        write(os.path.join(self.proc, "100/cgroup"), "0::/kubepods/pod1\n")
        base = os.path.join(self.cgroup, "kubepods/pod1")
        write(os.path.join(base, "cpu.stat"), "usage_usec 900\nnr_periods 10\nnr_throttled 4\nthrottled_usec 777\n")
        write(os.path.join(base, "cpu.max"), "250000 100000\n")
        sample = self.sampler().sample(0)
        self.assertEqual(
            {k: v for k, v in sample.items() if k.startswith("cgroup_")},
            {"cgroup_nr_periods": 10, "cgroup_nr_throttled": 4, "cgroup_throttled_usec": 777,
             "cgroup_usage_usec": 900, "cgroup_quota_cores": 2.5},
        )
        write(os.path.join(base, "cpu.max"), "max 100000\n")
        self.assertIsNone(self.sampler().sample(0)["cgroup_quota_cores"])

    def test_cgroup_v2_namespaced_root(self):
        write(os.path.join(self.proc, "100/cgroup"), "0::/\n")
        write(os.path.join(self.cgroup, "cpu.stat"), "usage_usec 5\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
        write(os.path.join(self.cgroup, "cpu.max"), "max 100000\n")
        self.assertEqual(self.sampler().sample(0)["cgroup_usage_usec"], 5)

    def test_cgroup_v1(self):
        write(os.path.join(self.proc, "100/cgroup"), "4:cpu,cpuacct:/docker/abc\n1:name=systemd:/x\n")
        base = os.path.join(self.cgroup, "cpu,cpuacct/docker/abc")
        write(os.path.join(base, "cpu.stat"), "nr_periods 8\nnr_throttled 2\nthrottled_time 5000000\n")
        write(os.path.join(base, "cpu.cfs_quota_us"), "50000\n")
        write(os.path.join(base, "cpu.cfs_period_us"), "100000\n")
        write(os.path.join(base, "cpuacct.usage"), "3000000\n")
        sample = self.sampler().sample(0)
        self.assertEqual(sample["cgroup_throttled_usec"], 5000)
        self.assertEqual(sample["cgroup_usage_usec"], 3000)
        self.assertEqual(sample["cgroup_quota_cores"], 0.5)
        write(os.path.join(base, "cpu.cfs_quota_us"), "-1\n")
        self.assertIsNone(self.sampler().sample(0)["cgroup_quota_cores"])

    def test_no_cgroup_files(self):
        sample = self.sampler().sample(0)
        self.assertFalse(any(k.startswith("cgroup_") for k in sample))


@unittest.skipUnless(HAS_PROC, "no /proc on this platform")
class RealProcTest(unittest.TestCase):
    def test_this_process_and_a_child(self):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        sample = ProcessSampler().sample(1)
        self.assertGreater(sample["cpu_main_s"], 0)
        self.assertGreater(sample["rss_bytes"], 1 << 20)
        self.assertGreaterEqual(sample["workers"], 1)
        for key, value in sample.items():
            self.assertTrue(value is None or value >= 0, key)

    def test_a_child_started_by_another_thread(self):
        children = []
        thread = threading.Thread(target=lambda: children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])))
        thread.start()
        thread.join()
        child = children[0]
        self.addCleanup(child.wait)
        self.addCleanup(child.kill)
        sampler = ProcessSampler()
        self.assertIn(child.pid, sampler._children())


class FakeNvml(types.ModuleType):
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self):
        super().__init__("pynvml")
        self.inits = 0
        self.lookups = []

    def nvmlInit(self):
        self.inits += 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.lookups.append(uuid)
        return ("h", uuid)

    def nvmlDeviceGetHandleByIndex(self, index):
        self.lookups.append(index)
        return ("h", index)

    def nvmlDeviceGetIndex(self, h):
        return 3

    def nvmlDeviceGetUUID(self, h):
        return b"GPU-abc"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=10 << 30, total=141 << 30)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 61

    def nvmlDeviceGetPowerUsage(self, h):
        return 512_500

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlDeviceGetClockInfo(self, h, clock):
        return {1: 1980, 2: 3201}[clock]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetPerformanceState(self, h):
        return 0

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")


class NvmlTest(unittest.TestCase):
    def setUp(self):
        self.nvml = FakeNvml()
        patcher = mock.patch.dict(sys.modules, {"pynvml": self.nvml})
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_sample(self):
        sampler = NvmlSampler.create(lambda: {"gpu_uuid": "GPU-abc"})
        self.assertEqual(
            sampler.sample(7),
            {"at_ns": 7, "index": 3, "uuid": "GPU-abc", "name": "NVIDIA H200", "util_gpu": 97, "util_mem": 40,
             "mem_used_mib": 10240, "mem_total_mib": 144384, "temp_c": 61, "power_w": 512.5,
             "power_limit_w": 700.0, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "mem_clock_mhz": 3201,
             "pstate": "P0", "throttle_reasons": None},
        )
        sampler.sample(8)
        self.assertEqual(self.nvml.lookups, ["GPU-abc"])

    def test_device_guess_without_torch(self):
        env = {}
        sampler = NvmlSampler.create(lambda: env)
        with mock.patch.dict(os.environ, {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,5,6"}):
            sampler.sample(0)
            env["gpu_uuid"] = "GPU-xyz"  # torch initialised CUDA later
            sampler.sample(0)
        self.assertEqual(self.nvml.lookups, [5, "GPU-xyz"])

    def test_missing_pynvml(self):
        with mock.patch.dict(sys.modules, {"pynvml": None}):
            self.assertIsNone(NvmlSampler.create())


FAKE_PYNVML = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "test", "fixtures", "fake_pynvml", "pynvml.py")


def load_fake_pynvml():
    """test/fixtures/fake_pynvml: nvidia-ml-py's own GPM structures and constants, an H100's answers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fake_pynvml_%d" % id(object()), FAKE_PYNVML)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@unittest.skipUnless(os.path.exists(FAKE_PYNVML), "the repository's test fixtures are not here")
class GpmTest(unittest.TestCase):
    """SM, tensor-pipe and DRAM activity through NVML's GPM, on nvidia-ml-py's real ctypes structures."""

    def setUp(self):
        self.nvml = load_fake_pynvml()
        self.handle = self.nvml.nvmlDeviceGetHandleByIndex(0)

    def test_the_second_reading_has_the_activities_as_fractions(self):
        gpm = GpmReader(self.nvml)
        self.assertEqual(gpm.read(self.handle), {})  # one sample: no interval yet
        expected = {"sm_active": 0.935, "sm_occupancy": 0.412, "tensor_active": 0.031, "dram_active": 0.227}
        for _ in range(3):
            self.assertEqual(gpm.read(self.handle), expected)
        # Each interval's older sample is freed: one is held for the next interval, none leak.
        self.assertEqual(len(self.nvml._samples), 1)
        self.assertEqual([call for call in self.nvml.GPM_CALLS if call[0] == "metrics"], [("metrics", 4)] * 3)

    def test_a_gpu_without_gpm_adds_nothing(self):
        with mock.patch.dict(os.environ, {"STEPSCOPE_FAKE_GPM": "0"}):
            gpm = GpmReader(self.nvml)
            self.assertEqual([gpm.read(self.handle) for _ in range(3)], [{}, {}, {}])
        self.assertEqual(self.nvml.GPM_CALLS, [])

    def test_a_failure_turns_it_off_quietly(self):
        gpm = GpmReader(self.nvml)
        gpm.read(self.handle)
        with mock.patch.object(self.nvml, "nvmlGpmMetricsGet", side_effect=self.nvml.NVMLError(3)):
            self.assertEqual(gpm.read(self.handle), {})
        self.assertEqual(gpm.read(self.handle), {})
        self.assertEqual(self.nvml._samples, {})  # everything it took was freed

    def test_a_binding_without_gpm(self):
        old = types.ModuleType("pynvml")
        self.assertEqual(GpmReader(old).read(object()), {})

    def test_through_the_sampler(self):
        with mock.patch.dict(sys.modules, {"pynvml": self.nvml}):
            sampler = NvmlSampler.create()
        first, second = sampler.sample(1), sampler.sample(2)
        self.assertNotIn("sm_active", first)
        self.assertEqual((second["name"], second["sm_active"], second["tensor_active"]), ("NVIDIA H100 80GB HBM3", 0.935, 0.031))

    def test_the_structures_are_nvidia_ml_pys(self):
        try:
            import pynvml as real
        except ImportError:
            self.skipTest("nvidia-ml-py is not installed here (python-hook/tests/SOURCES.md records the comparison)")
        import ctypes

        for name in ("c_nvmlGpmMetricsGet_t", "c_nvmlGpmMetric_t", "c_nvmlGpmSupport_t"):
            ours, theirs = getattr(self.nvml, name), getattr(real, name)
            self.assertEqual([f[0] for f in ours._fields_], [f[0] for f in theirs._fields_], name)
            if real.NVML_GPM_METRIC_MAX == self.nvml.NVML_GPM_METRIC_MAX:
                self.assertEqual(ctypes.sizeof(ours), ctypes.sizeof(theirs), name)
        for key, constant in GpmReader.METRICS:
            self.assertEqual(getattr(real, constant), getattr(self.nvml, constant), constant)


class ScheduleTest(unittest.TestCase):
    def setUp(self):
        self.process = mock.Mock()
        self.process.sample.side_effect = lambda at_ns: {"at_ns": at_ns}
        self.nvml = mock.Mock()
        self.nvml.sample.side_effect = lambda at_ns: {"at_ns": at_ns, "util_gpu": 1}
        self.schedule = CounterSchedule(process_sampler=self.process, nvml_sampler=self.nvml)

    def test_nothing_unless_asked(self):
        self.schedule.sample_due(100.0, 1)
        self.schedule.configure(None, 0.0)
        self.schedule.sample_due(100.0, 1)
        self.assertEqual(self.schedule.take(), [])

    def test_intervals(self):
        self.schedule.configure({"process": True, "nvml": True, "interval_ms": 250}, now=0.0)
        for tick in range(21):  # 2 s in 100 ms cycles
            self.schedule.sample_due(tick / 10, tick)
        taken = dict(self.schedule.take())
        self.assertEqual([s["at_ns"] for s in taken["process"]], [0, 10, 20])
        self.assertEqual([s["at_ns"] for s in taken["nvml"]], [0, 3, 5, 8, 10, 13, 15, 18, 20])
        self.assertEqual(self.schedule.take(), [])

    def test_next_due_is_the_soonest_sampler_faster_than_asked(self):
        self.assertIsNone(self.schedule.next_due(0.5))
        self.schedule.configure({"process": True, "nvml": True, "interval_ms": 100}, now=5.0)
        self.assertEqual(self.schedule.next_due(0.5), 5.0)
        self.schedule.sample_due(5.0, 1)
        self.assertAlmostEqual(self.schedule.next_due(0.5), 5.1)
        self.assertAlmostEqual(self.schedule.next_due(2.0), 5.1)
        self.schedule.configure({"process": True}, now=5.0)  # nvml no longer asked for
        self.assertIsNone(self.schedule.next_due(0.5))  # the process sampler, every second, is not faster
        self.assertAlmostEqual(self.schedule.next_due(2.0), 5.0 + 1.0)

    def test_a_late_cycle_starts_the_beat_again_rather_than_sampling_twice(self):
        self.schedule.configure({"nvml": True, "interval_ms": 100}, now=0.0)
        at = [0.0, 0.1, 0.35, 0.351, 0.352, 0.4, 0.45]  # the cycle at 0.35 came 0.15 s late
        for tick, now in enumerate(at):
            self.schedule.sample_due(now, tick)
        self.assertEqual([s["at_ns"] for s in dict(self.schedule.take())["nvml"]], [0, 1, 2, 6])

    def test_only_process(self):
        self.schedule.configure({"process": True, "nvml": False, "interval_ms": 500}, now=0.0)
        self.schedule.sample_due(0.0, 5)
        self.assertEqual(self.schedule.take(), [("process", [{"at_ns": 5}])])

    def test_buffer_keeps_the_newest_64(self):
        self.schedule.configure({"process": True}, now=0.0)
        for second in range(100):
            self.schedule.sample_due(float(second), second)
        ((source, samples),) = self.schedule.take()
        self.assertEqual([s["at_ns"] for s in samples], list(range(36, 100)))

    def test_reconfigure_keeps_the_due_time(self):
        self.schedule.configure({"process": True}, now=0.0)
        self.schedule.sample_due(0.0, 0)
        self.schedule.configure({"process": True}, now=0.5)  # a reconnect
        self.schedule.sample_due(0.5, 1)
        self.assertEqual(len(dict(self.schedule.take())["process"]), 1)


if __name__ == "__main__":
    unittest.main()
