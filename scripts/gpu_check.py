#!/usr/bin/env python3
"""The checks of scripts/gpu-check.sh: what stepscope's GPU paths assume of real CUDA, NCCL and NVML,
and what they measure there. One line per expectation on stdout:

    PASS <name>: <what was seen>
    FAIL <name>: <what was expected, what was seen>
    SKIP <name>: <why it could not run here>

and everything read or recorded under --out (readings, the hook's rows, provenance), ready to be
committed as fixtures (docs/gpu-check.md says how).

--simulate runs the same checks on the simulated CUDA layer (python-hook/tests/simcuda.py, simnccl.py)
and the stand-in NVML binding (test/fixtures/fake_pynvml) on a machine without a GPU: that proves the
checks and their plumbing, not the GPU (test/gpu-check.test.ts runs it in CI). Nothing here needs the
network. Standard library, the hook from this checkout, and torch where the machine has it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "python-hook")
sys.path.insert(0, HOOK)
FAKE_PYNVML = os.path.join(ROOT, "test", "fixtures", "fake_pynvml")
MS = 1_000_000


class Report:
    """The PASS/FAIL/SKIP lines, as they happen, and results.json at the end."""

    def __init__(self, out):
        self.out = out
        self.results = []

    def line(self, status, name, detail):
        self.results.append({"status": status, "check": name, "detail": detail})
        print("%s %s: %s" % (status, name, detail), flush=True)

    def expect(self, name, ok, detail):
        self.line("PASS" if ok else "FAIL", name, detail)
        return ok

    def save(self, relative, data):
        path = os.path.join(self.out, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            if isinstance(data, str):
                f.write(data)
            else:
                json.dump(data, f, indent=1, sort_keys=True, default=str)
        return path


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def near(value, expected, tolerance):
    return value is not None and abs(value - expected) <= tolerance * expected


def idle_as_expected(idle_ns, data_ms, busy_ms):
    """The GPU's idle gap before a step: about the host's data wait (plus the loop's own host time,
    which a loaded machine stretches), or, with no wait, well under the step's GPU work."""
    if idle_ns is None:
        return False
    idle_ms = idle_ns / MS
    return idle_ms < 0.25 * busy_ms if not data_ms else 0.8 * data_ms <= idle_ms <= 1.6 * data_ms + 5


# --- the GPU: real, or the simulated layer ----------------------------------------------------------


class RealGpu:
    """CUDA through the machine's torch; ``busy(ms)`` queues a kernel that spins the GPU that long
    (``torch.cuda._sleep``, calibrated here), ``wait()`` is the script's own synchronize."""

    simulated = False

    def __init__(self, torch):
        self.torch = torch
        torch.cuda.init()
        torch.ones(1, device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 50_000_000
        for _ in range(2):  # the first call loads the kernel
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            torch.cuda.synchronize()
        self.cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)

    def busy(self, ms):
        self.torch.cuda._sleep(int(ms * self.cycles_per_ms))

    def wait(self):
        self.torch.cuda.synchronize()

    def to_device(self, module):
        return module.cuda()


class SimulatedGpu:
    """The simulated CUDA layer on this machine's torch (CPU): kernels are simulated time."""

    simulated = True

    def __init__(self, torch):
        from tests.simcuda import SimCuda

        self.torch = torch
        self.sim = SimCuda()
        self.patch = self.sim.patch(torch)
        self.patch.__enter__()

    def busy(self, ms):
        self.sim.kernel(ms)

    def wait(self):
        self.sim.item()

    def to_device(self, module):
        return module


def open_gpu(simulate):
    import torch

    if simulate:
        return SimulatedGpu(torch)
    if not torch.cuda.is_available():
        raise RuntimeError("torch %s sees no CUDA device" % torch.__version__)
    return RealGpu(torch)


# --- checks --------------------------------------------------------------------------------------------


