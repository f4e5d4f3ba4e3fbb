"""An accelerate script: one Accelerator, a prepared model, optimizer and data loader.

    xeoncluster train examples/accelerate_loop.py -- --steps 100

accelerate sees one process per rank of the job (num_processes == WORLD_SIZE): xeoncluster sets
ACCELERATE_USE_CPU=1, without which accelerate on CPU-only nodes would run a world of one per rank.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    accelerator = Accelerator()
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 8, generator=generator)
    y = (x.sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    step = 0
    while step < args.steps:
        for batch_x, batch_y in loader:
            loss = nn.functional.cross_entropy(model(batch_x), batch_y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step >= args.steps:
                break
    accelerator.print(f"num_processes {accelerator.num_processes}, loss {loss.item():.4f}")
    if accelerator.is_main_process:
        output = Path(os.environ.get("XC_OUTPUT_DIR", "output"))
        (output / "result.json").write_text(json.dumps({
            "num_processes": accelerator.num_processes, "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "steps": step, "loss": loss.item(), "distributed_type": str(accelerator.distributed_type)}))
    accelerator.end_training()


if __name__ == "__main__":
    main()
