"""Values that reach a shell or a path stay values: remote commands are built from argv lists (each value
one quoted word, run here under bash as a node's shell would), every validator refuses a trailing
newline, and a workdir's secret-looking files stay on this machine unless named (train and export)."""
from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from xeoncluster.commands.train.train_results import fetch_results
from xeoncluster.core.errors import ConfigError
from xeoncluster.core.stacks import get_stack
from xeoncluster.job.script_plan import check_script_request
from xeoncluster.job.train_plan import check_run_name
from xeoncluster.job.train_request import ScriptRequest, TaskRequest
from xeoncluster.job.workdir import scan
from xeoncluster.kube.job_spec import ExportRequest, check_export
from xeoncluster.providers.aws.spec import check_instance_types, check_region, check_vpc_id
from xeoncluster.providers.base import Node
from xeoncluster.providers.config import AptSettings, ClusterConfig, PipSettings, StorageSettings
from xeoncluster.providers.registry import is_image_id
from xeoncluster.remote.command import HomePath, all_of, remote_command, written_to
from xeoncluster.remote.shell import CommandResult

HOSTILE = ["a$(touch PWNED)b.csv", "x`touch PWNED`", "it's; touch PWNED", "-rf", "a b\nc", "*", "~x", "$HOME"]


def bash(command: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=home, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)


