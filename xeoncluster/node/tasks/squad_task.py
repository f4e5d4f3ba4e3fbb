"""SQuAD as a Task: load, tokenize into windows, build the QA model, evaluate EM/F1."""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Any

from xeoncluster.node.startup.errors import TrainingError
from xeoncluster.node.startup.run_config import RunConfig
from xeoncluster.node.tasks.evaluation import Evaluation
from xeoncluster.node.tasks.predictions import squad_files
from xeoncluster.node.tasks.sampling import cap
from xeoncluster.node.tasks.sources import load_from_hub
from xeoncluster.node.tasks.squad_data import has_negatives, load_squad
from xeoncluster.node.tasks.squad_features import (
    PostprocessConfig,
    WindowConfig,
    postprocess,
    prepare_eval_features,
    prepare_train_features,
)
from xeoncluster.node.tasks.squad_metrics import squad_scores

_EVAL_ONLY_COLUMNS = ("example_id", "offset_mapping")


class SquadTask:
    name = "squad"
    metric_names: tuple[str, ...] = ("exact_match", "f1")

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.window = WindowConfig(config.tunables.max_seq_length, config.tunables.doc_stride)
        self.version_2 = False

    def load_raw(self) -> Any:
        raw = load_squad(self.config.source)
        raw["train"] = cap(raw["train"], self.config.max_train_samples)
        if "validation" in raw:
            raw["validation"] = cap(raw["validation"], self.config.max_eval_samples)
        self.version_2 = self._version_2(raw)
        return raw

    def _version_2(self, raw: Any) -> bool:
        setting = self.config.version_2_with_negative
        if setting != "auto":
            return setting == "true"
        return any(has_negatives(raw[split]) for split in raw)

    def cache_parts(self) -> dict[str, Any]:
        return {
            "task": "squad",
            "eval_labels": True,
            "window": asdict(self.window),
            "caps": [self.config.max_train_samples, self.config.max_eval_samples],
        }

    def build_features(self, raw: Any, tokenizer: Any) -> Any:
        import datasets

        if not tokenizer.is_fast:
            raise TrainingError("SQuAD needs a fast tokenizer (offset mappings); this model has a slow one")
        if self.window.doc_stride >= self.window.max_seq_length - 16:
            raise TrainingError("--doc-stride must be well below --max-seq-length")
        splits = {
            "train": raw["train"].map(
                partial(prepare_train_features, tokenizer=tokenizer, cfg=self.window),
                batched=True,
                remove_columns=raw["train"].column_names,
            )
        }
        if "validation" in raw:
            splits["validation"] = raw["validation"].map(
                partial(prepare_eval_features, tokenizer=tokenizer, cfg=self.window),
                batched=True,
                remove_columns=raw["validation"].column_names,
            )
        return datasets.DatasetDict(splits)

    def load_model(self, model: str) -> Any:
        from transformers import AutoModelForQuestionAnswering

        return load_from_hub("model", model, lambda: AutoModelForQuestionAnswering.from_pretrained(model))

    def eval_dataset(self, features: Any) -> Any | None:
        if "validation" not in features:
            return None
        return features["validation"].remove_columns(list(_EVAL_ONLY_COLUMNS))

    def evaluate(self, trainer: Any, raw: Any, features: Any) -> Evaluation | None:
        if "validation" not in raw:
            return None
        eval_features = features["validation"]
        output = trainer.predict(self.eval_dataset(features))
        start_logits, end_logits = output.predictions[:2]
        predictions = postprocess(
            raw["validation"].to_list(),
            eval_features.select_columns(list(_EVAL_ONLY_COLUMNS)).to_list(),
            start_logits,
            end_logits,
            PostprocessConfig(version_2_with_negative=self.version_2),
        )
        references = {ex["id"]: ex["answers"]["text"] for ex in raw["validation"]}
        return Evaluation(
            scores=squad_scores(predictions.answers, references),
            loss=output.metrics.get("test_loss"),
            files=squad_files(predictions.answers, predictions.null_odds),
        )
