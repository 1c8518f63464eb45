"""Counters only the hook can read, for `counters` frames: its process tree and cgroup from
/proc and /sys, its own GPU through NVML (``pynvml``, from the ``nvidia-ml-py`` package) -- with,
on GPUs that have GPM (Hopper and newer), the profiling activities DCGM would export (:class:`GpmReader`)
-- and the framework's allocator statistics (``_memory``: torch's CUDA caching allocator).

Samplers run on the sender thread when the sidecar's `welcome` asks for them (a source the sidecar
does not name is never sent: an older sidecar refuses sources it does not know). A figure that
cannot be read is None; a sampler never raises. A sampler returns one sample (``sample``), the
memory sampler a list (``samples``: one per device in use, none while CUDA is not in use).
"""

from __future__ import annotations

import os
import time

from . import _memory

__all__ = ["CounterSchedule", "ProcessSampler", "NvmlSampler", "GpmReader"]

PROCESS_INTERVAL_S = 1.0
# The training thread (its kernel thread id), set by the scope made on it: its CPU and its wait for
# a CPU come from /proc/self/task/<tid>/schedstat. Loader workers that take the cores the step needs
# make it wait there, which no phase of the step shows (issue 26).
_training_tid = [None]


def set_training_thread(native_id):
    _training_tid[0] = native_id
_MAX_SAMPLES = 64  # per `counters` frame; older samples are dropped while disconnected


class CounterSchedule:
    """What the sidecar's `welcome` asked for, when each sampler is next due, and the samples
    not sent yet. Runs on the sender thread."""

    def __init__(self, gpu_env=None, *, process_sampler=None, nvml_sampler=None, memory_sampler=None):
        self._gpu_env = gpu_env
        self._samplers = {"process": process_sampler, "nvml": nvml_sampler, "memory": memory_sampler}
        self._created = {name for name, sampler in self._samplers.items() if sampler is not None}
        self._plan = {}  # source -> [interval_s, next_due]
        self._buffers = {}

    def configure(self, wants, now: float) -> None:
        wants = wants if isinstance(wants, dict) else {}
        plan = {}
        if wants.get("process") is True and self._sampler("process") is not None:
            plan["process"] = [PROCESS_INTERVAL_S, now]
        if wants.get("nvml") is True and self._sampler("nvml") is not None:
            interval_ms = wants.get("interval_ms")
            interval = interval_ms / 1000.0 if isinstance(interval_ms, (int, float)) and interval_ms > 0 else 0.5
            plan["nvml"] = [min(max(interval, 0.1), 60.0), now]
        if wants.get("memory") is True and self._sampler("memory") is not None:
            plan["memory"] = [_memory.MEMORY_INTERVAL_S, now]  # at most once a second
        for source, entry in plan.items():
            if source in self._plan:
                entry[1] = self._plan[source][1]
        self._plan = plan

    def sample_due(self, now: float, at_ns: int) -> None:
        for source, entry in self._plan.items():
            if now >= entry[1]:
                # On its beat; a cycle that came a whole interval late starts the beat again from now,
                # rather than sampling again at once (a rate over the microseconds between two samples).
                due = entry[1] + entry[0]
                entry[1] = due if due > now else now + entry[0]
                buffer = self._buffers.setdefault(source, [])
                sampler = self._samplers[source]
                if source == "memory":
                    buffer.extend(sampler.samples(at_ns))  # one per device in use, none without CUDA
                else:
                    buffer.append(sampler.sample(at_ns))
                del buffer[:-_MAX_SAMPLES]

    def next_due(self, faster_than: float):
        """When the next sampler asked for more often than every ``faster_than`` seconds falls due
        (``time.monotonic``), or None while none is. The others are sampled at the wakes that come."""
        return min((entry[1] for entry in self._plan.values() if entry[0] < faster_than), default=None)

    def take(self) -> list:
        """``[(source, samples), ...]`` gathered since the last call."""
        taken = [(source, samples) for source, samples in self._buffers.items() if samples]
        self._buffers = {}
        return taken

    def _sampler(self, source: str):
        if source not in self._created:
            self._created.add(source)
            if source == "process":
                self._samplers[source] = ProcessSampler()
            elif source == "memory":
                self._samplers[source] = _memory.sampler()
            else:
                self._samplers[source] = NvmlSampler.create(self._gpu_env)
        return self._samplers[source]


