"""The pinned software stacks in ami/stacks.yaml."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import ConfigError
from .resources import project_file


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    python: str
    backend: str
    ipex: bool
    packages: tuple[str, ...]
    index_urls: tuple[str, ...]

    def pin(self, package: str) -> str | None:
        prefix = package.lower() + "=="
        return next((p.split("==", 1)[1] for p in self.packages if p.lower().startswith(prefix)), None)


def check_stack(stack: Stack) -> None:
    """Combinations that cannot work are refused before anything is created or run."""
    torch = stack.pin("torch")
    if stack.ipex:
        ipex = stack.pin("intel-extension-for-pytorch")
        if ipex is None:
            raise ConfigError(f"stack {stack.name}: ipex is on but intel-extension-for-pytorch is not pinned")
        if torch is None or _minor(torch) != _minor(ipex):
            raise ConfigError(f"stack {stack.name}: IPEX {ipex} needs torch {_minor(ipex)}.x, but torch is pinned "
                              f"to {torch}", hint="pin matching torch and IPEX versions in ami/stacks.yaml")
    if stack.backend == "ccl":
        ccl = stack.pin("oneccl_bind_pt")
        if ccl is None:
            raise ConfigError(f"stack {stack.name}: the ccl backend needs oneccl_bind_pt pinned")
        if torch is None or _minor(torch) != _minor(ccl):
            raise ConfigError(f"stack {stack.name}: oneccl_bind_pt {ccl} needs torch {_minor(ccl)}.x, "
                              f"but torch is pinned to {torch}")
    elif stack.backend != "gloo":
        raise ConfigError(f"stack {stack.name}: unknown backend '{stack.backend}' (gloo or ccl)")
    transformers = stack.pin("transformers")
    if stack.backend == "ccl" and transformers and int(transformers.split(".")[0]) >= 5 and transformers != "5.0.0":
        raise ConfigError(f"stack {stack.name}: transformers {transformers} no longer accepts ddp_backend=ccl "
                          "(last in 5.0.0)", hint="pin transformers<=5.0.0 (the intel stack uses 4.52.4)")


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


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
