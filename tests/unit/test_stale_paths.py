"""Nothing stale: every module file a docstring or a comment names exists. A module moved, renamed or
removed fails here instead of sending a reader to a file that is gone (issue 35 found 19 such names).

A name with a folder (`node/usage.py`, `providers/aws/spec.py`) must end the path of a file of the
repository; a bare name (`shell.py`) must be the name of one. Names that are not ours (a user's
script in an example, a file of another project) are listed in NOT_OURS with where they come from.
"""
from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("xeoncluster", "tests", "benchmarks", "scripts")
# A file name as prose names it: word characters, dots and hyphens, slash-separated folders before it.
NAMED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.py)\b")
NOT_OURS = {
    "train.py",  # a user's script in the examples of `train --script`
    "run_qa.py", "utils_qa.py",  # transformers' question-answering example, which squad_features follows
}
PLACEHOLDER = re.compile(r"[A-Z_]+\.py")  # `SCRIPT.py`, `PATH.py`: a name the user chooses


def python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *FOLDERS],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [REPO / name for name in listed if name.endswith(".py") and (REPO / name).is_file()]


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring in a module's source."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                yield first.lineno, first.value.value


def stale(text: str, files: set[str]) -> list[str]:
    """The module files `text` names that are in none of `files` (repository-relative paths)."""
    names = {path.rpartition("/")[2] for path in files}
    missing = []
    for named in NAMED.findall(text):
        clean = named.removeprefix("./")
        while clean.startswith("../"):
            clean = clean[3:]
        if PLACEHOLDER.fullmatch(clean):
            continue
        if "/" in clean:
            found = any(path == clean or path.endswith("/" + clean) for path in files)
        else:
            found = clean in names or clean in NOT_OURS
        if not found:
            missing.append(named)
    return missing


def repository_files() -> set[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return {name for name in listed if (REPO / name).exists()}


def test_every_module_file_a_docstring_or_comment_names_exists() -> None:
    files = repository_files()
    found = [f"{path.relative_to(REPO)}:{line}: {name}" for path in python_files()
             for line, text in prose(path.read_text()) for name in stale(text, files)]
    assert found == []


def test_a_stale_name_is_found() -> None:
    files = {"xeoncluster/wire/layout.py", "xeoncluster/providers/aws/role.py"}
    text = "see aws/role.py, wire/layout.py and ../xeoncluster/wire/layout.py; aws_role.py and remote_layout.py " \
           "are gone, so is node/stacks.py; train.py and SCRIPT.py are a user's"
    assert stale(text, files) == ["aws_role.py", "remote_layout.py", "node/stacks.py"]