class ProcessSampler:
    """CPU time of this process and of its live children (DataLoader workers), RSS, cgroup CPU."""

    def __init__(self, *, pid=None, proc_root="/proc", cgroup_root="/sys/fs/cgroup"):
        self._pid = pid or os.getpid()
        self._proc = proc_root
        self._parents = {}  # pid -> parent pid, for every process seen; stat is read once per pid
        self._listed = None  # whether the kernel lists each thread's children (decided at the first sample)
        self._ticks = _sysconf("SC_CLK_TCK", 100)
        self._page = _sysconf("SC_PAGE_SIZE", 4096)
        self._files = _OpenFiles()
        self._cgroup = _CgroupFiles.find(proc_root, cgroup_root, self._pid)
        self._cgroup.files = self._files

    def sample(self, at_ns: int) -> dict:
        sample = {"at_ns": at_ns}
        sample["cpu_main_s"] = _safe(self._own_cpu)
        children = _safe(self._children)
        if children is not None:
            sample["workers"] = len(children)
            total = 0.0
            for child in children:
                total += _safe(lambda: self._cpu_of(child)) or 0.0
            sample["cpu_workers_s"] = round(total, 3)
        sample["rss_bytes"] = _safe(self._rss)
        sched = _safe(self._train_schedstat)
        if sched is not None:
            sample["train_cpu_s"], sample["train_wait_s"] = sched
        sample.update(self._cgroup.read())
        return sample

    def _train_schedstat(self):
        """(on-CPU s, run-queue wait s) of the training thread (schedstat: ns on a CPU, ns waiting to run)."""
        tid = _training_tid[0]
        if tid is None or self._pid != os.getpid():
            return None
        fields = self._files.read("%s/%d/task/%d/schedstat" % (self._proc, self._pid, tid)).split()
        return round(int(fields[0]) / 1e9, 4), round(int(fields[1]) / 1e9, 4)

    def _own_cpu(self) -> float:
        if self._pid == os.getpid():
            return round(time.process_time(), 3)
        return self._cpu_of(self._pid)

    def _children(self) -> list:
        if self._listed is None:
            self._listed = os.path.exists("%s/%d/task/%d/children" % (self._proc, self._pid, self._pid))
        if self._listed:
            return self._listed_children()
        # No /proc/<pid>/task/*/children on kernels without CONFIG_PROC_CHILDREN: find children by
        # their parent pid, reading each process's stat only the first time its pid is seen.
        pids = {int(name) for name in os.listdir(self._proc) if name.isdigit()}
        parents = self._parents
        for gone in [pid for pid in parents if pid not in pids]:
            del parents[gone]
        for pid in pids:
            if pid not in parents:
                fields = self._stat(pid)
                parents[pid] = int(fields[1]) if fields else None
        return [pid for pid, parent in parents.items() if parent == self._pid]

    def _listed_children(self) -> list:
        """The children the kernel lists for each thread: a few small reads, where the scan of every
        pid took most of the sender thread's second on a busy node (issue 24, target 5)."""
        task = "%s/%d/task" % (self._proc, self._pid)
        paths = ["%s/%s/children" % (task, tid) for tid in os.listdir(task)]
        self._files.keep_only(paths)  # the threads that ended
        children = []
        for path in paths:
            try:
                children.extend(int(pid) for pid in self._files.read(path).split())
            except OSError:
                pass  # the thread ended since the listing
        return children

    def _stat(self, pid: int):
        """Fields of /proc/<pid>/stat after the command name: [state, ppid, ...]; None if gone."""
        try:
            with open("%s/%d/stat" % (self._proc, pid), "rb") as f:
                text = f.read().decode("ascii", "replace")
        except OSError:
            return None
        return text[text.rindex(")") + 2 :].split()

    def _cpu_of(self, pid: int) -> float:
        fields = self._stat(pid)
        if fields is None:
            return 0.0
        return round((int(fields[11]) + int(fields[12])) / self._ticks, 3)  # utime + stime

    def _rss(self) -> int:
        return int(self._files.read("%s/%d/statm" % (self._proc, self._pid)).split()[1]) * self._page


