"""Input the CLI used to accept, or answered with `internal error`: one line, the right exit code, nothing created."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.test_config import invoke, namespaces
from xeoncluster.cluster.command_context import make_context
from xeoncluster.commands.up.up_rollback import rollback
from xeoncluster.providers.config import load_config

pytestmark = pytest.mark.machine_wide  # refused() compares the machine's network namespaces


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            code: int = 2) -> str:
    before = namespaces()
    got, err = invoke(argv, capsys, monkeypatch)
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert got == code and len(errors) == 1 and err.strip().endswith(errors[0]), err
    assert "internal error" not in err
    assert namespaces() == before
    return errors[0]


@pytest.mark.parametrize("yaml_text,message", [
    ("nodes: true", "nodes: input should be a valid integer (got True)"),
    ("root_volume_gib: false", "root_volume_gib: input should be a valid integer"),
    ("ssh:\n  timeout: true", "ssh.timeout: input should be a valid integer"),
    ("provider: local\nlocal:\n  root: /root/xc", "local.root: must be outside /root"),
    ("provider: local\nlocal:\n  root: /root", "local.root: must be outside /root"),
])
def test_config_values_that_were_accepted(yaml_text: str, message: str, tmp_path: Path, xc_home: Path,
                                          capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c77.yaml"
    config.write_text(yaml_text + "\n")
    assert message in refused(["up", "--config", str(config)], capsys, monkeypatch)
    assert list(xc_home.iterdir()) == []


def test_a_bad_flag_value_is_named_by_its_flag(tmp_path: Path, xc_home: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "c77.yaml"
    config.write_text("nodes: 2\n")
    line = refused(["up", "--config", str(config), "--name", "../x"], capsys, monkeypatch)
    assert line.startswith("error: --name: must be lowercase") and "c77.yaml" not in line
    assert "--nodes: must be between 1 and 256" in refused(["plan", "--config", str(config), "--nodes", "0"], capsys,
                                                           monkeypatch)


def test_non_utf8_config_and_a_home_that_is_a_file(tmp_path: Path, xc_home: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "latin1.yaml"
    config.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert "latin1.yaml: not UTF-8 text" in refused(["up", "--config", str(config)], capsys, monkeypatch)
    home_file = tmp_path / "not-a-dir"
    home_file.write_text("")
    monkeypatch.setenv("XEONCLUSTER_HOME", str(home_file))
    for argv in (["status", "--name", "x1"], ["down", "--name", "x1"], ["up", "--provider", "local"]):
        assert f"XEONCLUSTER_HOME={home_file} is not a directory" in refused(argv, capsys, monkeypatch)


def test_permission_problems_say_what_and_how(tmp_path: Path, xc_home: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: object) -> None:
        raise PermissionError(13, "Permission denied", "/root/.xeoncluster/clusters/x1/state.json")

    monkeypatch.setattr("xeoncluster.cluster.state.StateDir.load", denied)
    line = refused(["status", "--name", "x1"], capsys, monkeypatch, code=1)
    assert "permission denied: /root/.xeoncluster/clusters/x1/state.json" in line and "sudo" in line
    monkeypatch.undo()
    monkeypatch.setenv("XEONCLUSTER_HOME", str(xc_home))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    config = tmp_path / "local.yaml"
    config.write_text("provider: local\n")
    line = refused(["--config", str(config), "down", "--name", "x1"], capsys, monkeypatch)
    assert "needs root" in line and "sudo xeoncluster down --name x1" in line


def test_train_input_checked_before_anything_runs(xc_home: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    line = refused(["train", "glue", "--task", "nosuch", "--dry-run", "--nodes", "2", "--instance-type",
                    "c7i.2xlarge"], capsys, monkeypatch)
    assert "--task 'nosuch': not a GLUE task" in line and "mrpc" in line
    line = refused(["train", "squad", "--dry-run", "--nodes", "0"], capsys, monkeypatch)
    assert "--nodes must be between 1 and 256 (got 0)" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="the local preflight needs root")
def test_local_preflight_counts_free_addresses(tmp_path: Path, xc_home: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "small.yaml"
    config.write_text(f"provider: local\nlocal:\n  subnet: 10.215.4.0/24\n  root: {tmp_path / 'root'}\n")
    for command in ("plan", "up"):
        line = refused([command, "--config", str(config), "--name", "big", "--nodes", "256"], capsys, monkeypatch)
        assert "local.subnet 10.215.4.0/24 has 253 free address(es) for 256 node(s)" in line
    assert not (tmp_path / "root").exists() and not (xc_home / "clusters" / "big").exists()


def test_ctrl_c_during_up_keep_on_failure_exits_130(xc_home: Path) -> None:
    ctx = make_context(load_config(None, {"name": "kept", "provider": "local"}))
    ctx.state.create()
    error = rollback(ctx, "launch master", KeyboardInterrupt(), keep=True)
    assert error.exit_code == 130 and "resources were kept" in error.message
    assert rollback(ctx, "launch master", RuntimeError("boom"), keep=True).exit_code == 1
