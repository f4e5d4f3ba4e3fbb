"""Build the offline demo: a tiny BERT, its WordPiece tokenizer and synthetic SQuAD/MRPC data."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xeoncluster.node.tasks.demo_corpus import build_world, make_squad_record, paraphrase_pair

ASSETS_VERSION = 1
MANIFEST = "demo.json"
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
MRPC_HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
_WORD = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class DemoSizes:
    entities: int = 60
    squad_train: int = 3000
    squad_eval: int = 300
    unanswerable_share: float = 0.1
    mrpc_train: int = 8000
    mrpc_dev: int = 400


@dataclass(frozen=True)
class TinyBert:
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    intermediate_size: int = 256
    max_position_embeddings: int = 256
    dropout: float = 0.1


@dataclass(frozen=True)
class DemoLayout:
    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def squad_train(self) -> Path:
        return self.root / "squad" / "train.json"

    @property
    def squad_eval(self) -> Path:
        return self.root / "squad" / "eval.json"

    @property
    def mrpc_train(self) -> Path:
        return self.root / "glue" / "mrpc-train.tsv"

    @property
    def mrpc_dev(self) -> Path:
        return self.root / "glue" / "mrpc-dev.tsv"

    def files(self) -> tuple[Path, ...]:
        return (
            self.model / "config.json",
            self.model / "tokenizer.json",
            self.squad_train,
            self.squad_eval,
            self.mrpc_train,
            self.mrpc_dev,
        )


def _manifest(seed: int) -> dict[str, Any]:
    return {
        "version": ASSETS_VERSION,
        "seed": seed,
        "sizes": asdict(DemoSizes()),
        "model": asdict(TinyBert()),
    }


def is_complete(root: Path, seed: int) -> bool:
    layout = DemoLayout(root)
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest == _manifest(seed) and all(p.is_file() for p in layout.files())


def _squad_split(
    rng: random.Random, world: Any, count: int, prefix: str, sizes: DemoSizes
) -> list[dict[str, Any]]:
    return [
        make_squad_record(rng, world, f"{prefix}-{i:05d}", rng.random() < sizes.unanswerable_share)
        for i in range(count)
    ]


def _write_squad(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": "demo", "data": records}, indent=1) + "\n")


def _mrpc_rows(rng: random.Random, world: Any, count: int, first_id: int) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for i in range(count):
        first, second, label = paraphrase_pair(rng, world)
        rows.append((str(label), str(first_id + 2 * i), str(first_id + 2 * i + 1), first, second))
    return rows


def _write_tsv(path: Path, rows: list[tuple[str, ...]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(MRPC_HEADER), *("\t".join(r) for r in rows)]
    path.write_text("\n".join(lines) + "\n")


def corpus_vocab(texts: list[str]) -> list[str]:
    """Special tokens, then every lower-cased word and punctuation mark, in a stable order."""
    words = sorted({w for t in texts for w in _WORD.findall(t.lower())})
    return [*SPECIAL_TOKENS, *words]


def build_tokenizer(vocab: list[str], max_length: int) -> Any:
    # transformers 5: BertTokenizer(vocab=dict) is the fast, tokenizers-backed class and keeps
    # [CLS]/[SEP] and offsets; BertTokenizerFast(vocab_file=...) would ignore the file.
    from transformers import BertTokenizer

    return BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, model_max_length=max_length)


def build_model(vocab_size: int, spec: TinyBert, seed: int) -> Any:
    import torch
    from transformers import BertConfig, BertForQuestionAnswering

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings,
        hidden_dropout_prob=spec.dropout,
        attention_probs_dropout_prob=spec.dropout,
        pad_token_id=0,
    )
    return BertForQuestionAnswering(config)


def _texts(squad: list[dict[str, Any]], mrpc: list[tuple[str, ...]]) -> list[str]:
    return [r[k] for r in squad for k in ("context", "question")] + [s for r in mrpc for s in r[3:]]


def _write_assets(root: Path, seed: int) -> None:
    sizes, spec, layout = DemoSizes(), TinyBert(), DemoLayout(root)
    rng = random.Random(seed)
    world = build_world(rng, sizes.entities)
    train = _squad_split(rng, world, sizes.squad_train, "train", sizes)
    evaluation = _squad_split(rng, world, sizes.squad_eval, "eval", sizes)
    mrpc_train = _mrpc_rows(rng, world, sizes.mrpc_train, 100000)
    mrpc_dev = _mrpc_rows(rng, world, sizes.mrpc_dev, 900000)
    _write_squad(layout.squad_train, train)
    _write_squad(layout.squad_eval, evaluation)
    _write_tsv(layout.mrpc_train, mrpc_train)
    _write_tsv(layout.mrpc_dev, mrpc_dev)
    vocab = corpus_vocab(_texts(train + evaluation, mrpc_train + mrpc_dev))
    build_tokenizer(vocab, spec.max_position_embeddings).save_pretrained(layout.model)
    build_model(len(vocab), spec, seed).save_pretrained(layout.model)
    (root / MANIFEST).write_text(json.dumps(_manifest(seed), indent=1) + "\n")


def ensure_demo_assets(root: Path, seed: int = 0) -> bool:
    """Build the assets unless `root` already holds a complete set for `seed`; True if built.

    Builds in a sibling temporary directory and renames it into place, so concurrent ranks
    never see a half-written set.
    """
    root = Path(root).expanduser().resolve()
    if is_complete(root, seed):
        return False
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    staging.chmod(0o755)
    try:
        _write_assets(staging, seed)
        if root.exists() and not is_complete(root, seed):
            shutil.rmtree(root, ignore_errors=True)
        try:
            os.rename(staging, root)
        except OSError:
            if not is_complete(root, seed):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True
