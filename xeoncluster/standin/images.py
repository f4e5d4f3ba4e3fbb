"""Images as overlay layer chains: the base OS tree, plus one read-only layer per CreateImage
(a copy of the instance's upper layer). An AMI id maps to its chain, topmost layer first."""
from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from xeoncluster.standin.containers import remove_tree


@dataclass
class ImageStore:
    layers_dir: Path
    chains: dict[str, tuple[Path, ...]] = field(default_factory=dict)
    deregistered: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def register(self, ami_id: str, chain: tuple[Path, ...]) -> None:
        with self.lock:
            self.chains[ami_id] = chain

    def chain(self, ami_id: str) -> tuple[Path, ...] | None:
        with self.lock:
            return self.chains.get(ami_id)

    def snapshot(self, ami_id: str, upper: Path, parent: tuple[Path, ...]) -> tuple[Path, ...]:
        """Copy an instance's upper layer into a new layer; the image is `new + parent`."""
        target = self.layers_dir / ami_id
        staging = target.with_name(ami_id + ".tmp")
        staging.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["sync"], check=True)
        # -a keeps overlay whiteouts (0:0 char devices) and opaque-dir xattrs, so deletions made on
        # the instance stay deleted in the image; --reflink shares blocks where the fs can.
        subprocess.run(["cp", "-a", "--reflink=auto", f"{upper}/.", str(staging)], check=True, capture_output=True)
        staging.rename(target)
        chain = (target, *parent)
        self.register(ami_id, chain)
        return chain

    def deregister(self, ami_id: str) -> None:
        # Kept even while the image is still being copied: its layer goes once the copy is done.
        with self.lock:
            self.deregistered.add(ami_id)

    def collect(self, in_use: list[tuple[Path, ...]]) -> list[Path]:
        """Remove the layers of deregistered images that no live instance or image still uses."""
        with self.lock:
            live = [chain for ami, chain in self.chains.items() if ami not in self.deregistered]
            kept = {p for chain in live + in_use for p in chain}
            removed = [self.layers_dir / ami for ami in self.deregistered
                       if (self.layers_dir / ami).exists() and self.layers_dir / ami not in kept]
            for path in removed:
                self.chains.pop(path.name, None)
        for path in removed:
            remove_tree(path)
        return removed
