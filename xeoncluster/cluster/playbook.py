"""Loads xeoncluster/playbooks/*.yaml and runs their steps over SSH on many nodes at once, idempotently.

A step may carry `unless` (a check; the step is skipped where it passes), `when` (a variable;
the step runs only where it is not empty) and `host_os: true`, optionally with `packages`
(package -> check). On nodes that share this machine (local) host_os steps never change the OS:
package checks still run and name what is missing; steps without packages are skipped.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from xeoncluster.core.errors import ConfigError, RemoteError
from xeoncluster.core.paths import project_file
from xeoncluster.providers.base import Node
from xeoncluster.remote.shell import CommandResult, NodeShell

VARIABLE = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


@dataclass(frozen=True)
class Step:
    name: str
    run: str = ""
    unless: str | None = None
    host_os: bool = False
    packages: Mapping[str, str] = field(default_factory=dict)
    when: str | None = None


@dataclass(frozen=True)
class Playbook:
    name: str
    path: Path
    steps: tuple[Step, ...]


def playbook_paths(folder: Path | None = None) -> list[Path]:
    return sorted((folder or project_file("playbooks")).glob("*.yaml"))


def load_playbooks(folder: Path | None = None) -> list[Playbook]:
    return [load_playbook(path) for path in playbook_paths(folder)]


def load_playbook(path: Path) -> Playbook:
    data = yaml.safe_load(path.read_text()) or {}
    try:
        steps = tuple(Step(**step) for step in data["steps"])
        return Playbook(name=data["name"], path=path, steps=steps)
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"playbook {path} is malformed: {exc}") from None


def render(template: str, variables: Mapping[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise ConfigError(f"playbook uses an unknown variable '{name}'")
        return variables[name]

    return VARIABLE.sub(value, template)


class PlaybookRunner:
    def __init__(self, shell: NodeShell, variables: Mapping[str, str], apply_os_steps: bool,
                 log: Callable[[str], None], log_path: Path | None = None) -> None:
        self.shell = shell
        self.variables = dict(variables)
        self.apply_os_steps = apply_os_steps
        self.log = log
        self.log_path = log_path

    def run_all(self, playbooks: list[Playbook], nodes: list[Node], progress: Callable[[str], None]) -> None:
        for book in playbooks:
            for step in book.steps:
                label = render(step.name, self.variables)
                progress(f"{book.name}: {label}")
                self.run_step(book.name, step, nodes)

    def run_step(self, book: str, step: Step, nodes: list[Node]) -> None:
        if step.when is not None and not render(step.when, self.variables).strip():
            self.log(f"{book}/{step.name}: skipped (nothing configured)")
            return
        if step.host_os and step.packages:
            self._host_os_step(book, step, nodes)
            return
        if step.host_os and not self.apply_os_steps:
            self.log(f"{book}/{step.name}: skipped (nodes share this machine's OS)")
            return
        command = render(step.run, self.variables)
        if step.unless:
            command = (f"if {render(step.unless, self.variables)}; then echo 'xeoncluster: already done'; "
                       f"else {command}; fi")
        self._check(book, step.name, self.shell.run(nodes, f"set -e; {command}"))

    def _host_os_step(self, book: str, step: Step, nodes: list[Node]) -> None:
        missing_by_node = self._missing_packages(step, nodes)
        for node in nodes:
            missing = missing_by_node[node.name]
            if not missing:
                continue
            if not self.apply_os_steps:
                raise RemoteError(
                    f"{node.name}: OS package {' '.join(missing)} is missing on this machine "
                    f"(playbook {book}, step '{step.name}')",
                    hint=f"install it on the host: apt-get install -y {' '.join(missing)}", log=self.log_path)
            command = render(step.run, {**self.variables, "missing": " ".join(shlex.quote(m) for m in missing)})
            self._check(book, step.name, self.shell.run([node], f"set -e; {command}"))

    def _missing_packages(self, step: Step, nodes: list[Node]) -> dict[str, list[str]]:
        probe = "; ".join(f"( {check} ) >/dev/null 2>&1 || echo MISSING {shlex.quote(pkg)}"
                          for pkg, check in step.packages.items())
        results = self.shell.run(nodes, probe or "true")
        return {name: [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("MISSING ")]
                for name, result in results.items()}

    def _check(self, book: str, step: str, results: dict[str, CommandResult]) -> None:
        for result in results.values():
            self.log(f"[{result.node}] {book}/{step}: exit {result.exit_code}\n{result.stdout}{result.stderr}")
        failed = [r for r in results.values() if not r.ok]
        if failed:
            first = failed[0]
            raise RemoteError(f"playbook {book}, step '{step}' failed on {first.node} "
                              f"(exit {first.exit_code}): {first.last_line()}", log=self.log_path)