class _OpenFiles:
    """The files read at every sample, kept open and read again from the start: on a sender thread
    woken once a second, an open() of a /proc or cgroup file cost about 80 us, the read alone 17."""

    def __init__(self):
        self._fds = {}

    def read(self, path: str) -> bytes:
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self._fds[path] = fd
        try:
            return os.pread(fd, 65536, 0)
        except OSError:
            del self._fds[path]
            os.close(fd)
            raise

    def text(self, path: str) -> str:
        return self.read(path).decode("ascii", "replace").strip()

    def keep_only(self, wanted) -> None:
        """Close the `children` files not in ``wanted``: their threads ended."""
        wanted = set(wanted)
        for path in [p for p in self._fds if p.endswith("/children") and p not in wanted]:
            os.close(self._fds.pop(path))


class _CgroupFiles:
    """The CPU accounting files of this process's cgroup (v2, else v1)."""

    def __init__(self, version, stat=None, limit=None, period=None, usage=None):
        self.files = _OpenFiles()  # the sampler's, once it has one
        self.version = version
        self.stat = stat
        self.limit = limit
        self.period = period
        self.usage = usage

    @classmethod
    def find(cls, proc_root: str, root: str, pid: int) -> "_CgroupFiles":
        paths = {}
        try:
            with open("%s/%d/cgroup" % (proc_root, pid)) as f:
                for line in f:
                    _, controllers, path = line.rstrip("\n").split(":", 2)
                    for controller in controllers.split(",") if controllers else [""]:
                        paths[controller] = path
        except (OSError, ValueError):
            pass
        unlimited_v2 = None
        for base in _candidates(root, paths.get("")):
            if os.path.exists(os.path.join(base, "cpu.stat")):
                if os.path.exists(os.path.join(base, "cpu.max")):
                    return cls(2, stat=os.path.join(base, "cpu.stat"), limit=os.path.join(base, "cpu.max"))
                # A v2 group without cpu.max (no cpu controller delegated, or a hybrid host's unified
                # tree): still its usage; but a v1 cpu controller, with its quota, comes first.
                unlimited_v2 = unlimited_v2 or os.path.join(base, "cpu.stat")
        cpu = _first_with(root, ("cpu,cpuacct", "cpu", "cpuacct,cpu"), paths.get("cpu"), "cpu.stat")
        if cpu is not None:
            cpuacct = _first_with(root, ("cpu,cpuacct", "cpuacct", "cpuacct,cpu"), paths.get("cpuacct"), "cpuacct.usage")
            return cls(
                1,
                stat=os.path.join(cpu, "cpu.stat"),
                limit=os.path.join(cpu, "cpu.cfs_quota_us"),
                period=os.path.join(cpu, "cpu.cfs_period_us"),
                usage=None if cpuacct is None else os.path.join(cpuacct, "cpuacct.usage"),
            )
        if unlimited_v2 is not None:
            return cls(2, stat=unlimited_v2, limit=None)
        return cls(None)

    def read(self) -> dict:
        if self.version is None:
            return {}
        out = {}
        stat = _safe(lambda: _keyed(self.files.text(self.stat))) or {}
        out["cgroup_nr_periods"] = stat.get("nr_periods")
        out["cgroup_nr_throttled"] = stat.get("nr_throttled")
        if self.version == 2:
            out["cgroup_throttled_usec"] = stat.get("throttled_usec")
            out["cgroup_usage_usec"] = stat.get("usage_usec")
            out["cgroup_quota_cores"] = _safe(self._quota_v2)
        else:
            throttled_ns = stat.get("throttled_time")
            out["cgroup_throttled_usec"] = None if throttled_ns is None else throttled_ns // 1000
            usage_ns = _safe(lambda: int(self.files.text(self.usage))) if self.usage else None
            out["cgroup_usage_usec"] = None if usage_ns is None else usage_ns // 1000
            out["cgroup_quota_cores"] = _safe(self._quota_v1)
        return out

    def _quota_v2(self):
        if self.limit is None:  # no cpu.max: no quota
            return None
        quota, period = self.files.text(self.limit).split()[:2]
        return None if quota == "max" else round(int(quota) / int(period), 3)

    def _quota_v1(self):
        quota = int(self.files.text(self.limit))
        return None if quota < 0 else round(quota / int(self.files.text(self.period)), 3)


