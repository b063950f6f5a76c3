"""Train a small masked-language model with the Hugging Face ``Trainer``, written the way the
transformers examples set it up: a ``TrainingArguments`` (no device named: the Trainer picks the
``neuron`` device itself under ``NEURON_SIM=1``, through transformers' own Neuron detection), a
``DataCollatorForLanguageModeling``-style masking done here, ``trainer.train()``.

The model is a tiny BERT built from its config (random weights, no download) and the data a toy
language made here: ``NEURON_SIM=1 python examples/hf_trainer.py`` trains on ``neuron``,
``--device cpu`` on the CPU (``use_cpu=True``).
"""

from __future__ import annotations

import argparse
import tempfile

import torch


class ToyMLM(torch.utils.data.Dataset):
    """Sequences of a toy language with 15% of tokens masked (labels -100 elsewhere)."""

    def __init__(self, n: int, seq: int, vocab: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(5, vocab, (n, seq), generator=gen)
        ids[:, 1::2] = (ids[:, 0::2] * 3 + 1) % (vocab - 5) + 5
        masked = torch.rand(n, seq, generator=gen) < 0.15
        masked[:, 0] = True  # at least one masked token per row
        self.labels = torch.where(masked, ids, torch.full_like(ids, -100))
        self.input_ids = torch.where(masked, torch.full_like(ids, 4), ids)  # 4: [MASK]

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "attention_mask": torch.ones_like(self.input_ids[i]),
                "labels": self.labels[i]}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="neuron", help="'cpu' sets use_cpu=True; else the Trainer picks")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[float]:
    from transformers import BertConfig, BertForMaskedLM, Trainer, TrainingArguments

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = BertForMaskedLM(config)
    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
            learning_rate=1e-3, warmup_steps=1, logging_steps=1, report_to=[], save_strategy="no",
            seed=args.seed, use_cpu=args.device == "cpu", dataloader_num_workers=0,
            disable_tqdm=args.quiet)
        trainer = Trainer(model=model, args=training_args, train_dataset=ToyMLM(64, 16, 64, args.seed))
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    if not args.quiet:
        print(f"trained on {trainer.args.device}: losses {losses}")
    return losses


if __name__ == "__main__":
    main()
