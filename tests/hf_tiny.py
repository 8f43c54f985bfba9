"""Tiny random Hugging Face checkpoints written to disk with `save_pretrained` (real safetensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import transformers

DECODER_CLASSES = {
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
}


def llama_like(**overrides: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    base.update(overrides)
    return base


def gpt2_like(**overrides: Any) -> dict[str, Any]:
    base = dict(vocab_size=97, n_embd=48, n_layer=2, n_head=4, n_positions=64, bos_token_id=1, eos_token_id=2)
    base.update(overrides)
    return base


def save_decoder(
    directory: Path, family: str, config_kwargs: dict[str, Any], *, seed: int = 0, init_std: float = 0.2
) -> torch.nn.Module:
    """Build a random `family` model (weights drawn with `init_std` so logits are far from uniform),
    save it with `save_pretrained` and return it in eval mode with eager attention."""
    config_cls, model_cls = DECODER_CLASSES[family]
    config = config_cls(**config_kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            else:
                param.normal_(0.0, init_std)
    model.eval()
    model.save_pretrained(directory)
    return model


# --- decoder families of issue 15: tiny configs with odd head dims, GQA 3:1 and untied heads where they apply

DECODER_CLASSES.update({
    "gpt_neox": (transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM),
    "gpt_neo": (transformers.GPTNeoConfig, transformers.GPTNeoForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    "gemma3_text": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
    "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
    "olmo2": (transformers.Olmo2Config, transformers.Olmo2ForCausalLM),
    "opt": (transformers.OPTConfig, transformers.OPTForCausalLM),
    "smollm3": (transformers.SmolLM3Config, transformers.SmolLM3ForCausalLM),
})


def save_small_llama(directory: Path) -> None:
    """The tests' small LLaMA-style checkpoint (grouped-query attention, 64 wide, 112 tokens) saved in `directory`:
    dimensions that are multiples of 16, as real models' are."""
    save_decoder(directory, "llama", llama_like(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                                num_key_value_heads=2, vocab_size=112), init_std=0.1)


def neox_like(**overrides: Any) -> dict[str, Any]:
    """Pythia-style: parallel residual, 25% rotary of head_dim 16 (2 pairs), untied head."""
    base = dict(
        vocab_size=97, hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    base.update(overrides)
    return base


def neo_like(**overrides: Any) -> dict[str, Any]:
    """TinyStories-style: global and local (window 5) layers alternating, head_dim 12."""
    base = dict(
        vocab_size=97, hidden_size=36, num_layers=3, num_heads=3, attention_types=[[["global", "local"], 1], [["local"], 1]],
        window_size=5, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
    )
    base.update(overrides)
    return base


def gemma3_like(**overrides: Any) -> dict[str, Any]:
    """Gemma 3 270M in miniature: 2 sliding layers (window 5, base 10 000) per global one (base 1e6),
    GQA 3:1, head_dim 10 (not d_model / heads), query_pre_attn_scalar 16."""
    base = llama_like(
        hidden_size=36, num_attention_heads=3, num_key_value_heads=1, head_dim=10, num_hidden_layers=3,
        sliding_window=5, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        query_pre_attn_scalar=16, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        },
    )
    base.update(overrides)
    return base


def opt_like(**overrides: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=97, hidden_size=48, ffn_dim=80, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
        word_embed_proj_dim=48, bos_token_id=1, eos_token_id=2, pad_token_id=0, dropout=0.0,
    )
    base.update(overrides)
    return base


SEQ2SEQ_CLASSES = {
    "t5": (transformers.T5Config, transformers.T5ForConditionalGeneration),
    "bart": (transformers.BartConfig, transformers.BartForConditionalGeneration),
    "marian": (transformers.MarianConfig, transformers.MarianMTModel),
}


def t5_like(**overrides: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=61, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
        relative_attention_max_distance=20, feed_forward_proj="relu", decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=1,
    )
    base.update(overrides)
    return base


def bart_like(**overrides: Any) -> dict[str, Any]:
    base = dict(
        vocab_size=61, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=40,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
    )
    base.update(overrides)
    return base


def marian_like(**overrides: Any) -> dict[str, Any]:
    base = bart_like(pad_token_id=60, decoder_start_token_id=60, eos_token_id=0, bos_token_id=None, scale_embedding=True)
    base.update(overrides)
    return base


def save_seq2seq(
    directory: Path,
    family: str,
    config_kwargs: dict[str, Any],
    *,
    seed: int = 0,
    init_std: float = 0.2,
    untied_head: bool = False,
) -> torch.nn.Module:
    """A random encoder-decoder saved with `save_pretrained`; returns the reference read back from the
    directory by transformers itself (eager attention, eval mode).

    `untied_head` adds a separate random `lm_head.weight` to the file, the way real T5 v1.1 / Flan-T5
    checkpoints carry one (transformers 5 always writes tied T5 heads).
    """
    from safetensors.torch import load_file, save_file

    config_cls, model_cls = SEQ2SEQ_CLASSES[family]
    config = config_cls(**config_kwargs)
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():
        for name, param in model.state_dict(keep_vars=True).items():
            if "norm" in name:
                param.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(param))
            elif "embed_positions" in name and family in SINUSOIDAL_FAMILIES:
                continue  # fixed sinusoidal table
            else:
                param.normal_(0.0, init_std)
    model.save_pretrained(directory)
    if untied_head:
        path = directory / "model.safetensors"
        tensors = load_file(path)
        tensors["lm_head.weight"] = torch.randn(config.vocab_size, config.d_model) * init_std
        save_file(tensors, path, metadata={"format": "pt"})
    reference = model_cls.from_pretrained(directory, attn_implementation="eager")
    return reference.eval()


# --- the rest of the BART family: mBART, Pegasus, M2M100 / NLLB (and encoder/decoder asymmetry) ---

SEQ2SEQ_CLASSES.update(
    mbart=(transformers.MBartConfig, transformers.MBartForConditionalGeneration),
    pegasus=(transformers.PegasusConfig, transformers.PegasusForConditionalGeneration),
    m2m_100=(transformers.M2M100Config, transformers.M2M100ForConditionalGeneration),
)
SINUSOIDAL_FAMILIES = ("marian", "pegasus")  # tables stored in the file but fixed (M2M100 stores none)


def mbart_like(**overrides: Any) -> dict[str, Any]:
    """mBART-50 style: pre-LN, scaled embeddings, decoding starts from </s> (2)."""
    return {**bart_like(scale_embedding=True, decoder_start_token_id=2, forced_eos_token_id=2), **overrides}


def pegasus_like(**overrides: Any) -> dict[str, Any]:
    """Pegasus: pad 0 is also the decoder start, eos 1, scaled embeddings."""
    base = bart_like(pad_token_id=0, eos_token_id=1, bos_token_id=None, decoder_start_token_id=0, scale_embedding=True)
    return {**base, "forced_eos_token_id": 1, **overrides}


def m2m_like(**overrides: Any) -> dict[str, Any]:
    """M2M100 / NLLB: ReLU, scaled embeddings, pad 1, decoding starts from </s> (2)."""
    return {**bart_like(activation_function="relu", scale_embedding=True), **overrides}
