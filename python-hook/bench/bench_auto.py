"""What timing a real PyTorch training step costs the training thread, four ways, in the same run.

The loop: a DataLoader over an in-memory dataset (batch 32), a copy to the device, a small MLP's
forward, backward and SGD step -- the shape of a training loop, with a step short enough (a few
hundred microseconds on a CPU) that instrumentation costs show. Each round runs it:

- bare:      no instrumentation (the baseline)
- explicit:  the explicit API, as the README shows it (scope.loader, phase("h2d"), phase("compute"), step())
- zero-code: the loop unchanged, timed by the zero-code path (stepscope._auto, as `stepscope run` does)
- profiler:  the loop unchanged inside torch.profiler.profile(activities=[CPU]) recording every step,
             with prof.step() each step as its documentation does (the post-processing at the end of
             the `with` is reported apart)

in a rotating order, so that drift of a shared machine falls on all alike. Per variant: the median
over rounds of the training thread's wall time and CPU time (time.thread_time) per step, the cost per
step (median of each round's difference to the bare loop of the same round) and the ratio to bare.
Prints one JSON object; with --markdown also the table for BENCHMARKS.md.

    python python-hook/bench/bench_auto.py [--url ws://127.0.0.1:9477/v1/ingest] [--rounds 15] [--steps 400]

Needs torch (the test environment: `node scripts/python-venv.mjs ensure`); the hook is taken from
this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the hook, and its tests' simulated CUDA

import torch  # noqa: E402

import stepscope  # noqa: E402
from stepscope import _auto  # noqa: E402

VARIANTS = ("bare", "explicit", "zero-code", "profiler")


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "ws://127.0.0.1:%d/v1/ingest" % s.getsockname()[1]


class Loop:
    """The training loop every variant runs.

    "mlp": a small MLP on batches of 32 from a DataLoader (a step of several hundred microseconds).
    "minimal": the least a training step does with torch -- a DataLoader's next(), a backward pass on
    one scalar, an optimizer step -- so that the instrumentation's own microseconds stand out of the
    machine's noise.
    """

    def __init__(self, kind, steps, batch, features, hidden):
        torch.manual_seed(0)
        self.kind = kind
        self.steps = steps
        self.device = torch.device("cpu")
        if kind == "mlp":
            data = torch.utils.data.TensorDataset(torch.randn(steps * batch, features), torch.randint(0, 10, (steps * batch,)))
            self.loader = torch.utils.data.DataLoader(data, batch_size=batch)
            self.model = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        else:
            # batch_size=None: the loader hands out the dataset's items as they are, no collation.
            items = [(torch.ones(1), 0)] * steps
            self.loader = torch.utils.data.DataLoader(items, batch_size=None)
            self.weight = torch.ones(1, requires_grad=True)
            self.opt = torch.optim.SGD([self.weight], lr=0.0)

    def step(self, x, y):
        if self.kind == "mlp":
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        else:
            loss = (self.weight * x).sum()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def bare(self):
        device, step = self.device, self.step
        for x, y in self.loader:
            x = x.to(device, non_blocking=True)
            step(x, y)

    def explicit(self, scope):
        device, step = self.device, self.step
        for x, y in scope.loader(self.loader):
            with scope.phase("h2d"):
                x = x.to(device, non_blocking=True)
            with scope.phase("compute"):
                step(x, y)
            scope.step(samples=len(x))

    def profiled(self, prof):
        device, step = self.device, self.step
        for x, y in self.loader:
            x = x.to(device, non_blocking=True)
            step(x, y)
            prof.step()


def timed(fn):
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - w0, time.thread_time_ns() - c0


def detached_scope(url, job):
    """A scope of its own for a variant, made once: init() closes the previous scope, so each is
    taken out of stepscope's "current" slot as soon as it is made."""
    scope = stepscope.init(url=url, job=job)
    stepscope._current = None
    return scope


def run_variant(name, loop, scopes):
    """(wall ns, cpu ns) of one pass of `loop` under `name`, plus what else is worth reporting."""
    extra = {}
    if name == "bare":
        wall, cpu = timed(loop.bare)
    elif name == "explicit":
        scope = scopes["explicit"]
        before = scope.stats()["records"]
        wall, cpu = timed(lambda: loop.explicit(scope))
        extra["records"] = scope.stats()["records"] - before
    elif name == "zero-code":
        scope = scopes["zero-code"]
        before = scope.stats()["records"]
        assert _auto.install(torch), "the zero-code path did not install"
        _auto._driver.scope_factory = lambda: scope
        wall, cpu = timed(loop.bare)
        _auto._driver.flush()  # the last step ends at its optimizer step
        _auto.uninstall()
        extra["records"] = scope.stats()["records"] - before
    elif name == "profiler":
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
        wall, cpu = timed(lambda: loop.profiled(prof))
        t0 = time.perf_counter_ns()
        prof.__exit__(None, None, None)
        extra["finish_ms"] = (time.perf_counter_ns() - t0) / 1e6
    return wall, cpu, extra


