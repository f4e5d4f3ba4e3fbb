"""The exported container command runs here, with the manifest's environment, under torchrun on the
offline demo: it trains, and a restarted pod resumes from its checkpoint on the PVC.

Only the paths change: the PVC's mount becomes a folder under tmp_path, the image's package root
becomes this checkout, and $(XC_NODE_INDEX) (the operator's pod index) becomes 0. torchrun gets
--nnodes 1 and a free port, what the operator's PET_* variables would tell it on one node.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from xeoncluster.cli import main

REPO = Path(__file__).resolve().parents[2]
NODE_INDEX = "$(XC_NODE_INDEX)"


def exported_trainjob(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    args = ["export", "trainjob", "--nodes", "1", "--instance-type", "c7i.16xlarge", "--ppn", "2", "--threads", "1",
            "--run", "torchrun-demo", "squad", "--demo",
            "--", "--max-steps", "6", "--save-steps", "3", "--max-eval-samples", "20", "--no-eval-before"]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 0
    _, job = yaml.safe_load_all(capsys.readouterr().out)
    trainer: dict[str, Any] = job["spec"]["trainer"]
    return trainer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def local(value: str, pvc: Path) -> str:
    return value.replace("/data", str(pvc)).replace("/opt/xeoncluster", str(REPO)).replace(NODE_INDEX, "0")


def run_pod(trainer: dict[str, Any], pvc: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "PMI_RANK")}
    # `python` and `torchrun` in the command are this interpreter's, as the image's venv is on its PATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for var in trainer["env"]:
        env[var["name"]] = local(var["value"], pvc) if "value" in var else "0"  # only the pod index is a field
    torchrun, *rest = (local(part, pvc) for part in trainer["command"])
    command = [torchrun, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), *rest]
    return subprocess.run(command, env=env, cwd=pvc, capture_output=True, text=True, timeout=300)


def test_the_exported_command_trains_under_torchrun_and_resumes(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert shutil.which("torchrun", path=str(Path(sys.executable).parent))
    trainer = exported_trainjob(capsys)
    assert trainer["command"][:3] == ["torchrun", "--nproc-per-node", "2"]
    env = {var["name"]: var.get("value") for var in trainer["env"]}
    assert env["OMP_NUM_THREADS"] == "1" and env["LD_PRELOAD"].endswith("libtcmalloc.so.4")
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    first = run_pod(trainer, pvc)
    assert first.returncode == 0, first.stderr[-3000:] + first.stdout[-2000:]
    output = pvc / "runs" / "torchrun-demo" / "node-0"
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["world_size"], metrics["ranks_per_node"], metrics["threads_per_rank"]) == (2, 2, 1)
    assert metrics["global_steps"] == 6 and metrics["resumed_from_step"] is None
    assert metrics["train_loss"] > 0 and (pvc / "demo").is_dir()
    assert "[1] " in first.stdout  # both ranks ran and labelled their lines
    # A restarted pod runs the same command: it resumes from the newest checkpoint in its folder.
    again = run_pod(trainer, pvc)
    assert again.returncode == 0, again.stderr[-3000:] + again.stdout[-2000:]
    assert "resuming from" in again.stdout and "checkpoint-6" in again.stdout
    assert json.loads((output / "metrics.json").read_text())["resumed_from_step"] == 6
