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


MAX_PARAMETERS = 8
# providers/ is another engineer's: its `launch` (9 parameters, in base.py and each provider) waits for them
PARAMETER_EXEMPT: set[str] = set()  # launch() takes one LaunchRequest now


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def _click_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """click passes a command its options one by one; the command turns them into one object at once."""
    return any("command(" in ast.unparse(d) or "group(" in ast.unparse(d) for d in node.decorator_list)


def test_no_function_takes_over_8_parameters() -> None:
    many = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _click_command(node):
                where = f"{path.relative_to(REPO)}:{node.name}"
                if _parameters(node) > MAX_PARAMETERS and where not in PARAMETER_EXEMPT:
                    many[where] = _parameters(node)
    assert many == {}
