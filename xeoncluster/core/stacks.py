"""The pinned software stacks in xeoncluster/ami/stacks.yaml."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from xeoncluster.core.errors import ConfigError
from xeoncluster.core.paths import project_file
from xeoncluster.node import stack_rules


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    python: str
    backend: str
    ipex: bool
    packages: tuple[str, ...]
    index_urls: tuple[str, ...]

    @property
    def python_min(self) -> tuple[int, int]:
        major, minor = re.fullmatch(r">=\s*(\d+)\.(\d+)", self.python).groups()  # type: ignore[union-attr]  # check_stack refuses any other form
        return int(major), int(minor)

    def pin(self, package: str) -> str | None:
        prefix = package.lower() + "=="
        return next((p.split("==", 1)[1] for p in self.packages if p.lower().startswith(prefix)), None)


def check_stack(stack: Stack) -> None:
    """Combinations that cannot work are refused before anything is created or run."""
    if not re.fullmatch(r">=\s*\d+\.\d+", stack.python):
        raise ConfigError(f"stack {stack.name}: python must be a minimum such as '>=3.11' (got {stack.python!r})")
    torch = stack.pin("torch")
    if stack.ipex:
        _check_built_for_torch(stack, "intel-extension-for-pytorch", "IPEX", torch)
    if stack.backend == "ccl":
        _check_built_for_torch(stack, "oneccl_bind_pt", "oneccl_bind_pt", torch)
    elif stack.backend not in stack_rules.BACKENDS:
        raise ConfigError(f"stack {stack.name}: unknown backend '{stack.backend}' (gloo or ccl)")
    transformers = stack.pin("transformers")
    if stack.backend == "ccl" and transformers and not stack_rules.accepts_ccl(transformers):
        raise ConfigError(f"stack {stack.name}: transformers {transformers} no longer accepts ddp_backend=ccl "
                          "(last in 5.0.0)", hint="pin transformers<=5.0.0 (the intel stack uses 4.52.4)")


def _check_built_for_torch(stack: Stack, package: str, label: str, torch: str | None) -> None:
    version = stack.pin(package)
    if version is None:
        why = "ipex is on" if package.startswith("intel") else "the ccl backend needs it"
        raise ConfigError(f"stack {stack.name}: {package} is not pinned ({why})")
    if not stack_rules.built_for_torch(version, torch):
        raise ConfigError(f"stack {stack.name}: {label} {version} needs torch {stack_rules.minor(version)}.x, but "
                          f"torch is pinned to {torch}", hint="pin matching versions in xeoncluster/ami/stacks.yaml")


def load_stacks(path: Path | None = None) -> dict[str, Stack]:
    data = yaml.safe_load((path or project_file("ami", "stacks.yaml")).read_text())
    return {
        name: Stack(name=name, description=" ".join(str(spec.get("description", "")).split()),
                    python=str(spec["python"]), backend=spec["backend"], ipex=bool(spec.get("ipex", False)),
                    packages=tuple(spec["packages"]), index_urls=tuple(spec.get("index_urls", [])))
        for name, spec in data.items()
    }


def get_stack(name: str) -> Stack:
    stacks = load_stacks()
    if name not in stacks:
        raise ConfigError(f"stack: unknown stack '{name}'; known stacks: {', '.join(sorted(stacks))}")
    check_stack(stacks[name])
    return stacks[name]
