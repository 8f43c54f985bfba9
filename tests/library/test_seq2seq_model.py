"""Our own encoder-decoder (`transformer` family): round trip, cache, masks, training path."""

from __future__ import annotations

import json
import math

import pytest
import torch

import playground
from playground.checkpoints.families.transformer import transformer_config
from playground.checkpoints.own_format import save_checkpoint
from playground.config import ModelConfig
from playground.errors import ConfigError
from playground.models import build_model
from playground.models.kv_cache import Seq2SeqCache
from playground.models.layers import init_weights
from playground.models.positional import sinusoidal_table
from playground.models.recorder import Recorder
from playground.models.relative_bias import relative_position_bucket
from playground.models.seq2seq import EncoderDecoderLM


def _model(config: ModelConfig, seed: int = 0) -> EncoderDecoderLM:
    torch.manual_seed(seed)
    model = build_model(config)
    init_weights(model, std=0.2)
    return model.eval()


def _batch(vocab: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    tgt = torch.randint(3, vocab, (2, 7), generator=g)
    return src, mask, tgt


CONFIGS = {
    "vanilla": dict(),
    "odd-heads": dict(d_model=30, n_heads=3, n_encoder_layers=1, n_layers=3),
    "pre-ln-gqa": dict(norm_position="pre", n_heads=4, n_kv_heads=2),
}


@pytest.fixture(params=sorted(CONFIGS))
def config(request) -> ModelConfig:
    return transformer_config(**{**dict(vocab_size=41, d_model=32, n_heads=4, d_ff=48, max_positions=32), **CONFIGS[request.param]})


def test_transformer_config_is_the_vanilla_architecture():
    c = transformer_config(100, d_model=64, n_layers=3, n_encoder_layers=2, n_heads=8, d_ff=256, max_positions=128)
    assert (c.kind, c.family, c.positional, c.norm, c.norm_position, c.mlp, c.activation) == (
        "seq2seq", "transformer", "sinusoidal", "layernorm", "post", "plain", "relu",
    )
    assert c.embed_scale == math.sqrt(64) and c.tie_word_embeddings and not c.final_norm
    assert c.decoder_start_token_id == c.bos_token_id == 1 and c.eos_token_ids == [2]
    assert ModelConfig.from_dict(json.loads(c.to_json())) == c


def test_round_trip_save_load_identical_logits(config, tmp_path):
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    with torch.inference_mode():
        expected = model(src, tgt, attention_mask=mask)
    path = save_checkpoint(tmp_path / "tiny.safetensors", model, config, provenance={"test": True})
    lm = playground.load_model(path)
    assert lm.kind == "seq2seq" and lm.config == config
    assert isinstance(lm.model, EncoderDecoderLM)
    got = lm.logits(src, tgt, attention_mask=mask)
    assert torch.equal(got, expected)
    # The folder form too: config.json {"model_type": "transformer", "config": ...} + model.safetensors.
    folder = tmp_path / "folder"
    folder.mkdir()
    (path).rename(folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"model_type": "transformer", "config": config.to_dict()}))
    assert torch.equal(playground.load_model(folder).logits(src, tgt, attention_mask=mask), expected)


def test_incremental_decode_equals_full_forward(config):
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    with torch.inference_mode():
        full = model(src, tgt, attention_mask=mask)
        encoder_out = model.encode(src, mask)
        cache = model.new_cache(batch=2, max_tokens=10)
        steps = [model.decode(tgt[:, :3], encoder_out, mask, cache)]
        steps += [model.decode(tgt[:, t : t + 1], encoder_out, mask, cache) for t in range(3, 7)]
        last = model.decode(tgt[:, :7], encoder_out, mask, last_only=True)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-5, rtol=0)
    assert cache.length == 7 and cache.cross_ready


def test_cache_stats_bytes_are_exact(config):
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    cache = model.new_cache(batch=2, max_tokens=16)
    assert isinstance(cache, Seq2SeqCache)
    assert cache.stats().cross_attention.bytes == 0
    with torch.inference_mode():
        encoder_out = model.encode(src, mask)
        model.decode(tgt[:, :5], encoder_out, mask, cache)
    stats = cache.stats().to_dict()
    c, size = config, 4
    assert stats["tokens"] == 5
    assert stats["bytes"] == 2 * c.n_layers * 2 * c.n_kv_heads * 5 * c.head_dim * size
    assert stats["mha_equivalent_bytes"] == 2 * c.n_layers * 2 * c.n_heads * 5 * c.head_dim * size
    cross = stats["cross_attention"]
    assert (cross["layers"], cross["kv_heads"], cross["head_dim"], cross["tokens"]) == (c.n_layers, c.n_kv_heads, c.head_dim, 9)
    assert cross["bytes"] == 2 * c.n_layers * 2 * c.n_kv_heads * 9 * c.head_dim * size
    json.dumps(stats)