def _first_with(root: str, hierarchies, path, filename: str):
    for name in hierarchies:
        for base in _candidates(os.path.join(root, name), path):
            if os.path.exists(os.path.join(base, filename)):
                return base
    return None


def _candidates(root: str, path):
    if path and path != "/":
        yield os.path.join(root, path.lstrip("/"))
    yield root  # inside a container, the cgroup namespace puts its own cgroup at the root


class NvmlSampler:
    """This process's GPU through NVML; ``create`` returns None where pynvml or a GPU is missing."""

    def __init__(self, nvml, gpu=None):
        self._nvml = nvml
        self._gpu = gpu  # callable -> dict of env (gpu_uuid), read at each sample
        self._key = None
        self._handle = None
        self._gpm = GpmReader(nvml)

    @classmethod
    def create(cls, gpu=None):
        try:
            import pynvml
        except Exception:
            return None
        try:
            pynvml.nvmlInit()
        except Exception:
            return None
        return cls(pynvml, gpu)

    def sample(self, at_ns: int) -> dict:
        handle = _safe(self._device)
        sample = {"at_ns": at_ns}
        if handle is None:
            return sample
        nvml = self._nvml
        sample["index"] = _safe(lambda: nvml.nvmlDeviceGetIndex(handle))
        sample["uuid"] = _safe(lambda: _text(nvml.nvmlDeviceGetUUID(handle)))
        sample["name"] = _safe(lambda: _text(nvml.nvmlDeviceGetName(handle)))
        rates = _safe(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        if rates is not None:
            sample["util_gpu"] = rates.gpu
            sample["util_mem"] = rates.memory
        memory = _safe(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        if memory is not None:
            sample["mem_used_mib"] = memory.used // (1 << 20)
            sample["mem_total_mib"] = memory.total // (1 << 20)
        sample["temp_c"] = _safe(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        sample["power_w"] = _safe(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        sample["power_limit_w"] = _safe(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
        sample["sm_clock_mhz"] = _safe(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        sample["sm_clock_max_mhz"] = _safe(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))
        sample["mem_clock_mhz"] = _safe(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))
        sample["pstate"] = _safe(lambda: "P%d" % nvml.nvmlDeviceGetPerformanceState(handle))
        sample["throttle_reasons"] = _safe(lambda: self._throttle_reasons(handle))
        sample.update(self._gpm.read(handle))
        return sample

    def _device(self):
        """The handle of this process's GPU: by uuid once torch told it, else a best guess."""
        env = (self._gpu() if self._gpu else None) or {}
        key = env.get("gpu_uuid") or _guess_index()
        if key != self._key:
            nvml = self._nvml
            if isinstance(key, str):
                self._handle = nvml.nvmlDeviceGetHandleByUUID(key)
            else:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(key)
            self._key = key
        return self._handle

    def _throttle_reasons(self, handle):
        nvml = self._nvml
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(read(handle))


class GpmReader:
    """SM, tensor-pipe and DRAM activity from NVML's GPU Performance Monitoring (GPM, Hopper and newer):
    the activities of DCGM's profiling fields (DCGM_FI_PROF_SM_ACTIVE, _SM_OCCUPANCY,
    _PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE), without a DCGM exporter.

    Each reading takes a GPM sample (``nvmlGpmSampleGet``; ``nvmlGpmMigSampleGet`` on a MIG instance)
    and computes the metrics over the time since the previous one (``nvmlGpmMetricsGet``), as
    fractions 0..1 (NVML gives percents). The first reading, and any where GPM is missing or fails,
    adds nothing: the sidecar then says "not measured". Device-wide, like DCGM's: every process on the
    GPU counts. Runs on the sender thread; never raises.
    """

    # (sample key, pynvml constant): NVML_GPM_METRIC_SM_UTIL "Percentage of SMs that were busy",
    # _SM_OCCUPANCY "warps that were active vs theoretical maximum", _ANY_TENSOR_UTIL "time the GPU's
    # SMs were doing ANY tensor operations", _DRAM_BW_UTIL "DRAM bw used vs theoretical maximum".
    METRICS = (
        ("sm_active", "NVML_GPM_METRIC_SM_UTIL"),
        ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY"),
        ("tensor_active", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
        ("dram_active", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
    )

    def __init__(self, nvml):
        self._nvml = nvml
        self._handle = None
        self._source = None  # (device handle to sample, MIG GPU instance id or None); False: no GPM
        self._previous = None

    def read(self, handle) -> dict:
        try:
            if handle is not self._handle:
                self._reset(handle)
            if not self._source:
                return {}
            sample = self._take()
            previous, self._previous = self._previous, sample
            if previous is None:
                return {}
            try:
                return self._metrics(previous, sample)
            finally:
                _safe(lambda: self._nvml.nvmlGpmSampleFree(previous))
        except Exception:
            self._off()
            return {}

    def _reset(self, handle):
        nvml = self._nvml
        if self._previous is not None:
            previous = self._previous
            _safe(lambda: nvml.nvmlGpmSampleFree(previous))
        self._handle = handle
        self._previous = None
        self._source = False
        if handle is None or not hasattr(nvml, "nvmlGpmSampleGet"):
            return  # an nvidia-ml-py older than GPM (12.520)
        device, instance = handle, None
        if _safe(lambda: nvml.nvmlDeviceIsMigDeviceHandle(handle)):
            device = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            instance = nvml.nvmlDeviceGetGpuInstanceId(handle)
        # Before Hopper: not supported (isSupportedDevice 0, or NVML_ERROR_NOT_SUPPORTED)
        if _safe(lambda: nvml.nvmlGpmQueryDeviceSupport(device).isSupportedDevice):
            self._source = (device, instance)

    def _take(self):
        nvml = self._nvml
        device, instance = self._source
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            if instance is None:
                nvml.nvmlGpmSampleGet(device, sample)
            else:
                nvml.nvmlGpmMigSampleGet(device, instance, sample)
        except Exception:
            _safe(lambda: nvml.nvmlGpmSampleFree(sample))
            raise
        return sample

    def _metrics(self, sample1, sample2) -> dict:
        nvml = self._nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.METRICS)
        request.sample1 = sample1
        request.sample2 = sample2
        for i, (_, constant) in enumerate(self.METRICS):
            request.metrics[i].metricId = getattr(nvml, constant)
        nvml.nvmlGpmMetricsGet(request)
        out = {}
        success = getattr(nvml, "NVML_SUCCESS", 0)
        for i, (key, _) in enumerate(self.METRICS):
            metric = request.metrics[i]
            if metric.nvmlReturn == success and metric.value == metric.value:  # not NaN
                out[key] = round(min(max(metric.value / 100.0, 0.0), 1.0), 4)
        return out

    def _off(self):
        self._source = False
        previous, self._previous = self._previous, None
        if previous is not None:
            _safe(lambda: self._nvml.nvmlGpmSampleFree(previous))


def _guess_index():
    """Physical GPU of this rank without torch: the LOCAL_RANK-th of CUDA_VISIBLE_DEVICES."""
    try:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        local_rank = 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return local_rank
    chosen = visible[min(local_rank, len(visible) - 1)]
    return int(chosen) if chosen.isdigit() else chosen


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _keyed(text: str) -> dict:
    values = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    return values


def _sysconf(name: str, default: int) -> int:
    try:
        return os.sysconf(name)
    except (ValueError, OSError, AttributeError):
        return default


def _safe(read):
    try:
        return read()
    except Exception:
        return None
