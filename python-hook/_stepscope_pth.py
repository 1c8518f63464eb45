"""Started by ``stepscope-auto.pth`` (installed beside this file by ``pip install``) when
``STEPSCOPE_AUTO`` is set: arms the zero-code path in this interpreter, as the start-up folder on
``PYTHONPATH`` does (``stepscope/_boot/sitecustomize.py``, whose ``arm`` this runs).

The ``.pth`` line imports this module only when the variable is set at all; this module reads its
value (``1``, ``true``, ``yes``, ``on``). Nothing of stepscope or torch is imported here: the start-up
file is loaded by its path, and it waits for the program to import torch.
"""

import os


def _arm():
    try:
        import importlib.util

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "stepscope", "_boot", "sitecustomize.py")
        spec = importlib.util.spec_from_file_location("_stepscope_boot", path)
        boot = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(boot)
        if boot.enabled():
            boot.arm()
    except Exception as exc:
        try:
            import sys

            sys.stderr.write("stepscope: zero-code: could not start (%s: %s); the script runs untouched\n" % (type(exc).__name__, exc))
        except Exception:
            pass


_arm()
