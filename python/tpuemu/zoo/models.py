"""The zoo's architectures: Hugging Face ``transformers`` models built from tiny random configs.

Nothing is downloaded: each entry builds its model from a config (hidden size <= 128, 2 layers,
short sequences, small vocabularies) with ``torch.manual_seed`` fixed, and makes inputs with
labels, so that ``model(**inputs).loss`` is a training loss and ``.logits`` the forward output.
Dropout (and its relatives: layer drop, SpecAugment masking) is set to zero so that a training-mode
step on the tpu and on the CPU compute the same function.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

# Shapes shared by the entries.
BATCH = 2
SEQ = 16
VOCAB = 128
HIDDEN = 64
HEADS = 4
LAYERS = 2
IMAGE = 32
AUDIO = 1024  # audio samples (16 kHz): 64 ms
CLASSES = 10


@dataclasses.dataclass(frozen=True)
class Entry:
    """One architecture: ``build()`` returns the model (on the CPU, training mode), ``inputs()``
    its keyword arguments (CPU tensors, labels included)."""

    name: str
    family: str  # "decoder", "encoder", "encoder-decoder", "moe", "vision", "audio"
    cls: str  # the transformers class
    config: Callable[[], object]
    inputs: Callable[[], dict]

    def build(self) -> torch.nn.Module:
        import transformers

        cfg = self.config()
        _no_dropout(cfg)
        cfg._attn_implementation = "eager" if _eager_only(self.cls) else cfg._attn_implementation
        model = getattr(transformers, self.cls)(cfg)
        return model.train()


def _eager_only(cls: str) -> bool:
    return False


def _no_dropout(cfg) -> None:
    """Zeroes every dropout-like probability of a config (and of its sub-configs)."""
    for k, v in list(vars(cfg).items()):
        if isinstance(v, float) and ("drop" in k or k.startswith("mask_") and k.endswith("_prob")):
            setattr(cfg, k, 0.0)
        elif hasattr(v, "to_dict") and hasattr(v, "__dict__") and k.endswith("config"):
            _no_dropout(v)


def _ids(vocab=VOCAB, seq=SEQ):
    g = torch.Generator().manual_seed(1)
    return torch.randint(3, vocab, (BATCH, seq), generator=g)


def causal_lm():
    ids = _ids()
    return {"input_ids": ids, "labels": ids}


def masked_lm():
    ids = _ids()
    labels = ids.clone()
    labels[:, ::3] = -100  # positions that take no part in the loss
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def seq2seq():
    ids = _ids()
    labels = _ids(seq=SEQ // 2).flip(0)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def image():
    g = torch.Generator().manual_seed(2)
    return {"pixel_values": torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g),
            "labels": torch.tensor([1, 7])}


def audio_classes():
    g = torch.Generator().manual_seed(3)
    return {"input_values": torch.randn(BATCH, AUDIO, generator=g), "labels": torch.tensor([0, 3])}


def whisper():
    g = torch.Generator().manual_seed(4)
    labels = _ids(seq=8)
    # 2 x 32 = 64 mel frames -> 32 encoder positions (max_source_positions below).
    return {"input_features": torch.randn(BATCH, 16, 64, generator=g), "labels": labels}


def _decoder(cfg_cls: str, **kw):
    def config():
        import transformers

        base = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                    num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
                    max_position_embeddings=64, tie_word_embeddings=False)
        base.update(kw)
        return getattr(transformers, cfg_cls)(**base)

    return config


def _cfg(cfg_cls: str, **kw):
    def config():
        import transformers

        return getattr(transformers, cfg_cls)(**kw)

    return config


_BERTISH = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                num_attention_heads=HEADS, intermediate_size=2 * HIDDEN, max_position_embeddings=64)
_VISION = dict(image_size=IMAGE, num_channels=3, num_labels=CLASSES)
_SEQ2SEQ = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN, max_position_embeddings=64,
                pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)

ENTRIES: list[Entry] = [
    # Decoders (causal language models).
    Entry("llama", "decoder", "LlamaForCausalLM", _decoder("LlamaConfig"), causal_lm),
    Entry("qwen3", "decoder", "Qwen3ForCausalLM", _decoder("Qwen3Config", head_dim=16), causal_lm),
    Entry("qwen2", "decoder", "Qwen2ForCausalLM", _decoder("Qwen2Config"), causal_lm),
    Entry("mistral", "decoder", "MistralForCausalLM", _decoder("MistralConfig", head_dim=16,
                                                             sliding_window=8), causal_lm),
    Entry("gemma", "decoder", "GemmaForCausalLM", _decoder("GemmaConfig", head_dim=16), causal_lm),
    Entry("gemma2", "decoder", "Gemma2ForCausalLM", _decoder("Gemma2Config", head_dim=16,
                                                           sliding_window=8), causal_lm),
    Entry("phi", "decoder", "PhiForCausalLM", _decoder("PhiConfig"), causal_lm),
    Entry("phi3", "decoder", "Phi3ForCausalLM", _decoder("Phi3Config", pad_token_id=0), causal_lm),
    Entry("gpt2", "decoder", "GPT2LMHeadModel",
          _cfg("GPT2Config", vocab_size=VOCAB, n_positions=64, n_embd=HIDDEN, n_layer=LAYERS,
               n_head=HEADS), causal_lm),
    Entry("gpt_neox", "decoder", "GPTNeoXForCausalLM",
          _cfg("GPTNeoXConfig", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
               max_position_embeddings=64), causal_lm),
    Entry("opt", "decoder", "OPTForCausalLM",
          _cfg("OPTConfig", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, ffn_dim=2 * HIDDEN, max_position_embeddings=64,
               word_embed_proj_dim=HIDDEN), causal_lm),
    Entry("falcon", "decoder", "FalconForCausalLM",
          _cfg("FalconConfig", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS), causal_lm),
    Entry("bloom", "decoder", "BloomForCausalLM",
          _cfg("BloomConfig", vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS,
               n_head=HEADS), causal_lm),
    # Mixtures of experts.
    Entry("mixtral", "moe", "MixtralForCausalLM",
          _decoder("MixtralConfig", head_dim=16, num_local_experts=4, num_experts_per_tok=2),
          causal_lm),
    Entry("qwen3_moe", "moe", "Qwen3MoeForCausalLM",
          _decoder("Qwen3MoeConfig", head_dim=16, num_experts=4, num_experts_per_tok=2,
                   moe_intermediate_size=HIDDEN, decoder_sparse_step=1), causal_lm),
    # Encoders (masked language models).
    Entry("bert", "encoder", "BertForMaskedLM", _cfg("BertConfig", **_BERTISH), masked_lm),
    Entry("roberta", "encoder", "RobertaForMaskedLM",
          _cfg("RobertaConfig", **{**_BERTISH, "max_position_embeddings": 66}), masked_lm),
    Entry("distilbert", "encoder", "DistilBertForMaskedLM",
          _cfg("DistilBertConfig", vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS,
               hidden_dim=2 * HIDDEN, max_position_embeddings=64), masked_lm),
    Entry("electra", "encoder", "ElectraForMaskedLM",
          _cfg("ElectraConfig", **_BERTISH, embedding_size=32), masked_lm),
    Entry("albert", "encoder", "AlbertForMaskedLM",
          _cfg("AlbertConfig", **_BERTISH, embedding_size=32), masked_lm),
    Entry("deberta_v2", "encoder", "DebertaV2ForMaskedLM",
          _cfg("DebertaV2Config", **_BERTISH, position_buckets=16, max_relative_positions=32),
          masked_lm),
    # Encoder-decoders.
    Entry("bart", "encoder-decoder", "BartForConditionalGeneration", _cfg("BartConfig", **_SEQ2SEQ),
          seq2seq),
    Entry("t5", "encoder-decoder", "T5ForConditionalGeneration",
          _cfg("T5Config", vocab_size=VOCAB, d_model=HIDDEN, d_kv=16, d_ff=2 * HIDDEN,
               num_layers=LAYERS, num_heads=HEADS, decoder_start_token_id=0), seq2seq),
    # Vision.
    Entry("vit", "vision", "ViTForImageClassification",
          _cfg("ViTConfig", **_VISION, patch_size=8, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, intermediate_size=2 * HIDDEN), image),
    Entry("swin", "vision", "SwinForImageClassification",
          _cfg("SwinConfig", **_VISION, patch_size=4, embed_dim=16, depths=[1, 1],
               num_heads=[2, 4], window_size=4), image),
    Entry("resnet", "vision", "ResNetForImageClassification",
          _cfg("ResNetConfig", num_channels=3, num_labels=CLASSES, embedding_size=16,
               hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"), image),
    Entry("convnext", "vision", "ConvNextForImageClassification",
          _cfg("ConvNextConfig", num_channels=3, num_labels=CLASSES, hidden_sizes=[16, 32],
               depths=[1, 1], num_stages=2, patch_size=4), image),
    # Speech and audio.
    Entry("wav2vec2", "audio", "Wav2Vec2ForSequenceClassification",
          _cfg("Wav2Vec2Config", vocab_size=32, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
               conv_dim=(32, 32), conv_stride=(5, 4), conv_kernel=(10, 4),
               num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
               num_labels=4, classifier_proj_size=32), audio_classes),
    Entry("whisper", "audio", "WhisperForConditionalGeneration",
          _cfg("WhisperConfig", vocab_size=VOCAB, num_mel_bins=16, d_model=HIDDEN,
               encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
               decoder_attention_heads=HEADS, encoder_ffn_dim=2 * HIDDEN,
               decoder_ffn_dim=2 * HIDDEN, max_source_positions=32, max_target_positions=32,
               pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
          whisper),
]

MODELS: dict[str, Entry] = {e.name: e for e in ENTRIES}
