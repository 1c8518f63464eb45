"""stepscope's start-up file for the zero-code path (``STEPSCOPE_AUTO=1``).

Python imports ``sitecustomize`` at start-up from the first folder of ``sys.path`` that has one, so
with this folder on ``PYTHONPATH`` (``stepscope run`` and ``python -m stepscope run`` put it there,
and the Kubernetes manifests do) every Python process started with ``STEPSCOPE_AUTO=1`` -- a script,
``torchrun`` and each rank it starts -- runs this first. It imports nothing of stepscope or torch:
it only waits for the program to import torch, and then instruments the training loop
(``stepscope._auto.install``). A process that never imports torch pays nothing more.

Then it runs the ``sitecustomize`` it hides (Debian's, a virtual environment's), if there is one.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_HOOK = os.path.dirname(os.path.dirname(_HERE))  # the folder holding the stepscope package


def enabled():
    return os.environ.get("STEPSCOPE_AUTO", "").strip().lower() in ("1", "true", "yes", "on")


def _install():
    try:
        try:
            from stepscope import _auto
        except ImportError:
            if _HOOK not in sys.path:
                sys.path.append(_HOOK)
            from stepscope import _auto
        _auto.install()
    except Exception as exc:
        try:
            sys.stderr.write("stepscope: zero-code: could not start (%s: %s); the script runs untouched\n" % (type(exc).__name__, exc))
        except Exception:
            pass


class TorchWatcher:
    """A meta path finder that lets ``import torch`` run as usual and then calls ``_install``.

    It answers no import itself: for ``torch`` it asks the finders after it, and wraps the loader's
    ``exec_module`` of that one spec so that stepscope is installed once torch has fully loaded.
    """

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, path, target)
            except Exception:
                spec = None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_install(module):
            try:
                exec_module(module)
            finally:
                try:
                    del loader.exec_module
                except Exception:
                    pass
            _install()

        try:
            loader.exec_module = exec_then_install
        except Exception:
            pass
        return spec


def arm():
    """Instrument torch now if the program imported it already, else once it does."""
    if "torch" in sys.modules:
        _install()
    elif not any(type(finder).__name__ == "TorchWatcher" for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchWatcher())


def _run_hidden_sitecustomize():
    """Run the sitecustomize that this one shadows on sys.path, as Python would have."""
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:
        try:
            sys.stderr.write("Error in sitecustomize (run after stepscope's); %s: %s\n" % (type(exc).__name__, exc))
        except Exception:
            pass


if __name__ == "sitecustomize":
    if enabled():
        arm()
    _run_hidden_sitecustomize()
