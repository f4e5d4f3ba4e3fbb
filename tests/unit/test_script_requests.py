"""`train PATH.py` / `train -m MODULE` below the cluster: what of the workdir travels, what is refused
(one line, exit 2, nothing created), and the launch line every rank runs."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from xeoncluster.cli.train_command import request_of
from xeoncluster.core.errors import ConfigError
from xeoncluster.job.script_plan import check_script_request, script_args
from xeoncluster.job.train_request import SCRIPT_TASK, ScriptRequest, TaskRequest
from xeoncluster.job.workdir import MAX_FILE_BYTES, SYNC_MARKER, scan


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "requirements.txt").write_text("tomli-w==1.2.0\n")
    return root


def script(project: Path, **fields: object) -> ScriptRequest:
    return ScriptRequest(**{"script": project / "train.py", **fields})  # type: ignore[arg-type]


def test_the_workdir_travels_by_content(project: Path) -> None:
    first = scan(project)
    assert [p.relative_to(project).as_posix() for p in first.files] == ["pkg/__init__.py", "requirements.txt",
                                                                        "train.py"]
    assert first.requirements == project / "requirements.txt" and first.remote == f"work/{first.digest}"
    (project / SYNC_MARKER).write_text("what the sync leaves in the nodes' copy")
    assert scan(project).digest == first.digest
    (project / "train.py").write_text("print('changed')\n")
    assert scan(project).digest != first.digest


@pytest.mark.parametrize("junk, named, flag", [(".git/HEAD", ".git/", "--exclude .git"),
                                               ("pkg/__pycache__/x.cpython-311.pyc", "pkg/__pycache__/",
                                                "--exclude __pycache__"),
                                               ("old.pyc", "old.pyc", "--exclude '*.pyc'")])
def test_version_control_and_caches_are_refused_by_name(project: Path, junk: str, named: str, flag: str) -> None:
    (project / junk).parent.mkdir(parents=True, exist_ok=True)
    (project / junk).write_text("x")
    with pytest.raises(ConfigError) as refused:
        scan(project)
    assert named in refused.value.message and flag in str(refused.value.hint)
    pattern = flag.removeprefix("--exclude ").strip("'")
    assert (project / junk).resolve() not in scan(project, (pattern,)).files


def test_large_files_are_refused_and_pointed_at_data(project: Path) -> None:
    with open(project / "weights.bin", "wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(ConfigError, match=r"over 10 MiB: weights.bin \(10 MiB\)") as refused:
        scan(project)
    assert "--data" in str(refused.value.hint)
    assert project / "weights.bin" not in scan(project, ("*.bin",)).files


@pytest.mark.parametrize("fields, message", [
    ({"script": Path("nosuch.py")}, "does not exist"),
    ({"script": Path("requirements.txt")}, "not a Python file"),
    ({"module": "pkg"}, "not both"),
    ({"script": None}, "give a script PATH.py or -m MODULE"),
    ({"script": None, "module": "pkg/train"}, "not a module name"),
    ({"data": (Path("nosuch.csv"),)}, "--data nosuch.csv: no such file"),
])
def test_bad_script_requests_are_one_error(project: Path, fields: dict[str, object], message: str) -> None:
    fixed = {k: (project / v if isinstance(v, Path) and k == "script" else v) for k, v in fields.items()}
    with pytest.raises(ConfigError) as refused:
        check_script_request(script(project, **fixed))
    assert message in refused.value.message


TASK_OPTIONS = {"glue_task": "mrpc", "dataset": None, "train_file": None, "eval_file": None, "model": None,
                "demo": False}
SCRIPT_OPTIONS = {"workdir": None, "data": (), "excludes": (), "include_secrets": ()}


def test_each_kind_takes_its_own_options_and_the_other_kind_s_are_refused(project: Path) -> None:
    task = request_of("glue", None, None, {"run": "r1"}, TASK_OPTIONS | {"glue_task": "rte"}, SCRIPT_OPTIONS)
    assert task == TaskRequest(task="glue", glue_task="rte", run="r1") and task.label == "glue"
    module = request_of(SCRIPT_TASK, None, "pkg.train", {"ppn": 2}, TASK_OPTIONS, SCRIPT_OPTIONS | {"workdir": project})
    assert module == ScriptRequest(module="pkg.train", workdir=project, ppn=2) and module.label == "module:pkg.train"
    with pytest.raises(ConfigError) as refused:
        request_of(SCRIPT_TASK, project / "train.py", None, {}, TASK_OPTIONS | {"demo": True, "model": "bert"},
                   SCRIPT_OPTIONS)
    assert refused.value.message.startswith("--demo, --model belong(s) to the built-in tasks")
    with pytest.raises(ConfigError) as refused:
        request_of("squad", None, None, {}, TASK_OPTIONS, SCRIPT_OPTIONS | {"data": (project,), "excludes": (".git",)})
    assert refused.value.message.startswith("--data, --exclude belong(s) to scripts; the built-in task squad")


def test_a_script_outside_the_workdir_is_refused(project: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match="is not inside --workdir"):
        check_script_request(script(project, workdir=other))


def test_two_data_files_of_one_name_are_refused(project: Path, tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "train.csv").write_text("x\n")
    with pytest.raises(ConfigError, match="two files of the same name"):
        check_script_request(script(project, data=(tmp_path / "a" / "train.csv", tmp_path / "b" / "train.csv")))


def test_every_rank_runs_the_wrapper_with_placeholders_filled(project: Path) -> None:
    request = script(project, trainer_args=("--out", "{output}/model", "--data", "{data}/train.csv"), resume=True)
    workdir = check_script_request(request)
    argv = script_args(request, "/home/ubuntu", "r1", workdir)
    assert argv == ["/home/ubuntu/venv/bin/python", "-m", "xeoncluster.node.user_script",
                    "--output-dir", "/home/ubuntu/xeoncluster/runs/r1",
                    "--workdir", f"/home/ubuntu/xeoncluster/work/{workdir.digest}", "--script", "train.py", "--resume",
                    "--", "--out", "/home/ubuntu/xeoncluster/runs/r1/model",
                    "--data", "/home/ubuntu/xeoncluster/inputs/r1/train.csv"]
    module = script(project, script=None, module="pkg.train", workdir=project)
    assert script_args(module, "/root", "r2", check_script_request(module))[7:9] == ["--module", "pkg.train"]


def test_dry_run_of_a_script_prints_the_launch_and_creates_nothing(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = run_cli(["train", str(project / "train.py"), "--dry-run", "--nodes", "2", "--instance-type",
                      "c7i.2xlarge", "--", "--steps", "10"], home, cwd=tmp_path)
    assert result.code == 0, result.err
    assert "-n 2 -ppn 1" in result.out and "-m xeoncluster.node.user_script" in result.out
    assert "--script train.py -- --steps 10" in result.out and "export ACCELERATE_USE_CPU=1" in result.out
    assert not home.exists()


@pytest.mark.parametrize("args, message", [
    (["nosuch.py"], "error: script nosuch.py does not exist"),
    (["proj/train.py", "-m", "pkg"], "not both"),
    ([], "missing TASK"),
    (["proj/train.py", "--demo"], "--demo belong(s) to the built-in tasks"),
])
def test_bad_script_arguments_exit_2_in_one_line(project: Path, tmp_path: Path, args: list[str],
                                                 message: str) -> None:
    home = tmp_path / "home"
    result = run_cli(["train", *args, "--dry-run", "--nodes", "2", "--instance-type", "c7i.2xlarge"], home,
                     cwd=tmp_path)
    assert result.code == 2, result.out + result.err
    # click's usage errors come with the usage line above, as every command's do
    errors = [line for line in result.err.splitlines() if line.lower().startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.err
    assert not home.exists()
