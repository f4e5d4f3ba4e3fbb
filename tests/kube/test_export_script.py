"""`export trainjob|pytorchjob SCRIPT.py`: a user's script as the pods run it (the wrapper `train`
uses, under torchrun), its image's Dockerfile (the workdir on the stack's image), and the exported
command running here under torchrun with two ranks, the image's paths mapped onto this machine."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.test_export_torchrun import REPO, run_pod
from xeoncluster.cli import main
from xeoncluster.job.workdir import scan

EXAMPLES = REPO / "examples"


def export(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["export", *args])
    captured = capsys.readouterr()
    return int(exit_.value.code or 0), captured.out, captured.err


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    shutil.copy(EXAMPLES / "ddp_plain.py", root / "ddp_plain.py")
    (root / "requirements.txt").write_text("tomli-w==1.2.0\n")
    (root / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return root


def trainer_of(out: str) -> dict[str, Any]:
    _, job = yaml.safe_load_all(out)
    trainer: dict[str, Any] = job["spec"]["trainer"]
    return trainer


def test_a_script_job_runs_the_wrapper_from_its_own_image(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = export(["trainjob", "--nodes", "2", "--instance-type", "c7i.16xlarge", "--exclude", ".git",
                             str(project / "ddp_plain.py"), "--", "--steps", "10", "--log", "{output}/log.txt"], capsys)
    assert (code, err) == (0, "")
    _, job = yaml.safe_load_all(out)
    assert job["metadata"]["name"].startswith("ddp-plain-")  # a valid job name from ddp_plain.py
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == f"xeoncluster-ddp-plain:{scan(project, ('.git',)).digest}"
    output = f"/data/runs/{job['metadata']['name']}/node-$(XC_NODE_INDEX)"
    assert trainer["command"] == ["torchrun", "--nproc-per-node", "1", "--no-python", "python", "-m",
                                  "xeoncluster.node.user_script", "--output-dir", output,
                                  "--workdir", "/opt/xeoncluster/work",
                                  "--script", "ddp_plain.py", "--resume", "--", "--steps", "10",
                                  "--log", f"{output}/log.txt"]


def test_the_script_s_dockerfile_puts_the_sent_files_on_the_stack_image(
        project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dockerfile = tmp_path / "Dockerfile"
    code, out, err = export(["pytorchjob", "--run", "mine", "--exclude", ".git", "--dockerfile", str(dockerfile),
                             "-m", "ddp_plain", "--workdir", str(project)], capsys)
    assert code == 0, err
    image = yaml.safe_load(out)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"]
    assert f"docker build -f {dockerfile} -t {image} {project}" in err
    text = dockerfile.read_text()
    assert "FROM xeoncluster-training:stock\n" in text
    assert 'COPY ["ddp_plain.py", "/opt/xeoncluster/work/ddp_plain.py"]' in text and ".git" not in text.split("FROM")[1]
    assert "RUN pip install --no-cache-dir -r /opt/xeoncluster/work/requirements.txt" in text


@pytest.mark.parametrize("args, says", [
    (["proj/ddp_plain.py"], "holds version control or caches"),
    (["proj/ddp_plain.py", "--exclude", ".git", "--demo"], "--demo belong(s) to the built-in tasks"),
    (["proj/nosuch.py"], "script proj/nosuch.py does not exist"),
])
def test_bad_script_exports_are_one_line(project: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                         says: str) -> None:
    code, out, err = export(["trainjob", *args], capsys)
    assert (code, out) == (2, "")
    assert says in err and len(err.strip().splitlines()) == 1, err


def test_the_exported_script_command_trains_here_under_torchrun(project: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = export(["trainjob", "--nodes", "1", "--instance-type", "c7i.16xlarge", "--ppn", "2", "--threads",
                           "1", "--run", "plain", "--exclude", ".git", str(project / "ddp_plain.py"), "--",
                           "--steps", "8", "--save-every", "4"], capsys)
    assert code == 0
    trainer = trainer_of(out)
    trainer["command"] = [part.replace("/opt/xeoncluster/work", str(project)) for part in trainer["command"]]
    pvc = tmp_path / "pvc"
    pvc.mkdir()
    pod = run_pod(trainer, pvc)
    assert pod.returncode == 0, pod.stderr[-3000:] + pod.stdout[-2000:]
    output = pvc / "runs" / "plain" / "node-0"
    assert json.loads((output / "result.json").read_text())["world_size"] == 2
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["task"] == "script:ddp_plain.py" and metrics["ranks_per_node"] == 2
