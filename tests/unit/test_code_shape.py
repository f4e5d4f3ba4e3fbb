"""Small modules, short functions: no function over 50 lines, no module over 350 (the project's rule,
checked here so that it holds for new code from its first line)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("xeoncluster",)
MAX_FUNCTION_LINES = 50
MAX_MODULE_LINES = 350


def sources() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))]


def test_no_module_is_over_350_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_function_is_over_50_lines() -> None:
    long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(REPO)}:{node.lineno} {node.name}"] = length
    assert long == {}
