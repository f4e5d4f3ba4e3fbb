"""Tokenize once per node: local rank 0 builds the features into a cache, the other ranks load them."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from xeoncluster.node.startup.run_config import DEFAULT_CACHE_ROOT

_DONE = "features.done"


def tokenizer_fingerprint(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(f"{type(tokenizer).__name__}|{text}".encode()).hexdigest()


def cache_path(root: Path | None, data_fingerprint: str, tokenizer_hash: str, parts: dict[str, Any]) -> Path:
    key = json.dumps(
        {"data": data_fingerprint, "tokenizer": tokenizer_hash, **parts}, sort_keys=True, default=str
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return (root or DEFAULT_CACHE_ROOT).expanduser() / digest


def _save_atomically(features: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    try:
        features.save_to_disk(str(staging))
        (staging / _DONE).write_text("ok\n")
        try:
            os.rename(staging, path)
        except OSError:
            # Another node sharing this cache directory finished first; its copy is identical.
            if not (path / _DONE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_or_build(
    path: Path, build: Callable[[], Any], main_process_first: Any, log: Callable[[str], None]
) -> Any:
    """`main_process_first` is TrainingArguments.main_process_first(local=True): local rank 0 runs
    the body first while the other local ranks wait at a barrier, then find the cache ready."""
    import datasets

    with main_process_first:
        if (path / _DONE).is_file():
            log(f"features loaded from cache {path}")
            return datasets.load_from_disk(str(path))
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)  # an interrupted build
        features = build()
        _save_atomically(features, path)
        log(f"features tokenized into cache {path}")
        return datasets.load_from_disk(str(path))
