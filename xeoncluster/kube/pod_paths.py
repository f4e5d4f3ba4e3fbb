"""Where a job's files live: the PVC for everything that must outlive a pod, the image for the code."""
from __future__ import annotations

from dataclasses import dataclass

from xeoncluster.node.rank_env import XC_NODE_INDEX

MOUNT = "/data"
PACKAGE_ROOT = "/opt/xeoncluster"  # the Dockerfile copies xeoncluster/node/ here; PYTHONPATH names it
NODE_INDEX = XC_NODE_INDEX  # set per pod from the operator's index label or annotation (pod.py)


@dataclass(frozen=True)
class DataPaths:
    """Paths on the PVC, mounted at `mount` in every pod; shared by every node of the job."""

    run: str
    mount: str = MOUNT

    @property
    def demo(self) -> str:
        return f"{self.mount}/demo"

    @property
    def run_dir(self) -> str:
        return f"{self.mount}/runs/{self.run}"

    @property
    def output_dir(self) -> str:
        # One folder per node: the Trainer saves a checkpoint on each node (save_on_each_node) and
        # rotates old ones itself, which nodes sharing one folder would do over each other's files.
        # Kubernetes expands $(VAR) in a container's command from its env.
        return f"{self.run_dir}/node-$({NODE_INDEX})"

    @property
    def features_cache(self) -> str:
        return f"{self.mount}/cache/features"

    @property
    def hf_home(self) -> str:
        return f"{self.mount}/hf-home"
