"""The hook's own code per step on the training thread, one hook against another, interleaved.

Each round starts one fresh process per hook (``--hook-path NAME=DIR``, a ``python-hook`` folder; the
default compares nothing but this checkout), in a rotating order; each process measures, by
``time.thread_time_ns`` over ``--steps`` steps, median of ``--repeats``, the training thread's CPU per
step above the same loop bare:

- ``explicit``: the README loop (``scope.loader``, ``phase("h2d")``, ``phase("compute")``, ``step()``),
  against a loop over the same iterable with nothing in it;
- ``zero_code`` (with torch): the zero-code path's DataLoader ``__next__``, ``Tensor.backward`` and
  optimizer post-hook wrappers (built by the hook's own ``make_*`` functions) around stand-ins that
  cost nothing and return a batch of two tensors, against the stand-ins called bare;
- ``zero_code_no_loader`` (with torch): a loop without a DataLoader or optimizer (the forward probe,
  the backward wrapper, a ``no_grad`` block's enter and exit).

With ``--by-call``, instead, each call of a step is timed on its own with ``time.perf_counter_ns``
(the loader's ``next()``, each ``with`` phase, ``step()``; the zero-code path's ``next()``,
``backward`` and optimizer post-hook), over ``--steps`` steps and ``--repeats`` passes; a call's cost is
the mean of the fastest half of its timings (the slower half holds the preemptions of a loaded
machine) less the same for the bare loop's call: where a step's nanoseconds go.

The scope is made with no connection: nothing is encoded or sent (the sender thread's cost is
``bench_sender.py``'s). Prints one JSON object: per hook and figure, the median over rounds and each
round's value, and the ratio of each hook to the first, taken round by round.

    python python-hook/bench/bench_hot.py --hook-path before=/tmp/before/python-hook --hook-path now=python-hook --rounds 7
    python python-hook/bench/bench_hot.py --by-call --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_ns(fn, steps, repeats):
    runs = []
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        fn()
        runs.append(time.thread_time_ns() - t0)
    return statistics.median(runs) / steps


def explicit(steps, repeats):
    from _stand_ins import explicit_steps
    from stepscope._scope import Scope

    scope = Scope(None)
    queue = scope._queue
    data = range(steps)

    def bare():
        for _ in data:
            if len(queue) > 8192:
                queue.clear()

    def hooked():
        explicit_steps(scope, steps)

    hooked()  # the first lookups decide GPU timing (off here): not part of a step's cost
    return cpu_ns(hooked, steps, repeats) - cpu_ns(bare, steps, repeats)


def zero_code(steps, repeats):
    import torch

    from _stand_ins import loader_path, no_loader_path

    with_loader = loader_path(torch)
    queue = with_loader.queue
    loop = range(steps)

    def run(next_, backward, hook):
        def go():
            for _ in loop:
                next_(None)
                backward(None)
                hook(None, (), {})
                if len(queue) > 8192:
                    queue.clear()

        return go

    bare, hooked = run(*with_loader.bare), run(*with_loader.hooked)
    hooked()
    result = cpu_ns(hooked, steps, repeats) - cpu_ns(bare, steps, repeats)

    # Without a DataLoader or optimizer: the probe (torch's real global forward pre-hook registry),
    # the backward pass ending the step, the hand-written update's no_grad block.
    without = no_loader_path(torch)

    def bare2():
        without.steps_bare(steps)

    def hooked2():
        without.steps_hooked(steps)

    hooked2()
    result2 = cpu_ns(hooked2, steps, repeats) - cpu_ns(bare2, steps, repeats)
    with_loader.driver.flush()
    without.driver.flush()
    return result, result2


def fast_half(timings):
    timings.sort()
    return statistics.mean(timings[: len(timings) // 2])


def by_call(steps, repeats):
    """Each call of a step timed on its own (see the module's docstring): ns above the bare call."""
    from _stand_ins import Empty
    from stepscope._scope import Scope

    clock = time.perf_counter_ns

    empty = Empty()

    class Bare:
        def loader(self, iterable):
            return iterable

        def phase(self, name):
            return empty

        def step(self, samples=None):
            pass

    def explicit_calls(scope):
        parts = {"loader next()": [], "with phase('h2d')": [], "with phase('compute')": [], "step()": []}
        a, b, c, d = parts.values()
        queue = getattr(scope, "_queue", [])
        it = iter(scope.loader(range(steps * repeats + 1)))
        for _ in range(steps * repeats):
            t0 = clock()
            next(it)
            t1 = clock()
            with scope.phase("h2d"):
                pass
            t2 = clock()
            with scope.phase("compute"):
                pass
            t3 = clock()
            scope.step(samples=32)
            t4 = clock()
            a.append(t1 - t0)
            b.append(t2 - t1)
            c.append(t3 - t2)
            d.append(t4 - t3)
            if len(queue) > 8192:
                queue.clear()
        return {name: fast_half(v) for name, v in parts.items()}

    hooked, bare = explicit_calls(Scope(None)), explicit_calls(Bare())
    out = {"explicit: " + name: hooked[name] - bare[name] for name in hooked}
    try:
        import torch
    except ImportError:
        return out
    from _stand_ins import loader_path

    with_loader = loader_path(torch)
    queue = with_loader.queue

    def zero_code_calls(next_, backward, hook):
        parts = {"next() (the step's end, its record, the batch's samples)": [], "Tensor.backward": [], "optimizer post-hook": []}
        a, b, c = parts.values()
        for _ in range(steps * repeats):
            t0 = clock()
            next_(None)
            t1 = clock()
            backward(None)
            t2 = clock()
            hook(None, (), {})
            t3 = clock()
            a.append(t1 - t0)
            b.append(t2 - t1)
            c.append(t3 - t2)
            if len(queue) > 8192:
                queue.clear()
        return {name: fast_half(v) for name, v in parts.items()}

    hooked, bare = zero_code_calls(*with_loader.hooked), zero_code_calls(*with_loader.bare)
    out.update({"zero-code: " + name: hooked[name] - bare[name] for name in hooked})
    first = with_loader.batch[0]
    shape, plain = [], []
    for _ in range(steps):
        t0 = clock()
        first.shape
        t1 = clock()
        t2 = clock()
        shape.append(t1 - t0)
        plain.append(t2 - t1)
    out["of it: a tensor's .shape"] = fast_half(shape) - fast_half(plain)
    with_loader.driver.flush()
    return out


def child(steps, repeats, calls):
    if calls:
        print(json.dumps(by_call(steps, repeats)))
        return
    out = {"explicit": explicit(steps, repeats)}
    try:
        import torch  # noqa: F401
    except ImportError:
        torch = None
    if torch is not None:
        out["zero_code"], out["zero_code_no_loader"] = zero_code(steps, repeats)
    print(json.dumps(out))


def ratio(values):
    return round(statistics.median(values), 3) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hook-path", action="append", default=[], help="NAME=DIR of a python-hook folder (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--by-call", action="store_true", help="time each call of a step on its own (where the nanoseconds go)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps, args.repeats, args.by_call)
        return
    hooks = [tuple(spec.split("=", 1)) for spec in args.hook_path] or [("this", HERE)]
    rounds = {name: [] for name, _ in hooks}
    for r in range(args.rounds):
        order = hooks[r % len(hooks):] + hooks[: r % len(hooks)]
        for name, path in order:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(path))
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--steps", str(args.steps), "--repeats", str(args.repeats)]
            if args.by_call:
                cmd.append("--by-call")
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            rounds[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    first = hooks[0][0]
    report = {"python": sys.version.split()[0], "rounds": args.rounds, "steps": args.steps, "repeats": args.repeats,
              "load_average": round(os.getloadavg()[0], 1), "ns_per_step": {}, "ratio_to_" + first: {}}
    for name, runs in rounds.items():
        report["ns_per_step"][name] = {
            figure: {"median": round(statistics.median(run[figure] for run in runs)), "rounds": [round(run[figure]) for run in runs]}
            for figure in runs[0]
        }
        report["ratio_to_" + first][name] = {
            figure: ratio([run[figure] / base[figure] for run, base in zip(runs, rounds[first]) if base[figure] > 0]) for figure in runs[0]
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