def check_cuda_events(report, gpu):
    """The event semantics the hook and the simulated layer assume."""
    torch = gpu.torch
    Event = torch.cuda.Event
    fresh = Event(enable_timing=True)
    report.expect("cuda-event-unrecorded-query", fresh.query() is True, "an event never recorded answers query() %r (expected True)" % fresh.query())
    gpu.wait()
    start, end = Event(enable_timing=True), Event(enable_timing=True)
    start.record()
    gpu.busy(50)
    end.record()
    pending = end.query()
    try:
        start.elapsed_time(end)
        raised = None
    except Exception as exc:
        raised = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:120])
    report.expect("cuda-event-pending", pending is False, "query() right after queuing a 50 ms kernel: %r (expected False)" % pending)
    report.expect("cuda-event-elapsed-before-completion-raises", raised is not None, "elapsed_time() before completion raised %s" % (raised or "nothing"))
    gpu.wait()
    elapsed = start.elapsed_time(end)
    report.expect("cuda-event-elapsed", near(elapsed, 50.0, 0.2), "elapsed_time() around a 50 ms kernel: %.2f ms" % elapsed)
    # What one record costs the training thread (the zero-code path makes 3 a step, 2 more a copy).
    events = [Event(enable_timing=True) for _ in range(64)]
    t0 = time.thread_time_ns()
    for _ in range(50):
        for event in events:
            event.record()
    record_us = (time.thread_time_ns() - t0) / (50 * len(events)) / 1000
    gpu.wait()
    report.expect("cuda-event-record-cost", record_us < 20, "%.2f µs of CPU per event.record()%s" % (record_us, " (the simulated layer's Python)" if gpu.simulated else ""))
    return {"unrecorded_query": True, "pending_query": pending, "elapsed_before_completion": raised, "elapsed_ms_50ms_kernel": elapsed, "record_us": record_us}


def _hook_rows(server, job):
    sessions = {m["session"]: (m.get("job"), m.get("rank")) for m in server.of_type("hello")}
    return [row for session, (j, _) in sessions.items() if j == job for row in server.store.records(session)]


def check_explicit_api(report, gpu):
    """The explicit API's phases on CUDA: GPU compute time and the GPU's idle gap."""
    import stepscope
    from tests.fake_sidecar import FakeSidecar

    recorded = {}
    with FakeSidecar() as server:
        for name, data_ms, busy_ms in (("compute-bound", 0, 20), ("input-bound", 30, 10)):
            job = "gpu-check-explicit-" + name
            scope = stepscope.init(url=server.url, job=job, rank=0, world_size=1, batch_interval=0.05)

            def batches():
                for i in range(30):
                    if data_ms:
                        time.sleep(data_ms / 1000.0)  # the loader: the GPU has nothing to do
                    yield i

            for _ in scope.loader(batches()):
                with scope.phase("compute"):
                    gpu.busy(busy_ms)
                    gpu.wait()  # loss.item()
                scope.step(samples=1)
            scope.close(timeout=10.0)
            rows = _hook_rows(server, job)[5:]
            recorded[name] = _hook_rows(server, job)
            compute = median([r["gpu_compute_ns"] for r in rows])
            idle = median([r["gpu_idle_ns"] for r in rows])
            report.expect(
                "explicit-gpu-compute-%s" % name,
                compute is not None and near(compute / MS, busy_ms, 0.3),
                "median gpu_compute_ns %s ms for %d ms kernels" % (None if compute is None else round(compute / MS, 2), busy_ms),
            )
            ok = idle_as_expected(idle, data_ms, busy_ms)
            report.expect("explicit-gpu-idle-%s" % name, ok, "median gpu_idle_ns %s ms (the host waited %d ms for data)" % (None if idle is None else round(idle / MS, 2), data_ms))
    return recorded


