"""What comes back from the cluster is inert: an archive is unpacked by runs/archive's rule (files and
folders only, names under the target, caps), never by tarfile's filter, which this machine's Python
lets a chain of symlinks past (CVE-2025-4517)."""
from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from xeoncluster.agent.checkpoint_source import OverSsh
from xeoncluster.cluster import untrusted
from xeoncluster.commands.train.train_results import fetch_results
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult
from xeoncluster.runs.archive import unpack

MASTER = Node("node0", "i-1", "10.0.0.1", "10.0.0.1", "master", "local", None, None)
HOPS = "abcdefghijklmnop"


def add(tar: tarfile.TarFile, name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data)
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def crafted(archive: Path, dest: Path) -> None:
    """CVE-2025-4517's shape: folders with names long enough that the real path of the last link in a
    chain of links to them passes PATH_MAX, where realpath stops resolving; that link points up to
    `dest`, `escape` one level above it, and a file is written through `escape` into dest's parent."""
    width = (os.pathconf(dest.parent, "PC_PATH_MAX") - len(str(dest)) - 1) // (len(HOPS) + 1)
    with tarfile.open(archive, "w:gz") as tar:
        parent = ""
        for hop in HOPS:
            add(tar, os.path.join(parent, "d" * width), tarfile.DIRTYPE)
            add(tar, os.path.join(parent, hop), tarfile.SYMTYPE, "d" * width)
            parent = os.path.join(parent, "d" * width)
        last = os.path.join(*HOPS, "l" * 254)
        add(tar, last, tarfile.SYMTYPE, os.path.join(*[".."] * len(HOPS)))
        add(tar, "escape", tarfile.SYMTYPE, os.path.join(last, ".."))
        add(tar, "escape/outside/victim.txt", data=b"written through the links\n")


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "victim.txt"
    path.parent.mkdir()
    path.write_text("mine\n")
    return path


def outside_of(tmp_path: Path, target: Path) -> dict[str, bytes]:
    """Every file under tmp_path but not under `target`, with its content."""
    return {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*")
            if p.is_file() and not p.is_symlink() and target not in p.parents}


def test_this_pythons_data_filter_writes_outside_through_the_chain(tmp_path: Path) -> None:
    """The evidence for our own rule (skipped on a Python that has the fix)."""
    dest, archive, mine = tmp_path / "dest", tmp_path / "crafted.tar.gz", victim(tmp_path)
    dest.mkdir()
    crafted(archive, dest)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (OSError, tarfile.TarError):
        pass
    if mine.read_text() == "mine\n":
        pytest.skip("this Python's filter='data' holds against the chain (it has the CVE-2025-4517 fix)")
    assert mine.read_text() == "written through the links\n"


def test_our_rule_refuses_the_chain_before_writing_anything(tmp_path: Path) -> None:
    dest, archive, mine = tmp_path / "dest", tmp_path / "crafted.tar.gz", victim(tmp_path)
    dest.mkdir()
    crafted(archive, dest)
    with pytest.raises(untrusted.Refused) as caught:
        unpack(archive, dest, "the run's output from node0")
    assert caught.value.message == ("the run's output from node0 names archive member 'a': refused "
                                    "(a symbolic link; only files and folders are unpacked)")
    assert mine.read_text() == "mine\n" and list(dest.iterdir()) == []


@pytest.mark.parametrize(("kind", "name", "link", "why"), [
    (tarfile.SYMTYPE, "link", "../outside/victim.txt", "a symbolic link"),
    (tarfile.SYMTYPE, "inner", "ok.txt", "a symbolic link"),
    (tarfile.LNKTYPE, "hard", "ok.txt", "a hard link"),
    (tarfile.CHRTYPE, "null", "", "a device"),
    (tarfile.BLKTYPE, "disk", "", "a device"),
    (tarfile.FIFOTYPE, "pipe", "", "a fifo"),
    (tarfile.REGTYPE, "ABSOLUTE", "", "an absolute name"),
    (tarfile.REGTYPE, "../outside/victim.txt", "", "a '..' segment"),
    (tarfile.REGTYPE, "sub/../../outside/victim.txt", "", "a '..' segment"),
    (tarfile.REGTYPE, "line\nbreak", "", "a control character"),
])
def test_anything_but_files_and_folders_under_the_target_is_refused(tmp_path: Path, kind: bytes, name: str,
                                                                    link: str, why: str) -> None:
    """A sound file before the bad member is not written either: every member is checked first."""
    dest, archive, mine = tmp_path / "dest", tmp_path / "bad.tar", victim(tmp_path)
    name = str(mine) if name == "ABSOLUTE" else name
    with tarfile.open(archive, "w") as tar:
        add(tar, "ok.txt", data=b"fine\n")
        add(tar, name, kind, link, b"theirs\n" if kind == tarfile.REGTYPE else b"")
    with pytest.raises(untrusted.Refused) as caught:
        unpack(archive, dest, "the test")
    assert caught.value.message == f"the test names archive member {name!r}: refused ({why}" + (
        "; only files and folders are unpacked)" if kind != tarfile.REGTYPE else ")")
    assert "\n" not in caught.value.one_line() and caught.value.exit_code == 1
    assert mine.read_text() == "mine\n" and list(dest.iterdir()) == []


