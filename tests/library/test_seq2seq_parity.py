"""Our encoder-decoders reproduce transformers' T5, BART and Marian on the same safetensors files:
logits, captured attention (encoder self, decoder self, cross) and cached incremental decoding."""

from __future__ import annotations

import pytest
import torch
import transformers

import playground
from playground.models.recorder import Recorder
from playground.models.seq2seq import EncoderDecoderLM
from tests.hf_tiny import bart_like, marian_like, save_seq2seq, t5_like

transformers.logging.set_verbosity_error()

CASES = {
    # name: family, HF config kwargs, save_seq2seq options
    "t5-v1.0-relu-tied": ("t5", t5_like(), {}),
    "t5-v1.0-odd-heads": ("t5", t5_like(num_heads=3, d_kv=10, num_decoder_layers=3), {}),
    "t5-v1.1-gated-gelu-untied": (
        "t5", t5_like(feed_forward_proj="gated-gelu", tie_word_embeddings=False, num_heads=3), {"untied_head": True},
    ),
    "t5-v1.1-tied-unscaled": ("t5", t5_like(feed_forward_proj="gated-gelu", tie_word_embeddings=False), {}),
    "bart": ("bart", bart_like(), {}),
    "bart-3-heads-scaled-forced-bos": (
        "bart", bart_like(encoder_attention_heads=3, decoder_attention_heads=3, d_model=30, scale_embedding=True,
                          forced_bos_token_id=0, encoder_layers=1, decoder_layers=3), {},
    ),
    "marian-swish": ("marian", marian_like(activation_function="swish"), {}),
    "marian-odd-width-3-heads": (
        "marian", marian_like(d_model=27, encoder_attention_heads=3, decoder_attention_heads=3, activation_function="relu"), {},
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    family, kwargs, options = CASES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_seq2seq(directory, family, kwargs, init_std=0.1 if family == "t5" else 0.2, **options)
    return reference, playground.load_model(directory)


def _batch(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab - 1, (2, 11), generator=g)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 7:] = 0  # the second source is padded
    tgt = torch.randint(3, vocab - 1, (2, 8), generator=g)
    return src, mask, tgt


def test_logits_match_transformers(pair):
    reference, ours = pair
    src, mask, tgt = _batch(ours.config.vocab_size, 1)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    got = ours.logits(src, tgt, attention_mask=mask)
    assert got.shape == expected.shape == (2, 8, ours.config.vocab_size)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_captured_attention_matches_eager_output_attentions(pair):
    reference, ours = pair
    src, mask, tgt = _batch(ours.config.vocab_size, 2)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, output_attentions=True)
        recorder = Recorder()
        encoder_out = ours.model.encode(src, mask, recorder=recorder)
        logits = ours.model.decode(tgt, encoder_out, mask, recorder=recorder)
        fast = ours.model(src, tgt, attention_mask=mask)
    c = ours.config
    for name, got, theirs, layers in (
        ("encoder", recorder.layers_of("encoder", c.n_encoder_layers), expected.encoder_attentions, c.n_encoder_layers),
        ("self", recorder.layers_of("self", c.n_layers), expected.decoder_attentions, c.n_layers),
        ("cross", recorder.layers_of("cross", c.n_layers), expected.cross_attentions, c.n_layers),
    ):
        assert len(got) == len(theirs) == layers, name
        for ours_layer, theirs_layer in zip(got, theirs):
            assert ours_layer.shape == theirs_layer.shape, name
            torch.testing.assert_close(ours_layer, theirs_layer, atol=1e-5, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
    torch.testing.assert_close(logits, fast, atol=1e-5, rtol=0)  # explicit softmax path == SDPA path


def test_cached_decoding_matches_full_forward(pair):
    _, ours = pair
    src, mask, tgt = _batch(ours.config.vocab_size, 3)
    with torch.no_grad():
        full = ours.model(src, tgt, attention_mask=mask)
        encoder_out = ours.model.encode(src, mask)
        cache = ours.model.new_cache(batch=2, max_tokens=8)
        steps = [ours.model.decode(tgt[:, t : t + 1], encoder_out, mask, cache) for t in range(8)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 8
    assert cache.stats().cross_attention.tokens == 11


def test_config_and_special_tokens_follow_the_family(pair):
    reference, ours = pair
    hf, c = reference.config, ours.config
    assert ours.kind == "seq2seq" and isinstance(ours.model, EncoderDecoderLM)
    assert all(not type(m).__module__.startswith("transformers") for m in ours.model.modules())
    assert c.decoder_start_token_id == hf.decoder_start_token_id
    assert c.eos_token_ids == ([hf.eos_token_id] if isinstance(hf.eos_token_id, int) else list(hf.eos_token_id))
    assert c.forced_bos_token_id == getattr(hf, "forced_bos_token_id", None)
    assert c.n_heads == (hf.num_heads if c.family == "t5" else hf.encoder_attention_heads)
    tied_in_hf = reference.get_output_embeddings().weight is reference.get_input_embeddings().weight
    assert c.tie_word_embeddings == tied_in_hf
    if c.family == "t5":
        assert c.logit_scale == (c.d_model**-0.5 if hf.scale_decoder_outputs else 1.0)
        assert c.positional == "relative" and c.norm_position == "pre"
    else:
        assert c.final_logits_bias and c.norm_position == "post"
        assert c.positional == ("learned" if c.family == "bart" else "sinusoidal")