def check_zero_code(report, gpu, simulate, python):
    """The zero-code path on CUDA (python -m stepscope run, a loop that knows nothing of stepscope)."""
    from tests.fake_sidecar import FakeSidecar

    recorded = {}
    with FakeSidecar() as server:
        for name, data_ms, busy_ms in (("compute-bound", 0, 20), ("input-bound", 30, 10)):
            job = "gpu-check-zero-code-" + name
            args = [python, "-m", "stepscope", "run", os.path.join(ROOT, "scripts", "gpu_check_loop.py"), "--steps", "30", "--data-ms", str(data_ms), "--busy-ms", str(busy_ms)]
            if simulate:
                args.append("--simulate")
            env = dict(os.environ, STEPSCOPE_URL=server.url, STEPSCOPE_JOB=job, PYTHONPATH=os.pathsep.join([HOOK, os.environ.get("PYTHONPATH", "")]))
            for name_ in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
                env.pop(name_, None)
            run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
            if run.returncode != 0:
                report.line("FAIL", "zero-code-%s" % name, "the loop exited %d: %s" % (run.returncode, run.stderr.strip()[-400:]))
                continue
            all_rows = _hook_rows(server, job)
            recorded[name] = all_rows
            rows = all_rows[5:]
            timed = [r for r in rows if r["gpu_compute_ns"] is not None]
            report.expect("zero-code-gpu-events-%s" % name, len(rows) > 0 and len(timed) >= 0.8 * len(rows), "%d of %d steps after the first 5 carry GPU times" % (len(timed), len(rows)))
            compute = median([r["gpu_compute_ns"] for r in timed])
            report.expect(
                "zero-code-gpu-compute-%s" % name,
                compute is not None and compute / MS >= 0.9 * busy_ms and compute / MS < 2.5 * busy_ms + 5,
                "median gpu_compute_ns %s ms: the %d ms kernel, the model and the optimizer step" % (None if compute is None else round(compute / MS, 2), busy_ms),
            )
            copies = [r["gpu_h2d_ns"] for r in timed if r["gpu_h2d_ns"] is not None]
            report.expect("zero-code-gpu-h2d-%s" % name, len(copies) >= 0.8 * len(timed) > 0, "%d steps with the non-blocking copies timed on the GPU" % len(copies))
            idle = median([r["gpu_idle_ns"] for r in timed])
            ok = idle_as_expected(idle, data_ms, busy_ms)
            report.expect("zero-code-gpu-idle-%s" % name, ok, "median gpu_idle_ns %s ms (the host waited %d ms for data)" % (None if idle is None else round(idle / MS, 2), data_ms))
    return recorded


def check_nccl(report, simulate, python):
    """NCCL in a child process: the stream semantics the hook's events rely on, and the hook's rows."""
    run = subprocess.run([python, os.path.abspath(__file__), "--child", "nccl"] + (["--simulate"] if simulate else []), capture_output=True, text=True, timeout=180, env=dict(os.environ, PYTHONPATH=HOOK))
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode != 0 or not lines:
        report.line("FAIL", "nccl-one-rank", "the child exited %d: %s" % (run.returncode, run.stderr.strip()[-600:]))
        return None
    got = json.loads(lines[-1])
    if "skip" in got:
        report.line("SKIP", "nccl-one-rank", got["skip"])
        return got
    report.expect("nccl-then-callback-stream", got["then_ms"] >= 0.9 * got["busy_ms"], "an event recorded in an all_reduce future's then() completes %.2f ms after one recorded before a %d ms kernel queued ahead of the collective" % (got["then_ms"], got["busy_ms"]))
    report.expect("nccl-work-wait-stream", got["wait_ms"] >= 0.9 * got["busy_ms"] and got["wait_host_ms"] < 0.5 * got["busy_ms"], "work.wait(): the stream waited %.2f ms, the host %.2f ms" % (got["wait_ms"], got["wait_host_ms"]))
    report.expect("nccl-sync-call-stream", got["sync_ms"] >= 0.9 * got["busy_ms"], "an event recorded after a synchronous all_reduce completes %.2f ms after the kernel before it began" % got["sync_ms"])
    report.expect("nccl-ddp-watched", got["watched"], "a DistributedDataParallel model built after stepscope.init() is watched without watch_ddp: %s" % got["watched"])
    rows = got["rows"][3:]
    timed = [r for r in rows if r["comm_ns"] is not None]
    report.expect("nccl-hook-rows", len(rows) > 0 and len(timed) == len(rows), "%d of %d steps with comm_ns measured on the GPU (CUDA events)" % (len(timed), len(rows)))
    if got.get("nccl_duration_ms") is not None:
        report.line("PASS", "nccl-own-timing", "ProcessGroupNCCL's own timing (TORCH_NCCL_ENABLE_TIMING, work._get_duration) of a 64 MB all_reduce: %.3f ms; the hook's events: %.3f ms" % (got["nccl_duration_ms"], got["hook_ms"]))
    else:
        report.line("SKIP", "nccl-own-timing", got.get("nccl_duration_why", "not offered by this torch"))
    return got