def test_too_many_members_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "many.tar"
    with tarfile.open(archive, "w") as tar:
        for n in range(4):
            add(tar, f"f{n}", data=b"x")
    with pytest.raises(untrusted.Refused, match=r"member 'f3': refused \(more than 3 members\)"):
        unpack(archive, tmp_path / "dest", "the test", max_members=3)
    assert list((tmp_path / "dest").iterdir()) == []


def test_too_many_bytes_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "big.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "small", data=b"12345")
        add(tar, "large", data=b"123456")
    with pytest.raises(untrusted.Refused, match=r"member 'large': refused \(the files exceed 10 bytes\)"):
        unpack(archive, tmp_path / "dest", "the test", max_bytes=10)
    assert list((tmp_path / "dest").iterdir()) == []


def test_a_link_already_in_the_target_is_not_written_through(tmp_path: Path) -> None:
    dest, archive, mine = tmp_path / "dest", tmp_path / "plain.tar", victim(tmp_path)
    dest.mkdir()
    (dest / "sub").symlink_to(mine.parent)
    with tarfile.open(archive, "w") as tar:
        add(tar, "sub/victim.txt", data=b"theirs\n")
    with pytest.raises(untrusted.Refused, match=r"member 'sub/victim.txt': refused \(it leads out of "):
        unpack(archive, dest, "the test")
    assert mine.read_text() == "mine\n"


def test_a_file_where_a_folder_is_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "clash.tar"
    with tarfile.open(archive, "w") as tar:
        add(tar, "x", tarfile.DIRTYPE)
        add(tar, "x", data=b"file\n")
    with pytest.raises(untrusted.Refused, match=r"member 'x': refused \(cannot be written there: "):
        unpack(archive, tmp_path / "dest", "the test")


def test_a_results_folder_packed_by_tar_comes_back_as_it_was(tmp_path: Path) -> None:
    """`tar -czf` as the master runs it: a './' member, folders, an empty folder, an executable; unpacked
    twice into the same folder (results fetched again), the second copy replacing the first."""
    source = tmp_path / "run"
    (source / "preds" / "empty").mkdir(parents=True)
    (source / "result.txt").write_text("out\n")
    (source / "preds" / "p.json").write_text("{}")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    archive = tmp_path / "results.tar.gz"
    subprocess.run(["tar", "-C", str(source), "-czf", str(archive), "."], check=True)
    dest = tmp_path / "dest"
    for _ in range(2):
        names = unpack(archive, dest, "the test")
    assert sorted(names) == ["preds/p.json", "result.txt", "run.sh"]
    assert (dest / "result.txt").read_text() == "out\n" and (dest / "preds" / "p.json").read_text() == "{}"
    assert (dest / "preds" / "empty").is_dir() and os.access(dest / "run.sh", os.X_OK)
    assert not os.access(dest / "result.txt", os.X_OK)


class CraftedMaster:
    """A master whose run output comes back as the crafted archive, built for where it will be unpacked."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        return {nodes[0].name: CommandResult(nodes[0].name, 0, "", "")}

    def get(self, node: Node, remote_path: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        if remote_path.endswith((".xc-results.tar.gz", ".xc-storage.tar")):
            crafted(local, local.parent)
        else:
            local.write_text("{}")


def test_fetching_a_runs_output_refuses_the_chain_in_one_line(tmp_path: Path) -> None:
    """As `xeoncluster train` for a script meets it: the output folder, fetched whole."""
    mine, run_dir = victim(tmp_path), tmp_path / "results"
    before = outside_of(tmp_path, run_dir)
    with pytest.raises(untrusted.Refused) as caught:
        fetch_results(CraftedMaster(tmp_path), MASTER, "r1", run_dir, None, everything=True)  # type: ignore[arg-type]
    line = caught.value.one_line()
    assert "\n" not in line and line.startswith("the run's output from node0 names archive member 'a': refused")
    assert mine.read_text() == "mine\n" and outside_of(tmp_path, run_dir) == before
    assert list(run_dir.iterdir()) == []


def test_the_agent_refuses_the_chain_in_a_checkpoint_and_keeps_no_copy(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent for nodes on this machine fetches checkpoints over SSH the same way."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    source = OverSsh(CraftedMaster(tmp_path), MASTER, "xeoncluster/runs/r1")  # type: ignore[arg-type]
    with pytest.raises(untrusted.Refused, match=r"^node0's run folder names archive member 'a': refused"):
        source.snapshot(40)
    assert list(tmp_path.iterdir()) == []
