"""GLUE classification as a Task: load, tokenize sentence (pairs), evaluate accuracy/F1."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from xeoncluster.node.startup.run_config import RunConfig
from xeoncluster.node.tasks.evaluation import Evaluation
from xeoncluster.node.tasks.glue_data import GlueTask, get_task, load_glue
from xeoncluster.node.tasks.glue_metrics import glue_scores
from xeoncluster.node.tasks.predictions import glue_records
from xeoncluster.node.tasks.sampling import cap
from xeoncluster.node.tasks.sources import load_from_hub


def _tokenize(
    examples: dict[str, list[Any]], tokenizer: Any, columns: tuple[str, ...], max_length: int
) -> Any:
    texts = [examples[c] for c in columns]
    return tokenizer(*texts, truncation=True, max_length=max_length)


class GlueTaskRunner:
    name = "glue"
    metric_names: tuple[str, ...] = ("accuracy", "f1")

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.task: GlueTask = get_task(config.glue_task)

    def load_raw(self) -> Any:
        raw = load_glue(self.config.source, self.task)
        raw["train"] = cap(raw["train"], self.config.max_train_samples)
        if "validation" in raw:
            raw["validation"] = cap(raw["validation"], self.config.max_eval_samples)
        return raw

    def cache_parts(self) -> dict[str, Any]:
        return {
            "task": self.task.name,
            "max_seq_length": self.config.tunables.max_seq_length,
            "caps": [self.config.max_train_samples, self.config.max_eval_samples],
        }

    def build_features(self, raw: Any, tokenizer: Any) -> Any:
        function = partial(
            _tokenize,
            tokenizer=tokenizer,
            columns=self.task.text_columns,
            max_length=self.config.tunables.max_seq_length,
        )
        return raw.map(function, batched=True, remove_columns=list(self.task.text_columns))

    def load_model(self, model: str) -> Any:
        from transformers import AutoModelForSequenceClassification

        num_labels = self.task.num_labels
        return load_from_hub(
            "model",
            model,
            lambda: AutoModelForSequenceClassification.from_pretrained(model, num_labels=num_labels),
        )

    def eval_dataset(self, features: Any) -> Any | None:
        return features.get("validation")

    def evaluate(self, trainer: Any, raw: Any, features: Any) -> Evaluation | None:
        if "validation" not in features:
            return None
        output = trainer.predict(features["validation"])
        logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        predictions = np.argmax(logits, axis=-1).tolist()
        gold = output.label_ids.tolist()
        texts = raw["validation"].select_columns(list(self.task.text_columns)).to_list()
        return Evaluation(
            scores=glue_scores(gold, predictions, self.task.num_labels),
            loss=output.metrics.get("test_loss"),
            files={"predictions.json": glue_records(texts, predictions, gold)},
        )
