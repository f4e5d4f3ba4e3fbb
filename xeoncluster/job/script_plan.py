"""`train PATH.py` and `train -m MODULE`: a user's own script, launched the way the built-in tasks are.

Every rank runs `python -m xeoncluster.node.user_script`, which sets the torch.distributed environment from
MPI's, hooks the HF Trainer (a notice checkpoints and stops; a resumed run gets the newest
checkpoint), turns SIGTERM into the stop file scripts can poll, and then runs the script unchanged.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from xeoncluster.core.errors import ConfigError
from xeoncluster.job.train_request import SCRIPT_TASK
from xeoncluster.job.workdir import Workdir, scan
from xeoncluster.node.rank_env import XC_DATA_DIR, XC_OUTPUT_DIR, XC_RUN, XC_WORKDIR
from xeoncluster.wire.layout import PACKAGE_ROOT, RemoteLayout

if TYPE_CHECKING:
    from xeoncluster.job.train_request import ScriptRequest

SCRIPT_LABELS = ("script:", "module:")  # how a script's runs are recorded (RunRecord.task)
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
OUTPUT = "{output}"  # in ARGS: the run's output folder on every node (XC_OUTPUT_DIR)
DATA = "{data}"      # in ARGS: the folder holding the --data files on every node (XC_DATA_DIR)


def run_prefix(request: ScriptRequest) -> str:
    name = request.module or Path(str(request.script)).stem
    return re.sub(r"[^A-Za-z0-9._-]", "-", name).strip(".-_")[:40] or SCRIPT_TASK


def workdir_of(request: ScriptRequest) -> Path:
    if request.workdir is not None:
        return request.workdir
    return request.script.parent if request.script is not None else Path(".")


def check_script_request(request: ScriptRequest) -> Workdir:
    """The script or module, its folder and its data: one error for the first thing wrong."""
    if (request.script is None) == (request.module is None):
        raise ConfigError("give a script PATH.py or -m MODULE, not both", hint="e.g. xeoncluster train train.py")
    if request.module is not None and not MODULE_NAME.fullmatch(request.module):
        raise ConfigError(f"-m {request.module!r} is not a module name", hint="e.g. -m mypackage.train")
    workdir = workdir_of(request).resolve()
    if request.script is not None:
        _check_script(request.script, workdir)
    for path in request.data:
        if not path.is_file():
            raise ConfigError(f"--data {path}: no such file", hint="pass an existing file; it is copied to every node")
    names = [p.name for p in request.data]
    if len(set(names)) != len(names):
        raise ConfigError("--data names two files of the same name; they would land in one place on the nodes")
    return scan(workdir, request.excludes, request.include_secrets)


def _check_script(script: Path, workdir: Path) -> None:
    if not script.is_file():
        raise ConfigError(f"script {script} does not exist", hint="pass the path of your training script")
    if script.suffix != ".py":
        raise ConfigError(f"script {script} is not a Python file (.py)", hint="or run a module with -m MODULE")
    if workdir not in script.resolve().parents:
        raise ConfigError(f"script {script} is not inside --workdir {workdir}",
                          hint="the workdir is what goes to the nodes: pass the folder that holds the script")


def script_args(request: ScriptRequest, home: str, run: str, workdir: Workdir) -> list[str]:
    """The argv each rank runs: the wrapper, then the user's ARGS with {output} and {data} filled in."""
    layout = RemoteLayout(home)
    args = [layout.python, "-m", "xeoncluster.node.user_script", "--output-dir", layout.run_dir(run),
            "--workdir", layout.path(f"{PACKAGE_ROOT}/{workdir.remote}")]
    if request.module:
        args += ["--module", request.module]
    else:
        args += ["--script", str(Path(str(request.script)).resolve().relative_to(workdir.root))]
    if request.resume:
        args.append("--resume")
    return [*args, "--", *filled_args(request.trainer_args, layout.run_dir(run), data_dir(home, run))]


def filled_args(args: tuple[str, ...], output: str, data: str) -> list[str]:
    """The script's ARGS with {output} and {data} replaced by where those are for its ranks."""
    return [arg.replace(OUTPUT, output).replace(DATA, data) for arg in args]


def data_dir(home: str, run: str) -> str:
    """The --data files of a run, by name (links to their content-addressed copies)."""
    return RemoteLayout(home).path(f"{PACKAGE_ROOT}/inputs/{run}")


def script_env(home: str, run: str, workdir: Workdir) -> dict[str, str]:
    layout = RemoteLayout(home)
    return {XC_OUTPUT_DIR: layout.run_dir(run), XC_DATA_DIR: data_dir(home, run), XC_RUN: run,
            XC_WORKDIR: layout.path(f"{PACKAGE_ROOT}/{workdir.remote}"),
            # accelerate on CPU-only nodes: without it, each rank would be a world of one.
            "ACCELERATE_USE_CPU": "1"}


def as_synced(request: ScriptRequest, home: str) -> ScriptRequest:
    """The request as the master's agent sees it: the script inside the workdir's copy on the master
    (which scans to the same digest: same files, same places)."""
    workdir = check_script_request(request)
    copy = Path(RemoteLayout(home).path(f"{PACKAGE_ROOT}/{workdir.remote}"))
    script = copy / Path(str(request.script)).resolve().relative_to(workdir.root) if request.script else None
    return replace(request, workdir=copy, script=script)


def resume_args(request: ScriptRequest) -> list[str]:
    """The script part of the `train ... --resume` line."""
    args = ["-m", request.module] if request.module else [str(request.script)]
    if request.workdir is not None:
        args += ["--workdir", str(request.workdir)]
    for path in request.data:
        args += ["--data", str(path)]
    for pattern in request.excludes:
        args += ["--exclude", pattern]
    for pattern in request.include_secrets:
        args += ["--include-secret", pattern]
    return args


def signal_pattern(home: str, run: str) -> str:
    """What `pkill -f` matches on every node: this run's ranks, and nothing else."""
    return f"-m xeoncluster.node.user_script --output-dir {RemoteLayout(home).run_dir(run)}( |$)"


def quoted_signal(home: str, run: str, signal: str = "TERM") -> str:
    return f"pkill -{signal} -f -- {shlex.quote(signal_pattern(home, run))} || true"