@pytest.mark.parametrize("name", HOSTILE)
def test_a_value_is_one_word_wherever_it_goes(tmp_path: Path, name: str) -> None:
    folder = HomePath("xeoncluster/inputs/r1")
    command = all_of(remote_command("mkdir", "-p", folder), written_to(remote_command("echo", name), folder / name),
                     remote_command("ln", "-sfn", folder / name, folder / "link"),
                     remote_command("cat", folder / "link"))
    done = bash(command, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == name + "\n"
    assert (tmp_path / "xeoncluster/inputs/r1" / name).read_text() == name + "\n"
    assert not list(tmp_path.rglob("PWNED"))


def test_a_home_path_expands_the_home_and_nothing_else(tmp_path: Path) -> None:
    done = bash(remote_command("echo", HomePath("a$(id)/*"), "~/x"), tmp_path)
    assert done.stdout == f"{tmp_path}/a$(id)/* ~/x\n"


class Recording:
    """The seam's commands as run here: a results fetch on a master whose run name is hostile."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.commands: list[str] = []

    def run(self, nodes: list[Node], command: str) -> dict[str, CommandResult]:
        self.commands.append(command)
        done = bash(command, self.home)
        return {nodes[0].name: CommandResult(nodes[0].name, done.returncode, done.stdout, done.stderr)}

    def get(self, node: Node, remote_path: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes((self.home / remote_path).read_bytes())


def test_fetching_results_quotes_the_run_folder(tmp_path: Path) -> None:
    run = "r1; touch PWNED"
    folder = tmp_path / "node" / "xeoncluster" / "runs" / run
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text("{}")
    (folder / "result.txt").write_text("out\n")
    (folder / "env").write_text('{"K": "secret"}')
    shell = Recording(tmp_path / "node")
    master = Node("node0", "i-1", "10.0.0.1", "10.0.0.1", "master", "local", None, None)
    fetched = fetch_results(shell, master, run, tmp_path / "results", None, everything=True)  # type: ignore[arg-type]
    assert (tmp_path / "results" / "result.txt").read_text() == "out\n" and fetched.metrics == {}
    assert not (tmp_path / "results" / "env").exists() and not list(tmp_path.rglob("PWNED"))


def request_field(**fields: Any) -> Callable[[], object]:
    return lambda: check_script_request(ScriptRequest(**fields))


NEWLINE_CASES: list[tuple[str, Callable[[], object]]] = [
    ("run name", lambda: check_run_name("x\n")),
    ("cluster name", lambda: ClusterConfig(name="xc\n")),
    ("storage folder", lambda: StorageSettings(url="/tmp/runs\n")),
    ("storage s3 url", lambda: StorageSettings(url="s3://bucket/prefix\n")),
    ("pip index", lambda: PipSettings(index_url="https://pypi.example/simple\n")),
    ("apt proxy", lambda: AptSettings(proxy="http://proxy.example:3128\n")),
    ("region", lambda: check_region("us-east-1\n")),
    ("instance type", lambda: check_instance_types(["c7i.2xlarge\n"])),
    ("vpc id", lambda: check_vpc_id("vpc-0123456789abcdef0\n")),
    ("module", request_field(module="pkg.train\n")),
]


@pytest.mark.parametrize("check", [c[1] for c in NEWLINE_CASES], ids=[c[0] for c in NEWLINE_CASES])
def test_every_validator_refuses_a_trailing_newline(check: Callable[[], object]) -> None:
    with pytest.raises((ConfigError, ValueError)):
        check()


def test_image_ids_and_kube_names_refuse_a_trailing_newline() -> None:
    assert is_image_id("ami-0123456789abcdef0") and not is_image_id("ami-0123456789abcdef0\n")
    assert is_image_id("local-0123456789ab") and not is_image_id("local-0123456789ab\n")
    good = ExportRequest("trainjob", TaskRequest(task="squad"), 1, "c7i.2xlarge", None, "data")
    check_export(good, get_stack("stock"))
    for bad in (replace(good, pvc="data\n"), replace(good, train=TaskRequest(task="squad", run="job\n"))):
        with pytest.raises(ConfigError):
            check_export(bad, get_stack("stock"))


DRY = ["--dry-run", "--nodes", "2", "--instance-type", "c7i.2xlarge"]


@pytest.mark.parametrize(("args", "runs"), [(["--run", "x\n"], (DRY, [])), (["--name", "xc\n"], (DRY, [])),
                                           (["--storage", "/tmp/runs\n"], (DRY,))])
def test_train_refuses_a_trailing_newline_in_one_line(tmp_path: Path, args: list[str],
                                                      runs: tuple[list[str], ...]) -> None:
    for extra in runs:
        result = run_cli(["train", "squad", "--demo", *args, *extra], tmp_path / "home", cwd=tmp_path)
        errors = [line for line in result.err.splitlines() if line.startswith("error: ")]
        assert result.code == 2 and len(errors) == 1 and errors[0].startswith(f"error: {args[0]}"), result.err
    assert not (tmp_path / "home").exists()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".aws").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    for name in (".env", "deploy.pem", ".aws/credentials", ".netrc", "id_ed25519"):
        (root / name).write_text("secret\n")
    return root


def test_secret_looking_files_are_refused_by_name(project: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        scan(project)
    assert refused.value.message.endswith(
        "look like secrets, which are not sent to the nodes: .aws/, .env, .netrc, deploy.pem, id_ed25519; "
        "send one anyway with --include-secret PATH")
    names = [".env", "deploy.pem", ".aws", ".netrc", "id_ed25519"]
    sent = scan(project, secrets=tuple(names)).files
    assert sorted(p.relative_to(project).as_posix() for p in sent) == [
        ".aws/credentials", ".env", ".netrc", "deploy.pem", "id_ed25519", "train.py"]
    assert scan(project, excludes=tuple(names)).files == (project / "train.py",)


def test_train_refuses_a_workdirs_secrets_in_one_line_and_starts_nothing(project: Path, tmp_path: Path) -> None:
    for other in ("deploy.pem", ".aws/credentials", ".netrc", "id_ed25519"):
        (project / other).unlink()
    script = str(project / "train.py")
    refused = run_cli(["train", script, *DRY], tmp_path / "home", cwd=tmp_path)
    errors = [line for line in refused.err.splitlines() if line.startswith("error: ")]
    assert refused.code == 2 and len(errors) == 1, refused.err
    assert ": .env; send one anyway with --include-secret PATH" in errors[0]
    assert "--exclude NAME, or pass --include-secret .env" in errors[0]
    for extra in (["--include-secret", ".env"], ["--exclude", ".env"]):
        assert run_cli(["train", script, *DRY, *extra], tmp_path / "home", cwd=tmp_path).code == 0
    assert not (tmp_path / "home").exists()


def test_export_refuses_the_same_secrets_for_an_image(project: Path, tmp_path: Path) -> None:
    script = str(project / "train.py")
    refused = run_cli(["export", "trainjob", script, "--nodes", "2", "--instance-type", "c7i.2xlarge"],
                      tmp_path / "home", cwd=tmp_path)
    assert refused.code == 2 and "look like secrets" in refused.err and "--include-secret" in refused.err
    dockerfile = tmp_path / "Dockerfile"
    included = run_cli(["export", "trainjob", script, "--nodes", "2", "--instance-type", "c7i.2xlarge",
                        "--include-secret", ".env", "--exclude", ".aws", "--exclude", "*.pem", "--exclude", ".netrc",
                        "--exclude", "id_*", "--dockerfile", str(dockerfile)], tmp_path / "home", cwd=tmp_path)
    assert included.code == 0, included.err
    copied = dockerfile.read_text()
    assert ".env" in copied and "deploy.pem" not in copied and ".netrc" not in copied
