"""The package's import graph: every module imports on its own, and no two modules import each other, not even
through an import inside a function (a lazy import only hides a cycle; it still ties the two modules together)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "methods", "envs", "paper_figures")


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (module level or inside a function)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return {t for t in targets if t in known and t != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_the_package():
    found = modules()
    graph = {name: imports_of(name, path, set(found)) for name, path in found.items()}
    # a package's __init__ re-exporting its own submodules is not a cycle of roles: drop package -> own child edges
    graph = {name: {t for t in targets if not t.startswith(name + ".")} for name, targets in graph.items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(n for n in modules() if not n.endswith("__main__"))
    script = ("import importlib, sys, traceback\nfailed = []\n"
              f"for name in {names!r}:\n"
              "    try:\n        importlib.import_module(name)\n"
              "    except Exception:\n        failed.append(name + ': ' + traceback.format_exc(limit=2))\n"
              "print('\\n'.join(failed))\nsys.exit(1 if failed else 0)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr
