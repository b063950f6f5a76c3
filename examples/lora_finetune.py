"""Fine-tune a small causal LM with PEFT LoRA adapters, written the way PEFT's quick-start does:
``get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", ...))``, only the adapters trainable,
AdamW, a linear schedule from ``transformers``, labels = inputs.

The model is a tiny GPT-2 built from its config (random weights, no download) and the text a toy
language made here: ``NEURON_SIM=1 python examples/lora_finetune.py`` trains on the emulated
``neuron`` device, ``--device cpu`` on the CPU.
"""

from __future__ import annotations

import argparse

import torch


def build_model(seed: int):
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=96, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=1,
                        eos_token_id=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    base = GPT2LMHeadModel(config)
    lora = LoraConfig(task_type="CAUSAL_LM", r=8, lora_alpha=16, lora_dropout=0.0,
                      target_modules=["c_attn", "c_proj"], fan_in_fan_out=True)
    return get_peft_model(base, lora)


def make_batches(count: int, batch: int, seq: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(3, 96, (batch, seq), generator=gen)
        ids[:, 1::2] = (ids[:, 0::2] * 5 + 7) % 93 + 3
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    return out


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[float]:
    from transformers import get_linear_schedule_with_warmup

    args = parse_args(argv)
    model = build_model(args.seed).to(args.device)
    if not args.quiet:
        model.print_trainable_parameters()
    optimizer = torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=args.lr)
    schedule = get_linear_schedule_with_warmup(optimizer, 2, args.steps)
    model.train()
    losses = []
    for step, batch in enumerate(make_batches(args.steps, args.batch_size, args.seq, args.seed)):
        batch = {k: v.to(args.device) for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if not args.quiet:
            print(f"step {step}: loss {losses[-1]:.4f}")
    return losses


if __name__ == "__main__":
    main()
