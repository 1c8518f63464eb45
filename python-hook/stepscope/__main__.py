"""``python -m stepscope``: the zero-code path from Python.

    python -m stepscope run [--url URL] [--job NAME] train.py [ARGS...]
    python -m stepscope run [--url URL] [--job NAME] -m package.module [ARGS...]
    python -m stepscope path        # the PYTHONPATH that makes STEPSCOPE_AUTO=1 work in any process

``run`` runs the script in this interpreter as ``python train.py`` would, with its training loop
timed (see ``stepscope._auto``), and sets ``STEPSCOPE_AUTO=1`` and ``PYTHONPATH`` for the processes
it starts, so that ranks a launcher starts from the script are timed too.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = """usage: python -m stepscope run [--url URL] [--job NAME] (SCRIPT | -m MODULE) [ARGS...]
       python -m stepscope path

run   run a training script with its loop timed by stepscope, unmodified (the zero-code path)
path  print the PYTHONPATH entries that make STEPSCOPE_AUTO=1 work in processes started otherwise"""

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
BOOT = os.path.join(_PACKAGE, "_boot")
HOOK = os.path.dirname(_PACKAGE)


def python_path(existing=None) -> str:
    """PYTHONPATH with the start-up folder and the hook in front of ``existing`` (once each)."""
    parts = [BOOT, HOOK]
    for part in (existing or "").split(os.pathsep):
        if part and part not in parts:
            parts.append(part)
    return os.pathsep.join(parts)


def _arm_here():
    """Run the start-up file's arm() in this process (it started before STEPSCOPE_AUTO was set)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("stepscope_boot", os.path.join(BOOT, "sitecustomize.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.arm()


def run(argv) -> int:
    args = list(argv)
    env = {}
    while args and args[0].startswith("--"):
        option = args.pop(0)
        if option == "--":
            break
        name, _, value = option.partition("=")
        if name not in ("--url", "--job"):
            return _usage("unknown option %s" % name)
        if not value:
            if not args:
                return _usage("%s needs a value" % name)
            value = args.pop(0)
        env["STEPSCOPE_URL" if name == "--url" else "STEPSCOPE_JOB"] = value
    if not args:
        return _usage("no script to run")
    os.environ.update(env)
    os.environ["STEPSCOPE_AUTO"] = "1"
    os.environ["PYTHONPATH"] = python_path(os.environ.get("PYTHONPATH"))
    try:
        _arm_here()
    except Exception as exc:
        sys.stderr.write("stepscope: zero-code: could not start (%s: %s); the script runs untouched\n" % (type(exc).__name__, exc))
    if args[0] == "-m":
        if len(args) < 2:
            return _usage("-m needs a module")
        module = args[1]
        sys.argv = [module] + args[2:]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    script = args[0]
    if not os.path.exists(script):
        sys.stderr.write("python -m stepscope run: %s: no such file\n" % script)
        return 2
    sys.argv = [script] + args[1:]
    here = os.path.dirname(os.path.abspath(script))
    if sys.path:
        sys.path[0] = here
    else:
        sys.path.insert(0, here)
    runpy.run_path(script, run_name="__main__")
    return 0


def _usage(problem=None) -> int:
    if problem:
        sys.stderr.write("python -m stepscope: %s\n" % problem)
    sys.stderr.write(USAGE + "\n")
    return 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE + "\n")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        return run(rest)
    if command == "path":
        sys.stdout.write(python_path() + "\n")
        return 0
    if command in ("--version", "version"):
        from . import __version__

        sys.stdout.write(__version__ + "\n")
        return 0
    return _usage("unknown command %r" % command)


if __name__ == "__main__":
    sys.exit(main())
