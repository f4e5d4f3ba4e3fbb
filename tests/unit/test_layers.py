"""The floors of the package, top to bottom, and the one rule between them: a module imports only its own
floor or a lower one, and no import, even one made only for type checking, closes a circle.

docs/architecture.md draws the same floors; FLOORS below maps them to folders, and a module's path gives
its floor.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "xeoncluster"

# The floors, top to bottom, each the folders of xeoncluster/ that stand on it. A module's floor is the
# first folder of its path: nothing else sorts modules, and no module sits at the package's top.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("cli",)),
    ("commands", ("commands",)),
    ("agent", ("agent",)),
    ("operations", ("operations", "kube")),
    ("runs", ("runs",)),
    ("cluster", ("cluster",)),
    ("job", ("job",)),
    ("remote", ("remote",)),
    ("providers", ("providers", "storage", "topology")),
    ("wire", ("wire",)),
    ("core", ("core",)),
    ("node", ("node",)),
]
# Beside the floors: the EC2 stand-in imports only itself, and nothing imports it.
APART = ("xeoncluster.standin",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module of ours `path` imports: at its top, inside functions, or for type checking."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import (the package imports itself by its name)")
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                yield name


def with_packages(names: set[str], raw: dict[str, set[str]]) -> set[str]:
    """Importing a.b.c runs the __init__.py of a and of a.b first: those count where they import ours."""
    found = set(names)
    for name in names:
        parts = name.split(".")
        found |= {p for n in range(2, len(parts)) if raw.get(p := ".".join(parts[:n]))}
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    raw = {name: set(imported(path, known)) - {name} for name, path in known.items()}
    return {name: with_packages(outs, raw) - packages_of(name) for name, outs in raw.items()}


def packages_of(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts))}


def is_apart(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in APART)


def floor_of(module: str) -> int | None:
    """The floor of the module's first folder under xeoncluster/ (the path says the floor)."""
    if module == "xeoncluster.__main__":
        return 0  # `python -m xeoncluster`: the console script's door, on the cli floor
    parts = module.split(".")
    if len(parts) < 3 and not (PACKAGE / parts[-1]).is_dir():
        return None  # a module at the package's top has no floor: the test below refuses it
    for index, (_name, folders) in enumerate(FLOORS):
        if parts[1] in folders:
            return index
    return None


def test_every_module_has_a_floor() -> None:
    homeless = [m for m in modules() if m != "xeoncluster" and floor_of(m) is None and not is_apart(m)]
    assert homeless == []


def test_no_module_imports_a_higher_floor() -> None:
    upward = [f"{a} ({FLOORS[fa][0]}) -> {b} ({FLOORS[fb][0]})" for a, outs in graph().items() for b in outs
              if (fa := floor_of(a)) is not None and (fb := floor_of(b)) is not None and fb < fa]
    assert upward == []


def test_the_standin_stands_apart() -> None:
    crossing = [f"{a} -> {b}" for a, outs in graph().items() for b in outs
                if is_apart(a) != is_apart(b) and b != "xeoncluster"]
    assert crossing == []


def test_the_verbs_never_import_the_masters_agent() -> None:
    """agent/ runs on the master; the CLI reaches it through runs/ (its files, records and client) only."""
    crossing = [f"{a} -> {b}" for a, outs in graph().items() for b in outs
                if a.startswith(("xeoncluster.cli", "xeoncluster.commands")) and b.startswith("xeoncluster.agent")]
    assert crossing == []


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = stack[stack.index(node):]
                del stack[stack.index(node):]
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_closes_a_circle() -> None:
    assert circles(graph()) == []


def test_the_circle_finder_finds_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
