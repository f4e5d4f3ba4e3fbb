"""The cluster.yaml that points the CLI at the stand-in (`config` prints its path)."""
from __future__ import annotations

from pathlib import Path

import yaml


def cluster_config(gateway: str, mirror_url: str) -> dict:
    return {
        "provider": "aws",
        "aws": {"region": "us-east-1", "instance_types": ["c7i.2xlarge"], "root_volume_gib": 20},
        # The CLI runs inside the stand-in's namespace: nodes see it as the bridge's address.
        "ssh": {"cidr": f"{gateway}/32", "timeout": 300},
        "apt": {"sources": [f"deb [trusted=yes] {mirror_url} ./"], "proxy": None},
        "pip": {"index_url": f"{mirror_url}simple/", "extra_index_urls": []},
    }


def write_config(path: Path, gateway: str, mirror_url: str) -> Path:
    header = ("# Made by scripts/aws-standin.sh for the EC2 stand-in (moto + nspawn containers).\n"
              "# Use it through `scripts/aws-standin.sh run -- xeoncluster --config THIS ...`.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(cluster_config(gateway, mirror_url), sort_keys=False))
    return path