def child_nccl(simulate):
    """One NCCL rank: the semantics, then the hook's rows of a small DDP loop. Prints one JSON line."""
    out = {"busy_ms": 20}
    if simulate:
        from tests.simcuda import SimCuda
        from tests.simnccl import ScriptedPeers, SimModel, install

        sim = SimCuda()
        install(sim, ScriptedPeers(0), bandwidth_gbps=100.0).start()
        torch = sys.modules["torch"]
        busy, wait = sim.kernel, sim.item

        def tensor(numel):
            from tests.simcuda import SimTensor

            return SimTensor(numel)

        def model():
            return torch.nn.parallel.DistributedDataParallel(SimModel([1 << 20] * 2, forward_ms=2, backward_ms=4))

        def step(m):
            m.forward()
            m.backward()
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"
        import torch

        if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
            print(json.dumps({"skip": "no CUDA or no NCCL in torch %s" % torch.__version__}))
            return
        torch.cuda.set_device(0)
        gpu = RealGpu(torch)
        busy, wait = gpu.busy, gpu.wait

        def tensor(numel):
            return torch.ones(numel, device="cuda")

        def model():
            net = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
            return torch.nn.parallel.DistributedDataParallel(net, device_ids=[0])

        x = None

        def step(m):
            nonlocal x
            x = torch.randn(64, 1024, device="cuda") if x is None else x
            busy(5)
            m(x).sum().backward()

    dist = torch.distributed
    dist.init_process_group("nccl", rank=0, world_size=1)
    Event = torch.cuda.Event
    t = tensor(1 << 14)
    dist.all_reduce(t)
    wait()

    def timed(body):
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        start.record()
        busy(out["busy_ms"])
        body(end)
        wait()
        return start.elapsed_time(end)

    out["then_ms"] = timed(lambda end: dist.all_reduce(t, async_op=True).get_future().then(lambda fut: end.record()))
    host = []

    def waited(end):
        work = dist.all_reduce(t, async_op=True)
        t0 = time.perf_counter()
        work.wait()
        host.append((time.perf_counter() - t0) * 1000)
        end.record()

    out["wait_ms"] = timed(waited)
    out["wait_host_ms"] = host[0]

    def synchronous(end):
        dist.all_reduce(t)
        end.record()

    out["sync_ms"] = timed(synchronous)
    if not simulate:
        big = torch.ones(16 << 20, device="cuda")
        work = dist.all_reduce(big, async_op=True)
        wait()
        try:
            out["nccl_duration_ms"] = float(work._get_duration())
        except Exception as exc:
            out["nccl_duration_ms"] = None
            out["nccl_duration_why"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:160])
    import stepscope
    from tests.fake_sidecar import FakeSidecar

    with FakeSidecar() as server:
        scope = stepscope.init(url=server.url, job="gpu-check-nccl", rank=0, world_size=1, batch_interval=0.05)
        m = model()
        for _ in range(12):
            step(m)
            dist.all_reduce(t)
            wait()
            scope.step()
        scope.close(timeout=10.0)
        out["rows"] = _hook_rows(server, "gpu-check-nccl")
    if not simulate:
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        start.record()
        dist.all_reduce(big)
        end.record()
        wait()
        out["hook_ms"] = start.elapsed_time(end)
    out["watched"] = getattr(m, "_stepscope_watch", None) is not None
    dist.destroy_process_group()
    print(json.dumps(out, default=str))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_nccl_two_ranks(report, simulate, python, gpus):
    """Two ranks of DDP on NCCL, rank 1 computing 30 ms a step longer: rank 0's GPU waits for it."""
    if simulate:
        report.line("SKIP", "nccl-two-ranks", "simulated: test/nccl-e2e.test.ts runs two ranks on simulated GPUs against a sidecar")
        return None
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, PYTHONPATH=HOOK, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GPU_CHECK_DEVICE=str(rank if gpus >= 2 else 0))
        procs.append(subprocess.Popen([python, os.path.abspath(__file__), "--child", "nccl-rank"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        results.append((proc.returncode, stdout, stderr))
    if any(code != 0 for code, _, _ in results):
        why = " | ".join(err.strip().splitlines()[-1] if err.strip() else "exit %d" % code for code, _, err in results)
        report.line("SKIP" if gpus < 2 else "FAIL", "nccl-two-ranks", ("two ranks on one GPU: NCCL refused (%s)" if gpus < 2 else "a rank failed: %s") % why[:400])
        return None
    ranks = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in results]
    shares = [r["wait_share"] for r in ranks]
    report.expect(
        "nccl-two-ranks-slow-rank",
        shares[0] is not None and shares[1] is not None and shares[0] > 0.2 and shares[1] < 0.5 * shares[0],
        "comm_wait_ns / dur_ns: rank 0 %s, rank 1 (30 ms slower) %s (%s)" % (shares[0], shares[1], "two GPUs" if gpus >= 2 else "one GPU shared"),
    )
    return ranks


def child_nccl_rank():
    import torch

    import stepscope
    from tests.fake_sidecar import FakeSidecar

    rank = int(os.environ["RANK"])
    device = int(os.environ.get("GPU_CHECK_DEVICE", rank))
    torch.cuda.set_device(device)
    gpu = RealGpu(torch)
    torch.distributed.init_process_group("nccl")
    with FakeSidecar() as server:
        scope = stepscope.init(url=server.url, job="gpu-check-nccl2", batch_interval=0.05)
        net = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048)).cuda()
        model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device])
        opt = torch.optim.SGD(model.parameters(), lr=0.001)
        x = torch.randn(64, 2048, device="cuda")
        for _ in scope.loader(range(40)):
            with scope.phase("compute"):
                gpu.busy(5 + (30 if rank == 1 else 0))
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
                gpu.wait()
            scope.step()
        scope.close(timeout=10.0)
        rows = _hook_rows(server, "gpu-check-nccl2")[10:]
    torch.distributed.destroy_process_group()
    waits = [r["comm_wait_ns"] for r in rows if r["comm_wait_ns"] is not None]
    share = sum(waits) / sum(r["dur_ns"] for r in rows) if waits and len(waits) == len(rows) else None
    print(json.dumps({"rank": rank, "wait_share": None if share is None else round(share, 4), "rows": rows}, default=str))


