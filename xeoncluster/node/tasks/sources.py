"""Where a run's data and model come from, and turning "not available" into one clear line."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from xeoncluster.node.startup.errors import TrainingError

T = TypeVar("T")


@dataclass(frozen=True)
class DataSource:
    """Either a hub dataset (name, config) or local files; local files win when given."""

    dataset: str | None = None
    dataset_config: str | None = None
    train_file: Path | None = None
    eval_file: Path | None = None

    @property
    def is_local(self) -> bool:
        return self.train_file is not None or self.eval_file is not None

    def fingerprint(self) -> str:
        """Identifies the data for the features cache: file contents, or the hub name."""
        digest = hashlib.sha256()
        if self.is_local:
            for path in (self.train_file, self.eval_file):
                digest.update(b"|")
                if path is not None:
                    digest.update(Path(path).read_bytes())
        else:
            digest.update(f"{self.dataset}|{self.dataset_config}".encode())
        return digest.hexdigest()


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def check_local_files(source: DataSource) -> None:
    for path in (source.train_file, source.eval_file):
        if path is not None and not Path(path).is_file():
            raise TrainingError(f"data file '{path}' does not exist")


def load_from_hub(what: str, name: str, loader: Callable[[], T]) -> T:
    """Run `loader`; any failure becomes one line naming the missing model or dataset."""
    try:
        return loader()
    except Exception as exc:  # hub/IO errors come in many types
        if offline():
            raise TrainingError(
                f"{what} '{name}' is not available offline (HF_HUB_OFFLINE=1); "
                f"pass a local {'directory with --model' if what == 'model' else 'file with --train-file'}"
            ) from exc
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TrainingError(f"{what} '{name}' could not be loaded: {first_line}") from exc


def resolve_model(model: str) -> str:
    """Check that a model (hub id or local directory) can be loaded, before anything runs."""
    from transformers import AutoConfig

    if Path(model).is_dir():
        if not (Path(model) / "config.json").is_file():
            raise TrainingError(f"model directory '{model}' has no config.json")
        return model
    load_from_hub("model", model, lambda: AutoConfig.from_pretrained(model))
    return model
