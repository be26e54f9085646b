"""The house's import rules (``docs/architecture.md``, The floors), read from the code itself.

- No two modules import each other, directly or around a circle (module-level imports; an
  import under ``TYPE_CHECKING`` is for the type checker only and is not followed).
- The domain packages and the pipeline never import ``runtime`` — not even inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("accounts", "evals", "journal", "knowledge", "memory", "pipeline", "plugins",
            "runtime", "storage", "tools")  # fmt: skip
BELOW_RUNTIME = ("accounts", "journal", "knowledge", "memory", "pipeline", "plugins", "storage",
                 "tools")  # fmt: skip


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> list[str]:
    """The modules one import statement names (``from pkg import sub`` names ``pkg.sub``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def _module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found += _module_level(node.body) + _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            found += _module_level(node.body) + _module_level(node.orelse)
            for handler in node.handlers:
                found += _module_level(handler.body)
    return found


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = path.name == "__init__.py"
        targets = set()
        for node in _module_level(tree.body):
            names = _imported(node, name, package)
            # ``from pkg import sub``: the submodule when it is one, else the package itself.
            subs = [n for n in names[1:] if n in modules]
            targets.update(subs or [n for n in names[:1] if n in modules])
        graph[name] = targets - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_around_a_circle() -> None:
    modules = _modules()
    graph = _graph(modules)
    assert "pipeline.responder" in graph["pipeline.engine"]  # the graph is read, not empty
    assert "runtime.cli.accounts" in graph["runtime.cli.command"]  # a submodule, not its package
    assert _circles(graph) == []


def test_no_domain_package_nor_the_pipeline_imports_the_runtime() -> None:
    offenders = []
    for name, path in _modules().items():
        if name.split(".")[0] not in BELOW_RUNTIME:
            continue
        package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                offenders += [f"{name}: {n}" for n in _imported(node, name, package)[:1]
                              if n.split(".")[0] == "runtime"]  # fmt: skip
    assert offenders == []
