"""Where nodes' pip gets the stack: the stack's indexes, a mirror from the config, or a host wheelhouse."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from xeoncluster.cluster.packages import pip_args
from xeoncluster.core.stacks import get_stack
from xeoncluster.providers.config import load_config

STACK = dataclasses.replace(get_stack("stock"), index_urls=("https://a.example/simple", "https://b.example/simple"))


def test_the_stack_indexes_by_default() -> None:
    assert pip_args(load_config(None), STACK, False, print) == (
        "--extra-index-url", "https://a.example/simple", "--extra-index-url", "https://b.example/simple")


def test_a_mirror_replaces_pypi_and_the_stack_indexes() -> None:
    config = load_config(None, {"pip": {"index_url": "http://mirror.example/simple/",
                                        "extra_index_urls": ["http://more.example/simple/"]}})
    assert pip_args(config, STACK, False, print) == (
        "--index-url", "http://mirror.example/simple/", "--extra-index-url", "http://more.example/simple/",
        "--trusted-host", "mirror.example", "--trusted-host", "more.example")


def test_nodes_sharing_the_host_install_from_a_filled_wheelhouse(tmp_path: Path) -> None:
    digest = hashlib.sha256("\n".join(sorted(STACK.packages)).encode()).hexdigest()[:16]
    (tmp_path / digest).mkdir()
    (tmp_path / digest / ".complete").touch()
    events: list[str] = []
    # A complete wheelhouse is used as it is: nothing is downloaded.
    assert pip_args(load_config(None), STACK, True, events.append, tmp_path) == (
        "--no-index", "--find-links", str(tmp_path / digest))
    assert events == []