def measure(loop, scopes, rounds):
    for name in VARIANTS:  # warm-up: allocator, first-call costs, the profiler's own start-up
        run_variant(name, loop, scopes)
    per = {name: {"wall": [], "cpu": [], "extra": []} for name in VARIANTS}
    for r in range(rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[: r % len(VARIANTS)]
        for name in order:
            wall, cpu, extra = run_variant(name, loop, scopes)
            per[name]["wall"].append(wall / loop.steps / 1000)
            per[name]["cpu"].append(cpu / loop.steps / 1000)
            per[name]["extra"].append(extra)
    bare = per["bare"]
    result = {"steps_per_pass": loop.steps, "rounds": rounds, "variants": {}}
    for name in VARIANTS:
        v = per[name]
        cost_cpu = [a - b for a, b in zip(v["cpu"], bare["cpu"])]
        q = statistics.quantiles(cost_cpu, n=4) if len(cost_cpu) > 1 else [cost_cpu[0]] * 3
        entry = {
            "wall_us_per_step": round(statistics.median(v["wall"]), 2),
            "cpu_us_per_step": round(statistics.median(v["cpu"]), 2),
            "cost_us_per_step_wall": round(statistics.median(a - b for a, b in zip(v["wall"], bare["wall"])), 2),
            "cost_us_per_step_cpu": round(statistics.median(cost_cpu), 2),
            "cost_us_per_step_cpu_iqr": [round(q[0], 2), round(q[2], 2)],
            "ratio_wall": round(statistics.median(a / b for a, b in zip(v["wall"], bare["wall"])), 3),
            "ratio_cpu": round(statistics.median(a / b for a, b in zip(v["cpu"], bare["cpu"])), 3),
        }
        records = [e["records"] for e in v["extra"] if "records" in e]
        if records:
            entry["records_per_pass"] = sorted(set(records))
        finish = [e["finish_ms"] for e in v["extra"] if "finish_ms" in e]
        if finish:
            entry["profiler_finish_ms_per_pass"] = round(statistics.median(finish), 1)
        result["variants"][name] = entry
    return result


def hook_path_alone(n=200_000, repeats=7):
    """The instrumentation's own CPU per step, around stand-ins that cost nothing: the wrappers the
    zero-code path installs (DataLoader ``__next__``, ``Tensor.backward``, the optimizer post-hook,
    built by the same functions) against calling the stand-ins bare; the explicit API's loader, two
    phases and step() against a bare loop. Not disturbed by the noise of a real step."""
    from _stand_ins import explicit_steps, loader_path, no_loader_path
    from stepscope._scope import Scope

    with_loader = loader_path(torch)
    batch, queue = with_loader.batch, with_loader.queue
    original_next, original_backward, _ = with_loader.bare
    wrapped_next, wrapped_backward, post_hook = with_loader.hooked

    def bare():
        for _ in range(n):
            original_next(None)
            original_backward(None)

    def zero_code():
        for _ in range(n):
            wrapped_next(None)
            wrapped_backward(None)
            post_hook(None, (), {})
            if len(queue) > 8192:
                queue.clear()

    def plain():
        for _ in range(n):
            pass

    def explicit():
        explicit_steps(Scope(None), n)

    def cpu_us(fn):
        runs = []
        for _ in range(repeats):
            t0 = time.thread_time_ns()
            fn()
            runs.append((time.thread_time_ns() - t0) / n / 1000)
        return statistics.median(runs)

    # A loop without a DataLoader or optimizer (issue 26): the training forward's first module call
    # seen by the probe (armed at the step's end, removed at that call: torch's real registry), the
    # backward pass ending the step, and the hand-written update's no_grad block.
    without = no_loader_path(torch)

    def bare_no_loader():
        without.steps_bare(n)

    def zero_code_no_loader():
        without.steps_hooked(n)

    result = {
        "zero_code_us_per_step": round(cpu_us(zero_code) - cpu_us(bare), 3),
        "zero_code_no_loader_us_per_step": round(cpu_us(zero_code_no_loader) - cpu_us(bare_no_loader), 3),
        "explicit_us_per_step": round(cpu_us(explicit) - cpu_us(plain), 3),
    }
    with_loader.driver.flush()
    without.driver.flush()
    result.update(cuda_marks_alone(batch, original_next, original_backward, n, repeats))
    return result


class _FreeEvent:
    """A CUDA event whose record() costs nothing: what is left is the hook's own code."""

    __slots__ = ()

    def record(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, end):
        return 0.0


def cuda_marks_alone(batch, original_next, original_backward, n, repeats, chunk=200):
    """What the zero-code path's CUDA marks add per step (a span opened at the batch, ended at the
    backward pass and again at the optimizer step: three event records), on the training thread:
    with events that cost nothing (the hook's own code) and with the simulated CUDA layer's
    (tests/simcuda.py, whose record() is Python: not a GPU's cudaEventRecord, which
    scripts/gpu-check.sh measures). The sender thread's reading of the events is left out: it is
    timed apart, between chunks of steps, as it runs on another thread."""
    from stepscope import _cuda
    from stepscope._scope import Scope
    from tests.simcuda import ManualClock, SimCuda

    def per_step(make_event):
        d = _auto._Driver()
        d.on = d.installed = True
        d.optimizer_seen = d.loader_seen = True
        d.tid = threading.get_ident()
        scope = Scope(None)
        d.scope_factory = lambda: scope
        if make_event is not None:
            scope._use_gpu_timer(_cuda.GpuTimer(make_event, pairs=4 * chunk))
        wrapped_next = _auto.make_next(d, original_next, torch.is_grad_enabled)
        wrapped_backward = _auto.make_backward(d, original_backward)
        post_hook = _auto.make_post_hook(d)
        timer = scope._gpu
        runs, reads = [], []
        steps = n // chunk * chunk
        for _ in range(repeats):
            spent = read = 0
            for _ in range(n // chunk):
                t0 = time.thread_time_ns()
                for _ in range(chunk):
                    wrapped_next(None)
                    wrapped_backward(None)
                    post_hook(None, (), {})
                t1 = time.thread_time_ns()
                spent += t1 - t0
                if timer is not None:
                    timer.resolve()
                read += time.thread_time_ns() - t1
                scope._queue.clear()
            runs.append(spent / steps / 1000)
            reads.append(read / steps / 1000)
        return statistics.median(runs), statistics.median(reads)

    sim = SimCuda(clock=ManualClock(0))
    base, _ = per_step(None)
    free, free_read = per_step(_FreeEvent)
    simulated, simulated_read = per_step(lambda: sim.Event(enable_timing=True))
    return {
        "zero_code_cuda_marks_us_per_step": round(free - base, 3),
        "zero_code_cuda_marks_simulated_us_per_step": round(simulated - base, 3),
        "sender_reads_marks_us_per_step": round(free_read, 3),
        "sender_reads_marks_simulated_us_per_step": round(simulated_read, 3),
    }


def markdown(title, result):
    lines = [
        "%s (%d steps a pass, %d rounds)" % (title, result["steps_per_pass"], result["rounds"]),
        "",
        "| | wall µs/step | training-thread CPU µs/step | cost µs/step, CPU (IQR) | cost µs/step, wall | ratio to bare, CPU | ratio, wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        e = result["variants"][name]
        if name == "bare":
            lines.append("| bare | %.1f | %.1f | | | 1 | 1 |" % (e["wall_us_per_step"], e["cpu_us_per_step"]))
            continue
        lo, hi = e["cost_us_per_step_cpu_iqr"]
        lines.append(
            "| %s | %.1f | %.1f | %+.1f (%+.1f to %+.1f) | %+.1f | %.3f | %.3f |"
            % (name, e["wall_us_per_step"], e["cpu_us_per_step"], e["cost_us_per_step_cpu"], lo, hi, e["cost_us_per_step_wall"], e["ratio_cpu"], e["ratio_wall"])
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a live sidecar (default: a refused port: the hook buffers)")
    parser.add_argument("--loops", default="minimal,mlp", help="which loops: minimal, mlp")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--minimal-steps", type=int, default=2000, help="steps per pass of the minimal loop")
    parser.add_argument("--mlp-steps", type=int, default=200, help="steps per pass of the MLP loop")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--hook-path-only", action="store_true", help="only the hook's own code per step (no training loops)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    url = args.url or refused_url()
    scopes = {"explicit": detached_scope(url, "bench-explicit"), "zero-code": detached_scope(url, "bench-zero-code")}
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hook": stepscope.__version__,
        "sidecar": "live" if args.url else "unreachable (buffering)",
        "loadavg_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "loops": {},
    }
    report["hook_path_alone"] = hook_path_alone()
    for kind in [] if args.hook_path_only else args.loops.split(","):
        steps = args.minimal_steps if kind == "minimal" else args.mlp_steps
        report["loops"][kind] = measure(Loop(kind, steps, args.batch, args.features, args.hidden), scopes, args.rounds)
    report["loadavg_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    for name, scope in scopes.items():
        closed = scope.close(timeout=5.0)
        report["%s_delivered_all" % name] = bool(closed) if args.url else None
    print(json.dumps(report, indent=2))
    if args.markdown:
        alone = report["hook_path_alone"]
        print()
        print("Hook path alone, training-thread CPU per step: zero-code %.2f µs, explicit API %.2f µs" % (alone["zero_code_us_per_step"], alone["explicit_us_per_step"]))
        print(
            "Zero-code CUDA marks (3 event records a step), added per step on the training thread: %.2f µs of the hook's own code, %.2f µs with the simulated layer's events; "
            "read by the sender thread: %.2f µs, %.2f µs"
            % (
                alone["zero_code_cuda_marks_us_per_step"],
                alone["zero_code_cuda_marks_simulated_us_per_step"],
                alone["sender_reads_marks_us_per_step"],
                alone["sender_reads_marks_simulated_us_per_step"],
            )
        )
        titles = {"minimal": "Minimal step (DataLoader next, backward of a scalar, optimizer step)", "mlp": "MLP step (batch 32, 64-128-10)"}
        for kind, result in report["loops"].items():
            print()
            print(markdown(titles.get(kind, kind), result))


if __name__ == "__main__":
    main()
