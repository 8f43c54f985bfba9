"""Every field of every seq2seq family's transformers config, flipped one at a time on a tiny
checkpoint that transformers saves itself: either we load it and match transformers (logits and
greedy tokens), or we refuse it with a CheckpointError naming the field. No field is left out: the
flips must cover each config class's own fields, so a new transformers field fails this test until
it is classified here."""

from __future__ import annotations

import pytest
import torch
import transformers

import playground
from tests.hf_tiny import (
    SEQ2SEQ_CLASSES,
    bart_like,
    m2m_like,
    marian_like,
    mbart_like,
    pegasus_like,
    save_seq2seq,
    t5_like,
)

transformers.logging.set_verbosity_error()

SMALL = dict(vocab_size=40, d_model=24, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
             decoder_attention_heads=2, encoder_ffn_dim=20, decoder_ffn_dim=28, max_position_embeddings=24)
BASE = {
    "bart": bart_like(**SMALL),
    "mbart": mbart_like(**SMALL),
    "pegasus": pegasus_like(**SMALL),
    "m2m_100": m2m_like(**SMALL),
    "marian": marian_like(**{**SMALL, "pad_token_id": 39, "decoder_start_token_id": 39}),
    "t5": t5_like(vocab_size=40, d_model=24, d_kv=6, d_ff=28, num_layers=2, num_decoder_layers=1, num_heads=4),
}

# Fields of the BART family's configs and a flipped value. Dropout, layerdrop and init fields do not
# change inference; they are flipped anyway, so that "no effect" is a checked claim.
BART_FLIPS: list[tuple[str, object]] = [
    ("vocab_size", 44), ("max_position_embeddings", 30), ("d_model", 36),
    ("encoder_layers", 3), ("decoder_layers", 3), ("encoder_attention_heads", 6), ("decoder_attention_heads", 3),
    ("encoder_ffn_dim", 12), ("decoder_ffn_dim", 44),
    ("activation_function", "relu"), ("activation_function", "gelu_new"), ("activation_function", "silu"),
    ("activation_function", "gelu"), ("activation_function", "quick_gelu"),
    ("scale_embedding", True), ("scale_embedding", False),
    ("pad_token_id", 5), ("bos_token_id", 6), ("eos_token_id", 7), ("decoder_start_token_id", 8),
    ("forced_eos_token_id", 9), ("forced_eos_token_id", None), ("tie_word_embeddings", False),
    ("dropout", 0.5), ("attention_dropout", 0.5), ("activation_dropout", 0.5), ("encoder_layerdrop", 0.5),
    ("decoder_layerdrop", 0.5), ("classifier_dropout", 0.5), ("init_std", 0.5), ("use_cache", False),
    ("is_decoder", True), ("is_encoder_decoder", False),
    ("decoder_vocab_size", 44), ("share_encoder_decoder_embeddings", False),  # Marian only
]
T5_FLIPS: list[tuple[str, object]] = [
    ("vocab_size", 44), ("d_model", 36), ("d_kv", 7), ("d_ff", 12), ("num_layers", 1), ("num_decoder_layers", 3),
    ("num_heads", 3), ("relative_attention_num_buckets", 12), ("relative_attention_max_distance", 9),
    ("layer_norm_epsilon", 1e-2), ("feed_forward_proj", "gated-gelu"), ("feed_forward_proj", "gated-silu"),
    ("feed_forward_proj", "gelu"), ("feed_forward_proj", "gated-quick_gelu"), ("tie_word_embeddings", False),
    ("pad_token_id", 5), ("eos_token_id", 7), ("decoder_start_token_id", 8), ("dropout_rate", 0.5),
    ("classifier_dropout", 0.5), ("initializer_factor", 3.0), ("use_cache", False), ("is_decoder", True),
    ("is_encoder_decoder", False),
]

# (family, field, value) -> the fragment the refusal must contain (the field's name). All else: parity.
REFUSED = {
    "activation_function": "activation_function 'quick_gelu'",
    "feed_forward_proj": "feed_forward_proj 'gated-quick_gelu'",
    "tie_word_embeddings": "tie_word_embeddings=false",
    "is_encoder_decoder": "is_encoder_decoder",
    "decoder_vocab_size": "decoder_vocab_size",
    "share_encoder_decoder_embeddings": "share_encoder_decoder_embeddings",
}


def _refusal(family: str, field: str, value: object) -> str | None:
    if field == "tie_word_embeddings" and family == "t5":
        return None  # T5 keeps one embedding and reads the flag as "scale the decoder output"
    if field in ("activation_function", "feed_forward_proj") and "quick_gelu" not in str(value):
        return None
    return REFUSED.get(field)


def _flips(family: str) -> list[tuple[str, object]]:
    fields = set(SEQ2SEQ_CLASSES[family][0].__annotations__) | {"tie_word_embeddings", "decoder_start_token_id"}
    return [(f, v) for f, v in (T5_FLIPS if family == "t5" else BART_FLIPS) if f in fields]


CASES = [(family, field, value) for family in BASE for field, value in _flips(family)]


@pytest.mark.parametrize("family", sorted(BASE))
def test_the_flips_cover_every_field_of_the_config_class(family):
    flipped = {field for field, _ in _flips(family)}
    assert set(SEQ2SEQ_CLASSES[family][0].__annotations__) <= flipped


@pytest.mark.parametrize("family,field,value", CASES, ids=[f"{f}-{k}={v}" for f, k, v in CASES])
def test_flipped_field_is_implemented_or_refused_by_name(tmp_path, family, field, value):
    kwargs = {**BASE[family], field: value}
    reference = save_seq2seq(tmp_path, family, kwargs, init_std=0.1 if family == "t5" else 0.2)
    fragment = _refusal(family, field, value)
    if fragment is not None:
        with pytest.raises(playground.CheckpointError) as caught:
            playground.load_model(tmp_path)
        assert fragment in str(caught.value) and "\n" not in str(caught.value)
        return
    lm = playground.load_model(tmp_path)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(10, lm.config.vocab_size - 2, (2, 7), generator=g)
    tgt = torch.randint(10, lm.config.vocab_size - 2, (2, 5), generator=g)
    mask = torch.ones_like(src)
    mask[1, 5:] = 0
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        # Without a cache: transformers 5.23 sizes T5's cache by num_layers, so generate() raises an
        # IndexError when the decoder has more layers than the encoder (ours runs either way).
        greedy = reference.generate(src[:1], max_new_tokens=6, do_sample=False, use_cache=False)[0, 1:].tolist()
    torch.testing.assert_close(lm.logits(src, tgt, attention_mask=mask), expected, atol=1e-4, rtol=0)
    ours = playground.generate_all(lm, src[0].tolist(), playground.GenerationConfig(max_new_tokens=6)).token_ids
    assert ours == greedy[: len(ours)] and all(t == lm.config.pad_token_id for t in greedy[len(ours):])
