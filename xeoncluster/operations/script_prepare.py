"""What a user's script needs on the nodes before it starts: its workdir (by content digest), its --data
files linked by name into the run's input folder, its requirements.txt installed into the venv once
per content, and, for -m MODULE, proof that the module is there. Bad input is found here, before
anything starts: exit 2 with one line."""
from __future__ import annotations

import hashlib
from pathlib import Path

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.cluster.packages import WHEEL_CACHE, fill_wheelhouse, pip_args
from xeoncluster.core.errors import ConfigError, ProviderError, RemoteError
from xeoncluster.core.stacks import Stack
from xeoncluster.job.script_plan import check_script_request
from xeoncluster.job.train_request import ScriptRequest
from xeoncluster.job.workdir import Workdir
from xeoncluster.providers.base import Node
from xeoncluster.remote.command import HomePath, all_of, remote_command
from xeoncluster.remote.package_sync import sync_data_file, sync_tree
from xeoncluster.remote.shell import NodeShell
from xeoncluster.wire.layout import PACKAGE_ROOT, VENV

FIND_MODULE = ("import importlib.util, sys\n"
               "try:\n    found = importlib.util.find_spec(sys.argv[1]) is not None\n"
               "except ImportError:\n    found = False\n"
               "sys.exit(0 if found else 3)")


def sync_script(ctx: CommandContext, shell: NodeShell, nodes: list[Node], request: ScriptRequest,
                stack: Stack) -> None:
    workdir = check_script_request(request)
    result = sync_tree(shell, nodes, workdir.root, list(workdir.files), workdir.remote)
    ctx.reporter.detail(f"workdir {workdir.root} ({len(workdir.files)} files, {workdir.digest}): "
                        f"sent to {', '.join(result.sent_to) or 'none (unchanged)'}")
    _link_data(shell, nodes, request)
    install_requirements(ctx, shell, nodes, workdir, stack)
    if request.module is not None:
        _check_module(shell, nodes[0], workdir, request.module)


def _link_data(shell: NodeShell, nodes: list[Node], request: ScriptRequest) -> None:
    inputs = HomePath(f"{PACKAGE_ROOT}/inputs/{request.run}")
    links = [remote_command("ln", "-sfn", HomePath(sync_data_file(shell, nodes, path)), inputs / path.name)
             for path in request.data]
    results = shell.run(nodes, all_of(remote_command("mkdir", "-p", inputs), *links))
    failed = [r for r in results.values() if not r.ok]
    if failed:
        raise RemoteError(f"could not place the --data files on {failed[0].node}: {failed[0].last_line()}")


def install_requirements(ctx: CommandContext, shell: NodeShell, nodes: list[Node], workdir: Workdir,
                         stack: Stack) -> None:
    """requirements.txt into the nodes' venv, once per content: a node that has it installed is skipped."""
    requirements = workdir.requirements
    if requirements is None:
        return
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    marker = HomePath(f"{VENV}/.xc-requirements-{digest}")
    checks = shell.run(nodes, f"{all_of(remote_command('test', '-f', marker), 'echo installed')} || true")
    todo = [n for n in nodes if "installed" not in checks[n.name].stdout]
    if not todo:
        return
    install = remote_command(HomePath(f"{VENV}/bin/python"), "-m", "pip", "install", "--quiet",
                             "--disable-pip-version-check", *_pip_sources(ctx, stack, requirements, digest),
                             "-r", HomePath(f"{PACKAGE_ROOT}/{workdir.remote}/requirements.txt"))
    command = all_of(f"{install} 2>&1", remote_command("touch", marker))
    with ctx.reporter.step(f"install requirements.txt on {', '.join(n.name for n in todo)}"):
        results = shell.run(todo, command)
    failed = [r for r in results.values() if not r.ok]
    if failed:
        why = _pip_error(failed[0].stdout)
        raise ConfigError(f"requirements.txt could not be installed on {failed[0].node}: {why}",
                          hint="fix that line, or make the package available from the nodes' package index")


def _pip_sources(ctx: CommandContext, stack: Stack, requirements: Path, digest: str) -> tuple[str, ...]:
    """Where the nodes' pip finds the requirements: their index, or for nodes on this machine (no network
    of their own) a wheelhouse this machine downloads once per content, beside the stack's."""
    stack_args = pip_args(ctx.config, stack, ctx.provider.shares_host, ctx.reporter.detail)
    if not ctx.provider.shares_host:
        return stack_args
    house = WHEEL_CACHE / f"requirements-{digest}"
    if not (house / ".complete").exists():
        try:
            fill_wheelhouse(house, ["-r", str(requirements)])
        except ProviderError as exc:
            why = exc.message.removeprefix("could not fill the local wheelhouse: ")
            raise ConfigError(f"requirements.txt: {why}",
                              hint="fix that line; nodes on this machine install what this machine downloads") from None
    return ("--find-links", str(house), *stack_args)


def _pip_error(output: str) -> str:
    errors = [line.removeprefix("ERROR: ") for line in output.splitlines() if line.startswith("ERROR:")]
    return errors[0] if errors else (output.strip().splitlines() or ["pip failed"])[-1]


def _check_module(shell: NodeShell, master: Node, workdir: Workdir, module: str) -> None:
    command = all_of(remote_command("cd", HomePath(f"{PACKAGE_ROOT}/{workdir.remote}")),
                     remote_command(HomePath(f"{VENV}/bin/python"), "-c", FIND_MODULE, module))
    result = shell.run([master], command)[master.name]
    if result.exit_code == 3:
        raise ConfigError(f"-m {module}: no such module in the workdir {workdir.root} nor in the nodes' venv",
                          hint="run from the folder that holds it, or pass --workdir")
    if not result.ok:
        raise RemoteError(f"could not look for module {module} on {master.name}: {result.last_line()}")
