"""Map the launcher's rank variables (Intel MPI, MPICH, Open MPI, torchrun) to torch.distributed."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

DEFAULT_MASTER_PORT = "29500"

# Checked in order; the first family whose rank variable is present wins.
_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def from_env(env: Mapping[str, str]) -> DistInfo:
    """Rank layout from launcher variables; no variables at all means a single process."""
    for rank_var, size_var, local_rank_var, local_size_var in _FAMILIES:
        if rank_var not in env:
            continue
        rank = int(env[rank_var])
        world_size = int(env.get(size_var, "1"))
        local_rank = int(env.get(local_rank_var, rank))
        # Without a local size, assume one node holds every rank (what a single-node launch does).
        local_world_size = int(env.get(local_size_var, world_size))
        return DistInfo(rank, world_size, local_rank, local_world_size)
    return DistInfo()


def export_env(info: DistInfo, env: MutableMapping[str, str] | None = None) -> None:
    """Export the torch.distributed variables so accelerate and the Trainer see one layout."""
    target = os.environ if env is None else env
    target["RANK"] = str(info.rank)
    target["WORLD_SIZE"] = str(info.world_size)
    target["LOCAL_RANK"] = str(info.local_rank)
    target["LOCAL_WORLD_SIZE"] = str(info.local_world_size)
    if info.is_distributed:
        target.setdefault("MASTER_PORT", DEFAULT_MASTER_PORT)


def missing_master_addr(info: DistInfo, env: Mapping[str, str]) -> bool:
    """The launcher must set MASTER_ADDR (the master's private IP) for multi-rank runs."""
    return info.is_distributed and not env.get("MASTER_ADDR")


def destroy_process_group() -> None:
    """Tear down the group; without it MPI reports BAD TERMINATION at exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def own_address() -> str:
    """This node's address towards the master: the agent knows nodes by their private address."""
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((master, 9))  # UDP: no packet is sent, the kernel only picks the route
            return str(probe.getsockname()[0])
        except OSError:
            return socket.gethostname()
