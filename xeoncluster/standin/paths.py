"""Where the stand-in keeps its state (run dir), instance disks and image layers (lib dir) and
its caches (base OS tree, apt repo, wheelhouse)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    run: Path = Path("/run/xeoncluster-standin")
    lib: Path = Path("/var/lib/xeoncluster-standin")
    cache: Path = Path("/var/cache/xeoncluster-standin")
    netns: str = "xcstandin"
    bridge: str = "xcbr0"

    @classmethod
    def from_env(cls) -> Paths:
        # Overridable so that a second stand-in (or a test) does not share the default dirs.
        env = os.environ.get
        return cls(Path(env("XC_STANDIN_RUN", str(cls.run))), Path(env("XC_STANDIN_LIB", str(cls.lib))),
                   Path(env("XC_STANDIN_CACHE", str(cls.cache))), env("XC_STANDIN_NETNS", cls.netns),
                   env("XC_STANDIN_BRIDGE", cls.bridge))

    def env(self) -> dict[str, str]:
        """The variables that make a child process see these same paths."""
        return {"XC_STANDIN_RUN": str(self.run), "XC_STANDIN_LIB": str(self.lib), "XC_STANDIN_CACHE": str(self.cache),
                "XC_STANDIN_NETNS": self.netns, "XC_STANDIN_BRIDGE": self.bridge}

    @property
    def state_file(self) -> Path:
        return self.run / "state.json"

    @property
    def faults_file(self) -> Path:
        return self.run / "faults.json"

    @property
    def daemon_log(self) -> Path:
        return self.run / "daemon.log"

    @property
    def config_file(self) -> Path:
        return self.run / "cluster.yaml"

    @property
    def instances(self) -> Path:
        return self.lib / "instances"

    @property
    def layers(self) -> Path:
        return self.lib / "layers"
