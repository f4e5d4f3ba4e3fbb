"""Where a node's pip gets the stack: a company mirror, the stack's own indexes, or a host wheelhouse.

Nodes that share this machine (the local provider) have no network of their own, so the host
downloads the pinned packages once into a wheelhouse they install from.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from xeoncluster.core.errors import ProviderError
from xeoncluster.core.stacks import Stack
from xeoncluster.providers.config import ClusterConfig

WHEEL_CACHE = Path("/var/cache/xeoncluster/wheels")
NODE_PYTHON = "/usr/bin/python3"  # what the venv playbook builds the venv with


def pip_args(config: ClusterConfig, stack: Stack, shares_host: bool,
             events: Callable[[str], None], wheel_cache: Path = WHEEL_CACHE) -> tuple[str, ...]:
    if shares_host:
        return ("--no-index", "--find-links", str(wheelhouse(stack, events, wheel_cache)))
    extra = list(config.pip.extra_index_urls)
    if config.pip.index_url:
        # A mirror replaces PyPI and the stack's own indexes (often unreachable from inside a VPC).
        return ("--index-url", config.pip.index_url, *_extra(extra), *_trusted([config.pip.index_url, *extra]))
    return _extra(list(stack.index_urls) + extra) + _trusted(extra)


def _extra(urls: list[str]) -> tuple[str, ...]:
    return tuple(arg for url in urls for arg in ("--extra-index-url", url))


def _trusted(urls: list[str]) -> tuple[str, ...]:
    """pip refuses a plain-http index unless its host is trusted; the config named it, so trust it."""
    hosts = dict.fromkeys(urlsplit(url).netloc for url in urls if url.startswith("http://"))
    return tuple(arg for host in hosts for arg in ("--trusted-host", host))


def wheelhouse(stack: Stack, events: Callable[[str], None], cache: Path = WHEEL_CACHE) -> Path:
    digest = hashlib.sha256("\n".join(sorted(stack.packages)).encode()).hexdigest()[:16]
    house = cache / digest
    if not (house / ".complete").exists():
        events(f"downloading {len(stack.packages)} pinned packages into {house} (once per stack)")
        fill_wheelhouse(house, list(stack.packages))
    return house


def fill_wheelhouse(house: Path, packages: list[str]) -> None:
    staging = house.with_name(house.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(staging), *packages]
    node_python = python_version(NODE_PYTHON)
    if f"{sys.version_info.major}.{sys.version_info.minor}" != node_python:
        argv[5:5] = ["--only-binary=:all:", "--python-version", node_python]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("ERROR:")] or ["pip download failed"]
        tail = errors[0].removeprefix("ERROR: ")
        raise ProviderError(f"could not fill the local wheelhouse: {tail}",
                            hint="nodes on this machine need PyPI access (from the host) once per stack "
                                 "to download the pinned packages")
    (staging / ".complete").touch()
    shutil.rmtree(house, ignore_errors=True)
    staging.rename(house)


def python_version(python: str) -> str:
    """major.minor of the interpreter the nodes on this machine build their venv with."""
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ProviderError(f"cannot run {python}: {exc}", hint="apt-get install python3 python3-venv") from None
    return out.strip()
