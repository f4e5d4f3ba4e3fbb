"""A plain torch.distributed script: DDP over gloo, no Trainer, no accelerate.

    xeoncluster train examples/ddp_plain.py -- --steps 200

It reads the environment every rank gets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT),
polls $XC_STOP_FILE to stop cleanly, keeps its checkpoint in $XC_OUTPUT_DIR and picks it up again
when the run is resumed ($XC_RESUME). Offline: the data is made up on the spot.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def make_batch(step: int, rank: int, size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(size, 8, generator=generator)
    return x, x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.5


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=50)
    args = parser.parse_args()
    dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    output = Path(os.environ.get("XC_OUTPUT_DIR", "output"))
    checkpoint = output / "plain-checkpoint.pt"
    model = nn.Linear(8, 1)
    start = torch.zeros(1, dtype=torch.int64)
    if os.environ.get("XC_RESUME") and rank == 0 and checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        start[0] = saved["step"]
    dist.broadcast(start, src=0)
    ddp = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights to every rank
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    stop_file = Path(os.environ.get("XC_STOP_FILE", output / "stop-request"))
    step = int(start.item())
    while step < args.steps:
        x, y = make_batch(step, rank)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        stopping = torch.tensor([int(stop_file.exists())])
        dist.all_reduce(stopping, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        if rank == 0 and (step % args.save_every == 0 or stopping.item()):
            torch.save({"model": model.state_dict(), "step": step}, checkpoint)
        if stopping.item():
            print(f"stopping at step {step}", flush=True)
            break
        if rank == 0 and step % 20 == 0:
            print(f"step {step}/{args.steps} loss {loss.item():.4f}", flush=True)
    if rank == 0 and step >= args.steps:
        (output / "result.json").write_text(json.dumps({"world_size": world, "steps": step,
                                                        "loss": loss.item(), "resumed_from": int(start.item())}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
