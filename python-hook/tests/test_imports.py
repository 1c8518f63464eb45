"""The hook's modules import one another without a circle, deferred imports inside functions included.

A circle works in Python only as long as no module uses the other at import time; the next edit
that does breaks the hook at `import stepscope`, which is the training script's first line.
"""

import ast
import os
import unittest

PACKAGE = "stepscope"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)


def modules() -> dict:
    """Module name (``stepscope._env``, ``stepscope`` for the package itself) -> its source path."""
    found = {}
    for folder, _, files in os.walk(ROOT):
        parts = [PACKAGE] + os.path.relpath(folder, ROOT).split(os.sep)
        parts = [p for p in parts if p != "."]
        for name in files:
            if name.endswith(".py"):
                stem = name[:-3]
                found[".".join(parts if stem == "__init__" else parts + [stem])] = os.path.join(folder, name)
    return found


def imports(name: str, path: str, known: dict) -> set:
    """The package's modules that ``name`` imports, anywhere in its source."""
    is_package = path.endswith("__init__.py")
    package = name if is_package else name.rpartition(".")[0]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in known:
                continue
            # `from . import _log` imports the module _log; `from . import __version__` the package.
            submodules = [target + "." + alias.name for alias in node.names if target + "." + alias.name in known]
            found.update(submodules or [target])
            if len(submodules) < len(node.names):
                found.add(target)
    found.discard(name)
    return found


def cycle(graph: dict):
    """One import circle as a list of names (first == last), or None."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return None


def package_graph() -> dict:
    known = modules()
    # Every submodule imports its package first; that arrow is Python's, not the code's, and is left out.
    return {name: imports(name, path, known) - {PACKAGE} if name != PACKAGE else imports(name, path, known) for name, path in known.items()}


class ImportGraphTest(unittest.TestCase):
    def test_no_module_imports_itself_through_others(self):
        graph = package_graph()
        self.assertIn("stepscope._scope", graph)
        self.assertIsNone(cycle(graph))

    def test_the_check_sees_a_circle_and_a_deferred_import(self):
        # The guard itself: a circle closed by an import inside a function is found.
        self.assertEqual(cycle({"a": {"b"}, "b": {"a"}}), ["a", "b", "a"])
        graph = package_graph()
        self.assertIn("stepscope._stack", graph["stepscope._env"])  # imported at the top since the circle opened
        self.assertIn("stepscope._auto", graph["stepscope.integrations._timer"])  # a deferred import


if __name__ == "__main__":
    unittest.main()
