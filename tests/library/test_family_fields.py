"""Every config field that changes what a decoder family computes is either implemented (our logits
equal transformers' on the file it saved) or refused by name (a CheckpointError naming the field).

Each case flips one field (or a field with the values it needs) away from the family's tiny base
config, saves the model with transformers and loads it with playground.
"""

from __future__ import annotations

import pytest
import torch

import playground
from playground.checkpoints.families import FAMILIES
from playground.errors import CheckpointError
from tests.hf_tiny import DECODER_CLASSES, gemma3_like, llama_like, neo_like, neox_like, opt_like, save_decoder

GQA = dict(num_attention_heads=6, num_key_value_heads=2)
BASE = {
    "gpt_neox": neox_like(),
    "gpt_neo": neo_like(),
    "qwen3": llama_like(head_dim=10, **GQA),
    "gemma3_text": gemma3_like(),
    "phi3": llama_like(**GQA),
    "olmo2": llama_like(**GQA),
    "opt": opt_like(),
    "smollm3": llama_like(num_hidden_layers=4, **GQA),
}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5], "long_factor": [1.0, 2.0, 4.0]}
PARITY = None  # expected outcome: same logits as transformers
FLIPS = [
    # (model_type, changed config fields, None for parity or a regex the refusal must match)
    ("gpt_neox", {"use_parallel_residual": False}, PARITY),
    ("gpt_neox", {"rotary_pct": 1.0}, PARITY),
    ("gpt_neox", {"rotary_pct": 0.3}, PARITY),  # int(16 · 0.3) = 4 dims, as transformers rounds
    ("gpt_neox", {"rotary_pct": 0.2}, "partial_rotary_factor"),  # 3 dims: not whole pairs
    ("gpt_neox", {"rotary_emb_base": 500.0}, PARITY),
    ("gpt_neox", {"attention_bias": False}, PARITY),
    ("gpt_neox", {"hidden_act": "relu"}, PARITY),
    ("gpt_neox", {"hidden_act": "gelu_fast"}, "activation 'gelu_fast'"),
    ("gpt_neox", {"layer_norm_eps": 1e-2}, PARITY),
    ("gpt_neox", {"tie_word_embeddings": True}, PARITY),
    ("gpt_neox", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, PARITY),
    ("gpt_neox", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling.*dynamic"),
    ("gpt_neo", {"attention_types": [[["global"], 3]]}, PARITY),
    ("gpt_neo", {"attention_types": [[["local"], 3]], "window_size": 2}, PARITY),
    ("gpt_neo", {"activation_function": "relu"}, PARITY),
    ("gpt_neo", {"intermediate_size": 50}, PARITY),
    ("gpt_neo", {"layer_norm_epsilon": 1e-2}, PARITY),
    ("gpt_neo", {"tie_word_embeddings": False}, PARITY),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}, PARITY),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}, PARITY),
    ("qwen3", {"attention_bias": True}, PARITY),
    ("qwen3", {"rms_norm_eps": 1e-2}, PARITY),
    ("qwen3", {"hidden_act": "gelu"}, PARITY),
    ("qwen3", {"tie_word_embeddings": True}, PARITY),
    ("qwen3", {"rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 500.0}}, PARITY),
    ("qwen3", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                   "original_max_position_embeddings": 32}}, "rope_scaling.*yarn"),
    ("gemma3_text", {"final_logit_softcapping": 3.0}, PARITY),
    ("gemma3_text", {"attn_logit_softcapping": 5.0}, "attn_logit_softcapping"),
    ("gemma3_text", {"query_pre_attn_scalar": 7}, PARITY),
    ("gemma3_text", {"sliding_window": 3}, PARITY),
    ("gemma3_text", {"layer_types": ["full_attention"] * 3}, PARITY),
    ("gemma3_text", {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}}}, PARITY),
    ("gemma3_text", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5e5},
                                         "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 300.0}}},
     "sliding_attention"),
    ("gemma3_text", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma3_text", {"attention_bias": True}, PARITY),
    ("gemma3_text", {"hidden_activation": "gelu"}, PARITY),
    ("gemma3_text", {"tie_word_embeddings": False}, PARITY),
    ("gemma3_text", {"rms_norm_eps": 1e-2}, PARITY),
    ("phi3", {"partial_rotary_factor": 0.5}, PARITY),
    ("phi3", {"partial_rotary_factor": 0.75, "rope_scaling": LONGROPE, "original_max_position_embeddings": 8,
              "max_position_embeddings": 64}, PARITY),
    ("phi3", {"sliding_window": 5}, PARITY),
    ("phi3", {"tie_word_embeddings": True}, PARITY),
    ("phi3", {"hidden_act": "gelu"}, PARITY),
    ("phi3", {"rms_norm_eps": 1e-2}, PARITY),
    ("olmo2", {"attention_bias": True}, PARITY),
    ("olmo2", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 300.0}}, PARITY),
    ("olmo2", {"tie_word_embeddings": True}, PARITY),
    ("olmo2", {"rms_norm_eps": 1e-2}, PARITY),
    ("opt", {"do_layer_norm_before": False}, PARITY),
    ("opt", {"word_embed_proj_dim": 20}, PARITY),
    ("opt", {"enable_bias": False}, PARITY),
    ("opt", {"_remove_final_layer_norm": True}, PARITY),
    ("opt", {"activation_function": "gelu"}, PARITY),
    ("opt", {"tie_word_embeddings": False}, PARITY),
    ("opt", {"layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine"),
    ("smollm3", {"no_rope_layer_interval": 2}, PARITY),
    ("smollm3", {"no_rope_layers": [0, 1, 0, 1]}, PARITY),
    ("smollm3", {"use_sliding_window": True, "sliding_window": 4}, PARITY),  # sliding NoPE layers
    ("smollm3", {"attention_bias": True, "mlp_bias": True}, PARITY),
    ("smollm3", {"tie_word_embeddings": False}, PARITY),
    ("smollm3", {"rope_parameters": {"rope_type": "llama3", "factor": 4.0, "rope_theta": 2e6, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}, PARITY),
]


def _our_config(family: str, kwargs: dict) -> dict:
    """Our config for transformers' config built from `kwargs` (no weights)."""
    hf = DECODER_CLASSES[family][0](**kwargs).to_dict()
    return FAMILIES[family].config_from_hf(hf).to_dict()


def _id(flip) -> str:
    family, fields, _ = flip
    return f"{family}-{'+'.join(fields)}"


@pytest.mark.parametrize("flip", FLIPS, ids=[_id(f) for f in FLIPS])
def test_field_is_implemented_or_refused_by_name(flip, tmp_path, one_thread):
    family, fields, refusal = flip
    reference = save_decoder(tmp_path, family, {**BASE[family], **fields}, init_std=0.1)
    if refusal is not None:
        with pytest.raises(CheckpointError, match=refusal):
            playground.load_model(tmp_path, tokenizer=False)
        return
    ours = playground.load_model(tmp_path, tokenizer=False)
    assert ours.config.to_dict() != _our_config(family, BASE[family]), "the flip did not reach our config"
    ids = torch.randint(3, 97, (2, 17), generator=torch.Generator().manual_seed(0))  # longer than the windows
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(ours.logits(ids), expected, atol=1e-4, rtol=0)


def test_every_new_family_has_flips():
    assert {family for family, _, _ in FLIPS} == set(BASE)
