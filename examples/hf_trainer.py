"""An HF Trainer script, written as the Hugging Face examples are: TrainingArguments from the command
line, a model, a dataset, Trainer.train, evaluate, save.

    xeoncluster train examples/hf_trainer.py -- --output_dir {output} --max_steps 200 --save_steps 40

Nothing in it knows about xeoncluster. Under `train`, a spot notice makes the Trainer save a
checkpoint at the next step and stop, and the resumed run continues from it. Offline: a tiny BERT
made from a config, and sequences made up on the spot (the label: does token 7 occur?).
"""
from __future__ import annotations

import random

from datasets import Dataset
from transformers import BertConfig, BertForSequenceClassification, HfArgumentParser, Trainer, TrainingArguments

LENGTH, VOCAB = 16, 64


def synthetic(count: int, seed: int) -> Dataset:
    rng = random.Random(seed)
    rows = [[rng.randrange(8, VOCAB) for _ in range(LENGTH)] for _ in range(count)]
    for row in rows[::2]:
        row[rng.randrange(LENGTH)] = 7
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * LENGTH for _ in rows],
                              "labels": [int(7 in row) for row in rows]})


def main() -> None:
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    args.report_to = []
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=2)
    model = BertForSequenceClassification(config)
    trainer = Trainer(model=model, args=args, train_dataset=synthetic(2048, 0), eval_dataset=synthetic(256, 1))
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_metrics("eval", metrics)
    trainer.save_model(f"{args.output_dir}/model")


if __name__ == "__main__":
    main()
