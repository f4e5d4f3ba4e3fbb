"""The folder a user's script runs in (the script's own, or --workdir): what of it goes to the nodes.

Only code and small files travel with it, by content digest, so unchanged nodes get nothing. Version
control, caches and large files are refused with one error that names them: they are either useless
on the nodes or data, which goes through --data. `--exclude GLOB` leaves a path out on purpose.

Files that look like secrets (keys, `.env`, cloud and netrc credentials) are refused too: every node,
and the master's agent with its IAM role, is a machine the user's secrets have no business on unless
the user says so, with `--include-secret PATH` for each.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

from xeoncluster.core.errors import ConfigError
from xeoncluster.remote.package_sync import tree_digest

MAX_FILE_BYTES = 10 * 2**20
MAX_TOTAL_BYTES = 50 * 2**20
REFUSED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                          ".ipynb_checkpoints", ".tox", ".venv", "venv", "node_modules", ".cache", "wandb"})
REFUSED_SUFFIXES = (".pyc", ".pyo")
SECRET_FILES = (".env*", "*.pem", "*.key", "id_rsa*", "id_ed25519*", "id_ecdsa*", ".netrc", "credentials*")
SECRET_DIRS = frozenset({".aws", ".ssh"})
INCLUDE_SECRET = "--include-secret"
REQUIREMENTS = "requirements.txt"
SYNC_MARKER = ".xeoncluster-digest"  # what the sync leaves in the nodes' copy: the copy scans as the original


@dataclass(frozen=True)
class Workdir:
    root: Path
    files: tuple[Path, ...]
    digest: str

    @property
    def remote(self) -> str:
        """Where it lands on every node, relative to ~/xeoncluster: one folder per content."""
        return f"work/{self.digest}"

    @property
    def requirements(self) -> Path | None:
        path = self.root / REQUIREMENTS
        return path if path in self.files else None


def scan(root: Path, excludes: tuple[str, ...] = (), secrets: tuple[str, ...] = ()) -> Workdir:
    """`secrets`: --include-secret patterns, the secret-looking paths the user sends anyway."""
    if not root.is_dir():
        raise ConfigError(f"--workdir {root}: no such folder", hint="pass the folder your script runs in")
    files, refused, large, secret = [], [], [], []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        for name in sorted(dirs):
            relative = (here / name).relative_to(root).as_posix()
            if _excluded(relative, excludes):
                dirs.remove(name)
            elif name in REFUSED_DIRS:
                refused.append(f"{relative}/")
                dirs.remove(name)
            elif name in SECRET_DIRS and not _within(relative, secrets):
                if any(p.is_file() for p in (here / name).rglob("*")):
                    secret.append(f"{relative}/")
                dirs.remove(name)
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(root).as_posix()
            if _excluded(relative, excludes) or not path.is_file() or name == SYNC_MARKER:
                continue
            if name.endswith(REFUSED_SUFFIXES):
                refused.append(relative)
            elif _looks_secret(name) and not _within(relative, secrets):
                secret.append(relative)
            elif path.stat().st_size > MAX_FILE_BYTES:
                large.append(f"{relative} ({path.stat().st_size / 2**20:.0f} MiB)")
            else:
                files.append(path)
    _check(root, refused, large, files)
    _check_secrets(root, secret)
    ordered = tuple(sorted(files))
    return Workdir(root, ordered, tree_digest(root, list(ordered)))


def _excluded(relative: str, patterns: tuple[str, ...]) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(relative, p.rstrip("/")) or fnmatch.fnmatch(name, p.rstrip("/")) for p in patterns)


def _looks_secret(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in SECRET_FILES)


def _within(relative: str, patterns: tuple[str, ...]) -> bool:
    """The path, or a folder it is in, matches one of `patterns` (--include-secret .aws sends .aws/*)."""
    parts = relative.split("/")
    return any(_excluded("/".join(parts[:end]), patterns) for end in range(1, len(parts) + 1))


def _check_secrets(root: Path, secret: list[str]) -> None:
    if secret:
        flags = " ".join(f"{INCLUDE_SECRET} {item.rstrip('/')}" for item in secret[:3])
        raise ConfigError(f"{root} holds files that look like secrets, which are not sent to the nodes: "
                          f"{_names(secret)}; send one anyway with {INCLUDE_SECRET} PATH",
                          hint=f"leave them out with --exclude NAME, or pass {flags} if the job needs them")


def _check(root: Path, refused: list[str], large: list[str], files: list[Path]) -> None:
    if refused:
        names = dict.fromkeys("'*" + Path(i).suffix + "'" if i.endswith(REFUSED_SUFFIXES) else i.rstrip("/")
                              .rsplit("/", 1)[-1] for i in refused)
        flags = " ".join(f"--exclude {name}" for name in names)
        raise ConfigError(f"{root} holds version control or caches, which are not sent to the nodes: "
                          f"{_names(refused)}", hint=f"pass --workdir a folder without them, or leave them out: "
                                                     f"{flags}")
    if large:
        raise ConfigError(f"{root} holds files over {MAX_FILE_BYTES // 2**20} MiB: {_names(large)}",
                          hint="data goes to the nodes with --data FILE; or leave them out with --exclude NAME")
    total = sum(p.stat().st_size for p in files)
    if total > MAX_TOTAL_BYTES:
        raise ConfigError(f"{root} holds {total / 2**20:.0f} MiB, over the {MAX_TOTAL_BYTES // 2**20} MiB a workdir "
                          "may send", hint="pass --workdir a smaller folder; data goes with --data FILE")


def _names(items: list[str], shown: int = 6) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more
