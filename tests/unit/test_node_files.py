"""What ships to the ranks' PYTHONPATH (wire/layout.py NODE_LIB) is all of xeoncluster/node/, its
subpackages included, with the package's empty top, and nothing else of ours: the ranks import only
node code, and a user's own modules of any name are never shadowed."""
from __future__ import annotations

from pathlib import Path

from xeoncluster.core.paths import master_files, node_files, package_dir

PACKAGE = Path(__file__).resolve().parents[2] / "xeoncluster"


def test_the_node_package_ships_whole_with_its_subpackages() -> None:
    assert package_dir() == PACKAGE
    shipped = {p.relative_to(PACKAGE).as_posix() for p in node_files()}
    on_disk = {p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "node").rglob("*.py")}
    assert {p for p in shipped if p.endswith(".py")} == on_disk | {"__init__.py"}
    assert len({p.split("/")[1] for p in on_disk if p.count("/") > 1}) >= 5  # the subpackages by job


def test_the_master_gets_everything_but_the_standin() -> None:
    shipped = {p.relative_to(PACKAGE).as_posix() for p in master_files()}
    assert "node/startup/runner.py" in shipped and "cluster/command_context.py" in shipped
    assert not [p for p in shipped if p.startswith("standin/")]
