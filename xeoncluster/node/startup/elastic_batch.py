"""The same global batch on however many ranks the run has now.

A run that lost a node and trains on with fewer (or grows back) keeps the global batch it was started
with: per-rank batch x gradient accumulation x world size. XC_BATCH_WORLD names the world the run's
batch was set for. Where the new world divides that batch, the per-rank batch stays as large as it was
allowed to be (memory) and the accumulation makes up the rest; where it does not, the nearest global
batch is taken, and said."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xeoncluster.node.rank_env import XC_BATCH_WORLD


@dataclass(frozen=True)
class BatchShape:
    per_rank: int
    accumulation: int

    def global_batch(self, world: int) -> int:
        return self.per_rank * self.accumulation * world


def batch_world(env: Mapping[str, str]) -> int | None:
    """The world the batch was set for, when the launcher said one (a positive integer)."""
    raw = env.get(XC_BATCH_WORLD, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def reshape(given: BatchShape, set_for: int, world: int) -> tuple[BatchShape, str]:
    """The shape on `world` ranks keeping `given`'s global batch on `set_for` ranks, and the one line that
    says what changed ("" when nothing did)."""
    if world == set_for:
        return given, ""
    target = given.global_batch(set_for)
    share, rest = divmod(target, world)
    if rest == 0:
        per_rank = max(b for b in range(1, given.per_rank + 1) if share % b == 0)
        shape = BatchShape(per_rank, share // per_rank)
        return shape, (f"global batch {target} kept on {world} ranks (set for {set_for}): {shape.per_rank} per rank "
                       f"x {shape.accumulation} accumulation steps")
    accumulation = max(1, round(target / (world * given.per_rank)))
    shape = BatchShape(given.per_rank, accumulation)
    return shape, (f"global batch {shape.global_batch(world)} on {world} ranks instead of {target} (set for "
                   f"{set_for}; {target} does not divide by {world}): {shape.per_rank} per rank x "
                   f"{shape.accumulation} accumulation steps")


def elastic_settings(settings: Mapping[str, object], env: Mapping[str, str]) -> tuple[dict[str, int], str]:
    """The TrainingArguments batch fields for this launch's world (WORLD_SIZE, 1 when unset), and the line."""
    set_for = batch_world(env)
    if set_for is None:
        return {}, ""
    world = int(env.get("WORLD_SIZE", "1") or 1)
    given = BatchShape(int(str(settings["per_device_train_batch_size"])),
                       int(str(settings.get("gradient_accumulation_steps", 1))))
    shape, line = reshape(given, set_for, world)
    return {"per_device_train_batch_size": shape.per_rank, "gradient_accumulation_steps": shape.accumulation}, line
