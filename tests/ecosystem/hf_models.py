"""Tiny random-weight Hugging Face models, built from their config classes (no hub access).

Each entry builds (model, batch) for a 2-layer, hidden-32 config with short sequences: small enough
for CI, with every structural feature of its family (tied embeddings, relative attention buckets,
ALiBi, rotary embeddings, MoE routing).
"""

from __future__ import annotations

import torch

VOCAB = 64
SEQ = 8
BATCH = 2


def _ids(seed: int, shape=(BATCH, SEQ)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, shape, generator=g)


def _causal_lm(model):
    ids = _ids(1)
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _masked_lm(model):
    ids = _ids(2)
    labels = ids.clone()
    labels[:, ::2] = -100
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _seq2seq(model):
    ids, target = _ids(3), _ids(4, (BATCH, SEQ - 2))
    return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": target}


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=1, eos_token_id=2)
    return _causal_lm(GPT2LMHeadModel(cfg))


def opt():
    from transformers import OPTConfig, OPTForCausalLM

    cfg = OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    ffn_dim=64, max_position_embeddings=32, word_embed_proj_dim=32,
                    pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _causal_lm(OPTForCausalLM(cfg))


def bloom():
    from transformers import BloomConfig, BloomForCausalLM

    cfg = BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=2,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _causal_lm(BloomForCausalLM(cfg))


def falcon():
    from transformers import FalconConfig, FalconForCausalLM

    cfg = FalconConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _causal_lm(FalconForCausalLM(cfg))


def gemma():
    from transformers import GemmaConfig, GemmaForCausalLM

    cfg = GemmaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=32,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _causal_lm(GemmaForCausalLM(cfg))


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=32,
                        num_local_experts=4, num_experts_per_tok=2, output_router_logits=True,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return _causal_lm(MixtralForCausalLM(cfg))


_ENCODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=32, pad_token_id=0)


def bert():
    from transformers import BertConfig, BertForMaskedLM

    return _masked_lm(BertForMaskedLM(BertConfig(**_ENCODER)))


def roberta():
    from transformers import RobertaConfig, RobertaForMaskedLM

    return _masked_lm(RobertaForMaskedLM(RobertaConfig(**_ENCODER, bos_token_id=1, eos_token_id=2)))


def electra():
    from transformers import ElectraConfig, ElectraForMaskedLM

    return _masked_lm(ElectraForMaskedLM(ElectraConfig(**_ENCODER, embedding_size=32)))


def distilbert():
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    cfg = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                           max_position_embeddings=32, pad_token_id=0)
    return _masked_lm(DistilBertForMaskedLM(cfg))


def t5():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                   relative_attention_num_buckets=8, relative_attention_max_distance=16,
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    return _seq2seq(T5ForConditionalGeneration(cfg))


def bart():
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                     decoder_ffn_dim=64, max_position_embeddings=32,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=2)
    return _seq2seq(BartForConditionalGeneration(cfg))


MODELS = {f.__name__: f for f in (gpt2, opt, bloom, falcon, gemma, bert, roberta, distilbert, electra, t5,
                                  bart, mixtral)}


def build(name: str):
    """(model in eval mode — dropout off, so CPU and device see the same function — and its batch)."""
    torch.manual_seed(0)
    model, batch = MODELS[name]()
    return model.eval(), batch


def loss_and_grads(model, batch, device: str, compiled: bool = False):
    """The loss and every parameter's gradient (by name) of one forward/backward on ``device``."""
    model = model.to(device)
    inputs = {k: v.to(device) for k, v in batch.items()}
    run = torch.compile(model, backend="neuron", fullgraph=False) if compiled else model
    model.zero_grad(set_to_none=True)
    loss = run(**inputs).loss
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach().cpu(), grads, len(list(model.parameters()))
