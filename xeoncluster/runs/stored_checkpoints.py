"""A run's checkpoints as storage holds them: which are durable (their MANIFEST.json, written last, is
there), and one of them back on disk. Read by the agent to resume and by the CLI to list and plan."""
from __future__ import annotations

import json
from pathlib import Path

from xeoncluster.cluster import untrusted
from xeoncluster.storage.base import MANIFEST, Storage


def durable_steps(storage: Storage, run_key: str) -> list[int]:
    """The steps of the run's checkpoints whose manifest is stored, oldest first."""
    found = []
    for item in storage.objects(f"{run_key}/checkpoints"):
        parts = item.key.split("/")
        if parts[-1] == MANIFEST and parts[-2].startswith("checkpoint-") and parts[-2][11:].isdigit():
            found.append(int(parts[-2][11:]))
    return sorted(found)


def download_checkpoint(storage: Storage, run_key: str, step: int, target: Path) -> Path:
    """checkpoint-STEP, as its manifest lists it, into target/checkpoint-STEP. The manifest may be
    another cluster's (a resumed run): each name must be a sound key and stay in the folder."""
    prefix = f"{run_key}/checkpoints/checkpoint-{step}"
    manifest = json.loads(storage.get_text(f"{prefix}/{MANIFEST}") or "{}")
    folder = target / f"checkpoint-{step}"
    source = f"the manifest of {prefix}"
    paths = {name: untrusted.under(folder, untrusted.object_key(name, source)) for name in manifest.get("files", {})}
    for name, path in paths.items():
        storage.get_file(f"{prefix}/{name}", path)
    return folder