def test_cross_kv_are_computed_once_and_reused():
    config = transformer_config(41, d_model=32, n_heads=4, d_ff=48, max_positions=32)
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    calls = []
    hook = model.decoder.blocks[0].cross.kv.register_forward_hook(lambda *a: calls.append(1))
    try:
        with torch.inference_mode():
            encoder_out = model.encode(src, mask)
            cache = model.new_cache(batch=2, max_tokens=8)
            for t in range(4):
                model.decode(tgt[:, t : t + 1], encoder_out, mask, cache)
    finally:
        hook.remove()
    assert len(calls) == 1


def test_reorder_moves_self_and_cross_rows():
    config = transformer_config(41, d_model=32, n_heads=4, d_ff=48, max_positions=32)
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    with torch.inference_mode():
        encoder_out = model.encode(src, mask)
        cache = model.new_cache(batch=2, max_tokens=8)
        model.decode(tgt[:, :3], encoder_out, mask, cache)
        cache.reorder(torch.tensor([1, 0]))
        swapped = model.decode(tgt[[1, 0], 3:4], encoder_out[[1, 0]], mask[[1, 0]], cache)
        full = model(src, tgt[:, :4], attention_mask=mask)
    torch.testing.assert_close(swapped[:, 0], full[[1, 0], 3], atol=1e-5, rtol=0)


def test_source_padding_is_ignored(config):
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    garbage = src.clone()
    garbage[1, 6:] = 5  # other tokens under the padding must not change anything
    with torch.inference_mode():
        a = model(src, tgt, attention_mask=mask)
        b = model(garbage, tgt, attention_mask=mask)
        short = model(src[1:, :6], tgt[1:])
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    torch.testing.assert_close(a[1:], short, atol=1e-5, rtol=0)


def test_capture_shapes_and_fast_path_agree(config):
    model = _model(config)
    src, mask, tgt = _batch(config.vocab_size)
    recorder = Recorder()
    with torch.inference_mode():
        encoder_out = model.encode(src, mask, recorder=recorder)
        logits = model.decode(tgt, encoder_out, mask, recorder=recorder)
        fast = model(src, tgt, attention_mask=mask)
    h = config.n_heads
    encoder_capture = recorder.layers_of("encoder", config.n_encoder_layers)
    decoder_capture = {kind: recorder.layers_of(kind, config.n_layers) for kind in ("self", "cross")}
    assert [w.shape for w in encoder_capture] == [(2, h, 9, 9)] * config.n_encoder_layers
    assert [w.shape for w in decoder_capture["self"]] == [(2, h, 7, 7)] * config.n_layers
    assert [w.shape for w in decoder_capture["cross"]] == [(2, h, 7, 9)] * config.n_layers
    assert float(decoder_capture["cross"][0][1, :, :, 6:].abs().max()) == 0.0  # padding gets no attention
    assert float(decoder_capture["self"][0].triu(1).abs().max()) == 0.0  # causal
    torch.testing.assert_close(logits, fast, atol=1e-5, rtol=0)


def test_training_path_has_gradients_everywhere():
    config = transformer_config(41, d_model=32, n_heads=4, d_ff=48, max_positions=32)
    torch.manual_seed(0)
    model = build_model(config)
    init_weights(model)
    src, mask, tgt = _batch(config.vocab_size)
    logits = model(src, tgt[:, :-1], attention_mask=mask)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, config.vocab_size), tgt[:, 1:].reshape(-1))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_sinusoidal_layouts():
    paper = sinusoidal_table(10, 6)
    halves = sinusoidal_table(10, 6, layout="halves")
    torch.testing.assert_close(paper[:, 0::2], halves[:, :3])
    torch.testing.assert_close(paper[:, 1::2], halves[:, 3:])
    assert paper[3, 0] == pytest.approx(math.sin(3)) and paper[3, 1] == pytest.approx(math.cos(3))


def test_relative_buckets_match_the_mesh_tensorflow_rule():
    rel = torch.arange(-40, 41)
    bidi = relative_position_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128)
    causal = relative_position_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128)
    assert bidi[40].item() == 0 and bidi[41].item() == 17 and bidi[39].item() == 1  # 0, +1 (after), -1 (before)
    assert causal[41:].eq(0).all()  # future keys all share bucket 0 in the decoder
    assert causal[:41].flip(0)[:16].tolist() == list(range(16))
    assert int(bidi.max()) < 32 and int(causal.max()) < 32


@pytest.mark.parametrize(
    "change, fragment",
    [
        (dict(positional="rope"), "RoPE"),
        (dict(n_encoder_layers=0), "n_encoder_layers"),
        (dict(sinusoidal_layout="diagonal"), "sinusoidal_layout"),
        (dict(kind="decoder"), "n_encoder_layers = 0"),
    ],
)
def test_bad_seq2seq_configs_are_refused(change, fragment):
    with pytest.raises(ConfigError, match=fragment):
        transformer_config(41, d_model=32, n_heads=4, d_ff=48, **change)


def test_too_long_target_is_refused():
    config = transformer_config(41, d_model=32, n_heads=4, d_ff=48, max_positions=8)
    model = _model(config)
    with pytest.raises(ValueError, match="8 positions"):
        model(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 9, dtype=torch.long))
