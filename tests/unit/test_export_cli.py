"""`xeoncluster export` on the command line: every option explained, bad input in one line (exit 2),
the YAML on stdout, and the Dockerfile with the stack's pins."""
from __future__ import annotations

from pathlib import Path

import click
import pytest
import yaml

from xeoncluster.cli import main
from xeoncluster.cli.export_command import export as export_command
from xeoncluster.core.stacks import get_stack

FOUR_C7I = ["--nodes", "4", "--instance-type", "c7i.16xlarge"]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["export", *args])
    captured = capsys.readouterr()
    return int(exit_.value.code or 0), captured.out, captured.err


@pytest.fixture(autouse=True)
def no_cluster_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the checkout's cluster.yaml must not set the defaults here


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    options = [p for p in export_command.params if isinstance(p, click.Option)]
    assert {o.name for o in options} >= {"nodes", "instance_type", "image", "dockerfile", "pvc", "market",
                                         "max_restarts", "run", "demo", "env_pairs"}
    for option in options:
        assert option.help, option.name
        assert option.opts[0] in out, option.opts[0]
    assert "trainjob" in out and "pytorchjob" in out and "torchrun" in out


def test_the_trainjob_yaml_for_four_c7i_16xlarge(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["trainjob", *FOUR_C7I, "--run", "squad-4", "squad", "--", "--epochs", "2"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("# xeoncluster export trainjob: 4 x c7i.16xlarge (spot), stack stock\n")
    assert "# 4 rank(s): 4 pod(s) x 1 rank(s), 31 thread(s) each" in out
    runtime, job = yaml.safe_load_all(out)
    assert runtime["kind"] == "TrainingRuntime" and job["metadata"]["name"] == "squad-4"
    trainer = job["spec"]["trainer"]
    assert trainer["image"] == "xeoncluster-training:stock"
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "62", "memory": "115Gi"}
    assert trainer["command"][-3:] == ["--resume", "--epochs", "2"]


def test_the_config_sets_the_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text("nodes: 3\naws:\n  instance_types: [m7i.8xlarge]\n  market: on-demand\n")
    code, out, _ = run(["pytorchjob", "--run", "glue-3", "glue"], capsys)
    assert code == 0
    (job,) = yaml.safe_load_all(out)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    assert worker["template"]["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "m7i.8xlarge",
                                                          "karpenter.sh/capacity-type": "on-demand"}


@pytest.mark.parametrize(("args", "message"), [
    (["trainjob", "--nodes", "0", "squad"], "error: --nodes must be between 1 and 256 (got 0)"),
    (["trainjob", "--instance-type", "c7i.16xlarg", "squad"],
     "error: --instance-type 'c7i.16xlarg': not in the instance catalog (did you mean 'c7i.16xlarge'?)"),
    (["trainjob", "sqad"], "error: unknown task 'sqad'; choose one of squad, glue, a script PATH.py, or -m MODULE"),
    (["cronjob", "squad"], "error: unknown manifest kind 'cronjob'; choose one of trainjob, pytorchjob"),
    (["pytorchjob", "--market", "spots", "squad"], "error: --market 'spots': choose one of spot, on-demand"),
    (["trainjob", "--ppn", "0", "squad"], "error: --ppn must be at least 1 (got 0)"),
    (["trainjob", "--max-restarts", "-1", "squad"], "error: --max-restarts must be 0 or more (got -1)"),
    (["trainjob", "--train-file", "train.json", "squad"],
     "error: --train-file 'train.json': give the file's absolute path inside the pod, e.g. on the PVC (/data/...)"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(args, capsys)
    assert (code, out, err) == (2, "", message + "\n")


def test_bad_run_and_pvc_names_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["--run", "Squad_1"], ["--pvc", "My PVC"]):
        code, out, err = run(["trainjob", *args, "squad"], capsys)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: {args[0]} ")


def test_dockerfile_installs_the_stack_pins_tcmalloc_and_training(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Dockerfile"
    code, out, err = run(["trainjob", *FOUR_C7I, "--dockerfile", str(path), "--image", "reg.example/xc:1",
                          "--run", "squad-4", "squad"], capsys)
    assert code == 0 and f"wrote {path}" in err
    text = path.read_text()
    stack = get_stack("stock")
    for package in stack.packages:
        assert f"        {package}" in text, package
    for url in stack.index_urls:
        assert f"--extra-index-url {url}" in text
    assert "libgoogle-perftools4" in text and "COPY xeoncluster/node/ /opt/xeoncluster/xeoncluster/node/" in text
    assert "ENV PYTHONPATH=/opt/xeoncluster" in text and "docker build -f THIS_FILE -t reg.example/xc:1 ." in text
    _, job = yaml.safe_load_all(out)
    env = {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}
    assert f"tcmalloc for LD_PRELOAD ({env['LD_PRELOAD']})" in text
    assert env["PYTHONPATH"] == "/opt/xeoncluster"


def test_the_intel_stack_dockerfile_uses_intel_s_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Dockerfile.intel"
    code, out, _ = run(["trainjob", "--stack", "intel", "--dockerfile", str(path), "--run", "s", "squad"], capsys)
    assert code == 0
    text = path.read_text()
    assert "intel-extension-for-pytorch==2.7.0" in text and "pytorch-extension.intel.com" in text
    env = {e["name"]: e.get("value") for e in list(yaml.safe_load_all(out))[1]["spec"]["trainer"]["env"]}
    assert env["XC_STACK"] == "intel" and env["CCL_WORKER_COUNT"] == "1"
