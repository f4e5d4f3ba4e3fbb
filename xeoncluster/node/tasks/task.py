"""What the runner needs from a task (SQuAD, GLUE); each task module implements it."""

from __future__ import annotations

from typing import Any, Protocol

from xeoncluster.node.tasks.evaluation import Evaluation


class Task(Protocol):
    name: str
    metric_names: tuple[str, ...]

    def load_raw(self) -> Any:
        """A DatasetDict with `train` and maybe `validation`, already capped to max samples."""

    def cache_parts(self) -> dict[str, Any]:
        """Everything besides data and tokenizer that changes the tokenized features."""

    def build_features(self, raw: Any, tokenizer: Any) -> Any:
        """Tokenized DatasetDict (the expensive part, cached per node)."""

    def load_model(self, model: str) -> Any: ...

    def eval_dataset(self, features: Any) -> Any | None:
        """What the Trainer evaluates (for the eval loss during training), or None."""

    def evaluate(self, trainer: Any, raw: Any, features: Any) -> Evaluation | None:
        """Metrics and predictions on the validation split, or None when there is none."""


def make_task(config: Any) -> Task:
    if config.task == "squad":
        from xeoncluster.node.tasks.squad_task import SquadTask

        return SquadTask(config)
    from xeoncluster.node.tasks.glue_task import GlueTaskRunner

    return GlueTaskRunner(config)
