"""Tiny randomly initialised Hugging Face models, one per architecture, built from config classes.

Each :class:`Arch` names a transformers config class, a model class with a loss head, the config's
arguments (2 layers, hidden 32 or so: every structural feature of the family — tied embeddings,
rotary or ALiBi or relative positions, MoE routing, convolutions — at a size the simulator runs in
seconds) and the kind of batch the head takes. Nothing is downloaded: weights are random (seeded),
batches are made here. ``transformers`` comes with neuronsim's ``test`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

VOCAB = 96
SEQ = 8
BATCH = 2
PAD, BOS, EOS = 0, 1, 2
IMAGE = 32  # pixels per side of the vision models' images
AUDIO = 1600  # samples of the audio models' waveforms


@dataclass(frozen=True)
class Arch:
    """One architecture of the sweep: ``model_class(config_class(**config))`` and its batch."""

    name: str
    group: str  # decoder | moe | encoder | seq2seq | vision | audio | multimodal
    config_class: str
    model_class: str
    config: dict = field(default_factory=dict)
    batch: str = "causal"  # the batch builder's name (see BATCHES)
    generates: bool = False  # a decoder (or seq2seq) whose generate() the sweep compares


_TOKENS = dict(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
# llama-like decoders: grouped-query attention (2 heads, 1 KV head), rotary positions, RMSNorm, SwiGLU
_LLAMA = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64,
              **_TOKENS)
_MOE = dict(_LLAMA, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
_ENCODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, pad_token_id=PAD)
_BART = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
             decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             decoder_start_token_id=EOS, **_TOKENS)
_T5 = dict(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
           relative_attention_num_buckets=8, relative_attention_max_distance=16,
           decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=EOS)
_VIT = dict(image_size=IMAGE, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64, num_labels=5)
_AUDIO = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, pad_token_id=PAD,
              ctc_loss_reduction="mean", do_stable_layer_norm=True, mask_time_prob=0.0)


def _d(name, config_class, model_class, config, **kw):
    return Arch(name, "decoder", config_class, model_class, config, generates=True, **kw)


ARCHS: tuple[Arch, ...] = (
    # ---- decoder LMs
    _d("gpt2", "GPT2Config", "GPT2LMHeadModel",
       dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2, **_TOKENS)),
    _d("gpt_neo", "GPTNeoConfig", "GPTNeoForCausalLM",
       dict(vocab_size=VOCAB, max_position_embeddings=64, hidden_size=32, num_layers=2, num_heads=2,
            attention_types=[[["global", "local"], 1]], window_size=4, intermediate_size=64, **_TOKENS)),
    _d("gptj", "GPTJConfig", "GPTJForCausalLM",
       dict(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, **_TOKENS)),
    _d("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM",
       dict(_LLAMA, num_key_value_heads=None, head_dim=None, rotary_pct=0.5)),
    _d("opt", "OPTConfig", "OPTForCausalLM",
       dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
            max_position_embeddings=64, word_embed_proj_dim=32, **_TOKENS)),
    _d("bloom", "BloomConfig", "BloomForCausalLM", dict(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=2,
                                                        **_TOKENS)),
    _d("falcon", "FalconConfig", "FalconForCausalLM",
       dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, **_TOKENS)),
    _d("llama", "LlamaConfig", "LlamaForCausalLM", _LLAMA),
    _d("llama_tied", "LlamaConfig", "LlamaForCausalLM", dict(_LLAMA, tie_word_embeddings=True)),
    _d("mistral", "MistralConfig", "MistralForCausalLM", dict(_LLAMA, sliding_window=4)),
    _d("qwen2", "Qwen2Config", "Qwen2ForCausalLM", _LLAMA),
    _d("qwen3", "Qwen3Config", "Qwen3ForCausalLM", _LLAMA),
    _d("phi", "PhiConfig", "PhiForCausalLM", dict(_LLAMA, head_dim=None, partial_rotary_factor=0.5)),
    _d("phi3", "Phi3Config", "Phi3ForCausalLM", dict(_LLAMA, head_dim=None, pad_token_id=PAD)),
    _d("gemma", "GemmaConfig", "GemmaForCausalLM", _LLAMA),
    _d("gemma2", "Gemma2Config", "Gemma2ForCausalLM", dict(_LLAMA, sliding_window=4)),
    _d("stablelm", "StableLmConfig", "StableLmForCausalLM", dict(_LLAMA, head_dim=None)),
    _d("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM",
       dict(_LLAMA, head_dim=None, sliding_window=4)),
    _d("olmo", "OlmoConfig", "OlmoForCausalLM", dict(_LLAMA, head_dim=None)),
    _d("olmo2", "Olmo2Config", "Olmo2ForCausalLM", dict(_LLAMA, head_dim=None)),
    _d("codegen", "CodeGenConfig", "CodeGenForCausalLM",
       dict(vocab_size=VOCAB, n_positions=64, n_ctx=64, n_embd=32, n_layer=2, n_head=2, rotary_dim=8,
            **_TOKENS)),
    _d("xglm", "XGLMConfig", "XGLMForCausalLM",
       dict(vocab_size=VOCAB, max_position_embeddings=64, d_model=32, ffn_dim=64, num_layers=2,
            attention_heads=2, **_TOKENS)),
    _d("biogpt", "BioGptConfig", "BioGptForCausalLM", dict(_ENCODER, **_TOKENS)),
    _d("mpt", "MptConfig", "MptForCausalLM", dict(vocab_size=VOCAB, d_model=32, n_heads=2, n_layers=2,
                                                  max_seq_len=64, **_TOKENS)),
    _d("cohere", "CohereConfig", "CohereForCausalLM", dict(_LLAMA, head_dim=None)),
    _d("granite", "GraniteConfig", "GraniteForCausalLM", dict(_LLAMA, head_dim=None)),
    _d("helium", "HeliumConfig", "HeliumForCausalLM", _LLAMA),
    # ---- mixtures of experts
    Arch("mixtral", "moe", "MixtralConfig", "MixtralForCausalLM",
         dict(_LLAMA, num_local_experts=4, num_experts_per_tok=2, output_router_logits=True), generates=True),
    Arch("qwen2_moe", "moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
         dict(_MOE, shared_expert_intermediate_size=32, output_router_logits=True), generates=True),
    Arch("olmoe", "moe", "OlmoeConfig", "OlmoeForCausalLM",
         dict(_MOE, head_dim=None, output_router_logits=True), generates=True),
    Arch("granitemoe", "moe", "GraniteMoeConfig", "GraniteMoeForCausalLM",
         dict(_LLAMA, head_dim=None, num_local_experts=4, num_experts_per_tok=2, output_router_logits=True),
         generates=True),
    # ---- encoders
    Arch("bert", "encoder", "BertConfig", "BertForMaskedLM", _ENCODER, "masked"),
    Arch("roberta", "encoder", "RobertaConfig", "RobertaForMaskedLM", dict(_ENCODER, bos_token_id=BOS,
                                                                         eos_token_id=EOS), "masked"),
    Arch("distilbert", "encoder", "DistilBertConfig", "DistilBertForMaskedLM",
         dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64,
              pad_token_id=PAD), "masked"),
    Arch("electra", "encoder", "ElectraConfig", "ElectraForMaskedLM", dict(_ENCODER, embedding_size=32),
         "masked"),
    Arch("albert", "encoder", "AlbertConfig", "AlbertForMaskedLM", dict(_ENCODER, embedding_size=16),
         "masked"),
    Arch("deberta_v2", "encoder", "DebertaV2Config", "DebertaV2ForMaskedLM",
         dict(_ENCODER, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"]), "masked"),
    Arch("xlm_roberta", "encoder", "XLMRobertaConfig", "XLMRobertaForMaskedLM", _ENCODER, "masked"),
    Arch("mpnet", "encoder", "MPNetConfig", "MPNetForMaskedLM", _ENCODER, "masked"),
    Arch("modernbert", "encoder", "ModernBertConfig", "ModernBertForMaskedLM",
         dict(_ENCODER, global_attn_every_n_layers=2, local_attention=4, **_TOKENS), "masked"),
    Arch("bert_classifier", "encoder", "BertConfig", "BertForSequenceClassification",
         dict(_ENCODER, num_labels=3), "classify"),
    # ---- encoder-decoders
    Arch("t5", "seq2seq", "T5Config", "T5ForConditionalGeneration", _T5, "seq2seq", generates=True),
    Arch("bart", "seq2seq", "BartConfig", "BartForConditionalGeneration", _BART, "seq2seq", generates=True),
    Arch("mbart", "seq2seq", "MBartConfig", "MBartForConditionalGeneration", _BART, "seq2seq",
         generates=True),
    Arch("pegasus", "seq2seq", "PegasusConfig", "PegasusForConditionalGeneration", _BART, "seq2seq",
         generates=True),
    Arch("marian", "seq2seq", "MarianConfig", "MarianMTModel", dict(_BART, decoder_start_token_id=PAD),
         "seq2seq", generates=True),
    # ---- vision
    Arch("vit", "vision", "ViTConfig", "ViTForImageClassification", _VIT, "image"),
    Arch("deit", "vision", "DeiTConfig", "DeiTForImageClassification", _VIT, "image"),
    Arch("dinov2", "vision", "Dinov2Config", "Dinov2ForImageClassification", _VIT, "image"),
    Arch("convnext", "vision", "ConvNextConfig", "ConvNextForImageClassification",
         dict(num_channels=3, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=5), "image"),
    Arch("resnet", "vision", "ResNetConfig", "ResNetForImageClassification",
         dict(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
              num_labels=5), "image"),
    # ---- audio
    Arch("wav2vec2", "audio", "Wav2Vec2Config", "Wav2Vec2ForCTC", _AUDIO, "ctc"),
    Arch("hubert", "audio", "HubertConfig", "HubertForCTC", _AUDIO, "ctc"),
    Arch("whisper", "audio", "WhisperConfig", "WhisperForConditionalGeneration",
         dict(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
              max_source_positions=16, max_target_positions=32, decoder_start_token_id=BOS,
              begin_suppress_tokens=None, suppress_tokens=None, **_TOKENS), "speech2text"),
    # ---- multimodal
    Arch("clip", "multimodal", "CLIPConfig", "CLIPModel",
         dict(text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, max_position_embeddings=64, projection_dim=16,
                               **_TOKENS),
              vision_config=dict(image_size=IMAGE, patch_size=8, hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=2, num_attention_heads=2, projection_dim=16),
              projection_dim=16), "contrastive"),
    Arch("siglip", "multimodal", "SiglipConfig", "SiglipModel",
         dict(text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, max_position_embeddings=64, **_TOKENS),
              vision_config=dict(image_size=IMAGE, patch_size=8, hidden_size=32, intermediate_size=64,
                                 num_hidden_layers=2, num_attention_heads=2)), "contrastive"),
)
BY_NAME = {a.name: a for a in ARCHS}


# ---------------------------------------------------------------- batches


def _ids(seed: int, shape=(BATCH, SEQ)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, shape, generator=g)


def _noise(seed: int, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _causal(model):
    ids = _ids(1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _masked(model):
    ids = _ids(2)
    labels = ids.clone()
    labels[:, ::2] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _classify(model):
    ids = _ids(5)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 2])}


def _seq2seq(model):
    ids = _ids(3)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": _ids(4, (BATCH, SEQ - 2))}


def _image(model):
    return {"pixel_values": _noise(6, BATCH, 3, IMAGE, IMAGE), "labels": torch.tensor([1, 4])}


def _ctc(model):
    return {"input_values": _noise(7, BATCH, AUDIO), "labels": _ids(8, (BATCH, 3))}


def _speech2text(model):
    frames = 2 * model.config.max_source_positions
    return {"input_features": _noise(9, BATCH, model.config.num_mel_bins, frames),
            "labels": _ids(10, (BATCH, SEQ - 2))}


def _contrastive(model):
    ids = _ids(11)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "pixel_values": _noise(12, BATCH, 3, IMAGE, IMAGE), "return_loss": True}


BATCHES = {"causal": _causal, "masked": _masked, "classify": _classify, "seq2seq": _seq2seq, "image": _image,
           "ctc": _ctc, "speech2text": _speech2text, "contrastive": _contrastive}


def build(arch: Arch | str):
    """(model in eval mode — dropout off, so CPU and device compute the same function — and its batch,
    on the CPU). The same seed every time: two builds are the same model."""
    import transformers

    arch = BY_NAME[arch] if isinstance(arch, str) else arch
    # ``None`` in a spec: the key is left out (a llama-like spec without head_dim derives it)
    given = {k: v for k, v in arch.config.items() if v is not None}
    config = getattr(transformers, arch.config_class)(**given)
    torch.manual_seed(0)
    model = getattr(transformers, arch.model_class)(config)
    return model.eval(), BATCHES[arch.batch](model)