def check_nvml(report, gpu, simulate):
    """NVML and GPM through the hook's sampler, idle and under load (bf16 and fp32 matmuls)."""
    if simulate:
        sys.path.insert(0, FAKE_PYNVML)
    try:
        import pynvml
    except ImportError:
        report.line("SKIP", "nvml", "no nvidia-ml-py here (scripts/gpu-check.sh --prepare fetches its wheel to carry)")
        return None
    from stepscope._counters import NvmlSampler

    sampler = NvmlSampler.create(lambda: {})
    if sampler is None:
        report.line("FAIL", "nvml", "nvmlInit failed")
        return None
    readings = {"nvidia_ml_py": getattr(pynvml, "__version__", None) or _dist_version("nvidia-ml-py")}
    readings["idle"] = _sampled(sampler, lambda: time.sleep(0.6))
    torch = gpu.torch
    if gpu.simulated:
        loads = {"bf16": lambda: time.sleep(0.6), "fp32": lambda: time.sleep(0.6)}
    else:
        def matmuls(dtype, tf32):
            def run():
                torch.backends.cuda.matmul.allow_tf32 = tf32
                a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
                deadline = time.monotonic() + 0.8
                while time.monotonic() < deadline:
                    for _ in range(4):
                        a @ a
                    torch.cuda.synchronize()

            return run

        loads = {"bf16": matmuls(torch.bfloat16, False), "fp32": matmuls(torch.float32, False)}
    for name, load in loads.items():
        readings[name] = _sampled(sampler, load)
    gpm = [readings[k][-1] for k in ("bf16", "fp32")]
    has_gpm = all("sm_active" in sample for sample in gpm)
    name = gpm[0].get("name")
    report.expect("nvml-readings", gpm[0].get("util_gpu") is not None and gpm[0].get("sm_clock_mhz") is not None, "%s: util %s%%, SM clock %s MHz, power %s W" % (name, gpm[0].get("util_gpu"), gpm[0].get("sm_clock_mhz"), gpm[0].get("power_w")))
    if not has_gpm:
        hopper = not gpu.simulated and tuple(torch.cuda.get_device_capability(0)) >= (9, 0)
        report.line("FAIL" if hopper else "SKIP", "nvml-gpm", "no GPM readings on %s (GPM needs Hopper or newer%s)" % (name, ": this one is" if hopper else ""))
    else:
        bf16, fp32 = gpm
        report.expect("nvml-gpm-sm-active", bf16["sm_active"] > 0.5, "SM activity under bf16 matmuls: %s" % bf16["sm_active"])
        if not gpu.simulated:
            report.expect("nvml-gpm-tensor", bf16["tensor_active"] > max(0.2, fp32["tensor_active"]), "tensor-pipe activity: bf16 matmuls %s, fp32 without TF32 %s" % (bf16["tensor_active"], fp32["tensor_active"]))
        else:
            report.expect("nvml-gpm-tensor", bf16["tensor_active"] is not None, "tensor-pipe activity read: %s" % bf16["tensor_active"])
    return readings


