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
    return stacks[name]