def _sampled(sampler, load):
    """NVML samples before, during and after ``load`` (GPM: each over the time since the previous)."""
    samples = [sampler.sample(time.perf_counter_ns())]
    done = threading.Event()

    def sample_during():
        while not done.wait(0.3):
            samples.append(sampler.sample(time.perf_counter_ns()))

    thread = threading.Thread(target=sample_during, daemon=True)
    thread.start()
    load()
    done.set()
    thread.join()
    samples.append(sampler.sample(time.perf_counter_ns()))
    return samples


def _dist_version(name):
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:
        return None


def provenance(simulate):
    info = {
        "when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "simulated": simulate,
        "stepscope_commit": os.environ.get("STEPSCOPE_COMMIT") or _git_commit(),
        "command": " ".join(sys.argv),
    }
    try:
        import torch

        info.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
        if not simulate and torch.cuda.is_available():
            from stepscope import _stack

            info.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), capability=list(torch.cuda.get_device_capability(0)), nccl=_stack.nccl_version(torch))
    except Exception as exc:
        info["torch"] = "not importable (%s)" % exc
    return info


def _git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip() or None
    except Exception:
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.getcwd(), "gpu-check-out"))
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--child", choices=("nccl", "nccl-rank"))
    parser.add_argument("--only", action="append", help="run only these checks (cuda-events, explicit, zero-code, nccl, nccl-two-ranks, nvml)")
    args = parser.parse_args()
    if args.child == "nccl":
        return child_nccl(args.simulate)
    if args.child == "nccl-rank":
        return child_nccl_rank()

    report = Report(args.out)
    wanted = set(args.only or ["cuda-events", "explicit", "zero-code", "nccl", "nccl-two-ranks", "nvml"])
    report.save("provenance.json", provenance(args.simulate))
    try:
        gpu = open_gpu(args.simulate)
    except Exception as exc:
        report.line("FAIL", "torch-cuda", "%s: %s" % (type(exc).__name__, exc))
        report.save("results.json", report.results)
        return 1
    report.line("PASS", "torch-cuda", "torch %s on %s" % (gpu.torch.__version__, "the simulated CUDA layer" if gpu.simulated else gpu.torch.cuda.get_device_name(0)))
    python = sys.executable
    steps = [
        ("cuda-events", lambda: report.save("readings/cuda-events.json", check_cuda_events(report, gpu))),
        ("explicit", lambda: report.save("recordings/explicit-rows.json", check_explicit_api(report, gpu))),
        ("zero-code", lambda: report.save("recordings/zero-code-rows.json", check_zero_code(report, gpu, args.simulate, python))),
        ("nccl", lambda: report.save("recordings/nccl-one-rank.json", check_nccl(report, args.simulate, python))),
        ("nccl-two-ranks", lambda: report.save("recordings/nccl-two-ranks.json", check_nccl_two_ranks(report, args.simulate, python, 0 if gpu.simulated else gpu.torch.cuda.device_count()))),
        ("nvml", lambda: report.save("readings/nvml-gpm.json", check_nvml(report, gpu, args.simulate))),
    ]
    for name, run in steps:
        if name not in wanted:
            continue
        try:
            run()
        except Exception as exc:
            report.line("FAIL", name, "the check itself failed: %s: %s" % (type(exc).__name__, exc))
            report.save("errors/%s.txt" % name, traceback.format_exc())
    report.save("results.json", report.results)
    return 0 if all(r["status"] != "FAIL" for r in report.results) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
