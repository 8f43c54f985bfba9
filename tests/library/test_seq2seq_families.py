"""The BART family beyond BART (mBART, Pegasus, M2M100 / NLLB) and encoder/decoder asymmetry in BART,
Marian and T5, against transformers on real safetensors files written by `save_pretrained`: logits
(right padding by mask, left padding by pad tokens), captured attention of each stack, cached
decoding, what `info()` and the cache stats say about each stack, and the positional tables."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

import playground
from playground.checkpoints.families.transformer import transformer_config
from playground.checkpoints.own_format import save_checkpoint
from playground.config import ModelConfig
from playground.errors import ConfigError
from playground.generation import GenerationConfig, generate
from playground.models import build_model
from playground.models.layers import init_weights
from playground.models.positional import position_vectors
from playground.models.recorder import Recorder
from tests.hf_tiny import bart_like, m2m_like, marian_like, mbart_like, pegasus_like, save_seq2seq, t5_like

transformers.logging.set_verbosity_error()

LANG = 57  # a target-language code token of the tiny vocabulary (61 tokens)

# name: family, HF config kwargs, save_seq2seq options, extra generate() kwargs (forced target language)
CASES = {
    "bart-distil-12-6-like": (
        "bart", bart_like(encoder_layers=3, decoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=40,
                          decoder_ffn_dim=24), {}, {},
    ),
    "bart-odd-heads-untied": (
        "bart", bart_like(d_model=30, encoder_attention_heads=5, decoder_attention_heads=3), {"untied_head": True}, {},
    ),
    "marian-asym": (
        "marian", marian_like(d_model=27, encoder_layers=1, decoder_layers=2, encoder_attention_heads=9,
                              decoder_attention_heads=3, encoder_ffn_dim=20), {}, {},
    ),
    "t5-3-1-layers-d_kv-7": (
        "t5", t5_like(num_layers=3, num_decoder_layers=1, num_heads=3, d_kv=7, feed_forward_proj="gated-gelu",
                      tie_word_embeddings=False), {"untied_head": True}, {},
    ),
    "mbart-50": (
        "mbart", mbart_like(encoder_layers=3, decoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=40),
        {}, {"forced_bos_token_id": LANG},
    ),
    "mbart-cc25-untied": (
        "mbart", mbart_like(d_model=30, encoder_attention_heads=3, decoder_attention_heads=5, decoder_start_token_id=58,
                            scale_embedding=False), {"untied_head": True}, {},
    ),
    "pegasus": (
        "pegasus", pegasus_like(d_model=30, encoder_attention_heads=5, decoder_attention_heads=3, decoder_ffn_dim=20,
                                decoder_layers=3), {}, {},
    ),
    "pegasus-odd-width": (
        "pegasus", pegasus_like(d_model=27, encoder_attention_heads=3, decoder_attention_heads=9, scale_embedding=False),
        {}, {},
    ),
    "m2m100": (
        "m2m_100", m2m_like(d_model=30, encoder_attention_heads=5, decoder_attention_heads=3, decoder_ffn_dim=20),
        {}, {"forced_bos_token_id": LANG},
    ),
    "nllb-odd-width-pad-3": (
        "m2m_100", m2m_like(d_model=27, encoder_layers=1, decoder_layers=2, encoder_attention_heads=9,
                            decoder_attention_heads=3, pad_token_id=3),
        {"untied_head": True}, {"forced_bos_token_id": LANG},
    ),
}


def build_pair(name: str, directory) -> tuple[torch.nn.Module, playground.LoadedModel]:
    family, kwargs, options, _ = CASES[name]
    reference = save_seq2seq(directory, family, kwargs, init_std=0.1 if family == "t5" else 0.2, **options)
    return reference, playground.load_model(directory)


SINUSOIDAL = [name for name, case in sorted(CASES.items()) if case[0] in ("marian", "pegasus", "m2m_100")]
FAIRSEQ = [name for name, case in sorted(CASES.items()) if case[0] == "m2m_100"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Each case's (transformers reference, our model), built once per module when first asked for."""
    built: dict[str, tuple] = {}

    def get(name: str) -> tuple[torch.nn.Module, playground.LoadedModel]:
        if name not in built:
            built[name] = build_pair(name, tmp_path_factory.mktemp(name))
        return built[name]

    return get


@pytest.fixture(params=sorted(CASES))
def pair(request, pairs):
    return pairs(request.param)


def _batch(lm: playground.LoadedModel, seed: int, *, left_pad: bool = False):
    """Two sources (the second padded) and two targets of ids that are not the pad token."""
    c = lm.config
    g = torch.Generator().manual_seed(seed)
    ordinary = torch.tensor([i for i in range(3, c.vocab_size) if i not in (c.pad_token_id, *c.eos_token_ids)])
    src = ordinary[torch.randint(len(ordinary), (2, 11), generator=g)]
    tgt = ordinary[torch.randint(len(ordinary), (2, 8), generator=g)]
    mask = torch.ones(2, 11, dtype=torch.long)
    if left_pad:  # as a tokenizer pads on the left: pad ids in the input, zeros in the mask
        src[1, :4] = c.pad_token_id
        mask[1, :4] = 0
    else:
        mask[1, 7:] = 0
    return src, mask, tgt


@pytest.mark.parametrize("left_pad", [False, True])
def test_logits_match_transformers(pair, left_pad):
    reference, lm = pair
    src, mask, tgt = _batch(lm, 1, left_pad=left_pad)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    got = lm.logits(src, tgt, attention_mask=mask)
    assert got.shape == expected.shape == (2, 8, lm.config.vocab_size)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_each_stack_is_built_with_its_own_shapes(pair):
    reference, lm = pair
    hf, c, info = reference.config, lm.config, lm.info()
    if c.family == "t5":
        encoder = dict(layers=hf.num_layers, heads=hf.num_heads, d_ff=hf.d_ff, head_dim=hf.d_kv)
        decoder = dict(layers=hf.num_decoder_layers, heads=hf.num_heads, d_ff=hf.d_ff, head_dim=hf.d_kv)
    else:
        encoder = dict(layers=hf.encoder_layers, heads=hf.encoder_attention_heads, d_ff=hf.encoder_ffn_dim,
                       head_dim=hf.d_model // hf.encoder_attention_heads)
        decoder = dict(layers=hf.decoder_layers, heads=hf.decoder_attention_heads, d_ff=hf.decoder_ffn_dim,
                       head_dim=hf.d_model // hf.decoder_attention_heads)
    for stack, expected in (("encoder", encoder), ("decoder", decoder)):
        assert {k: info[stack][k] for k in expected} == expected, stack
        assert info[stack]["kv_heads"] == expected["heads"] and info[stack]["attention"] == "MHA"
    assert info["symmetric"] is False  # every case differs somewhere
    assert (c.n_encoder_layers, c.n_encoder_heads, c.encoder_d_ff) == (encoder["layers"], encoder["heads"], encoder["d_ff"])
    assert (c.n_layers, c.n_heads, c.d_ff) == (decoder["layers"], decoder["heads"], decoder["d_ff"])
    enc_attn, dec_attn = lm.model.encoder.blocks[0].attn, lm.model.decoder.blocks[0].attn
    assert (enc_attn.n_heads, enc_attn.head_dim) == (encoder["heads"], encoder["head_dim"])
    assert (dec_attn.n_heads, dec_attn.head_dim) == (decoder["heads"], decoder["head_dim"])
    assert ModelConfig.from_dict(json.loads(c.to_json())) == c
    assert all(not type(m).__module__.startswith("transformers") for m in lm.model.modules())


def test_captured_attention_of_each_stack_matches_eager_output_attentions(pair):
    reference, lm = pair
    src, mask, tgt = _batch(lm, 2)
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, output_attentions=True)
        recorder = Recorder()
        encoder_out = lm.model.encode(src, mask, recorder=recorder)
        lm.model.decode(tgt, encoder_out, mask, recorder=recorder)
    c = lm.config
    for kind, layers, theirs in (
        ("encoder", c.n_encoder_layers, expected.encoder_attentions),
        ("self", c.n_layers, expected.decoder_attentions),
        ("cross", c.n_layers, expected.cross_attentions),
    ):
        ours = recorder.layers_of(kind, layers)
        assert len(ours) == len(theirs) == layers, kind
        for got, want in zip(ours, theirs):
            assert got.shape == want.shape, kind
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert expected.encoder_attentions[0].shape[1] == c.n_encoder_heads
    assert expected.cross_attentions[0].shape[1] == c.n_heads


def test_cached_decoding_equals_full_recompute(pair):
    _, lm = pair
    src, mask, tgt = _batch(lm, 3)
    model = lm.model
    with torch.inference_mode():
        full = model(src, tgt, attention_mask=mask)
        encoder_out = model.encode(src, mask)
        cache = model.new_cache(batch=2, max_tokens=8)
        steps = [model.decode(tgt[:, :3], encoder_out, mask, cache)]
        steps += [model.decode(tgt[:, t : t + 1], encoder_out, mask, cache) for t in range(3, 8)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    c = lm.config
    stats = cache.stats().to_dict()
    assert stats["bytes"] == 2 * c.n_layers * 2 * c.n_kv_heads * 8 * c.head_dim * 4
    cross = stats["cross_attention"]
    assert (cross["layers"], cross["kv_heads"], cross["head_dim"], cross["tokens"]) == (c.n_layers, c.n_heads, c.head_dim, 11)
    assert cross["bytes"] == cross["mha_equivalent_bytes"] == 2 * c.n_layers * 2 * c.n_kv_heads * 11 * c.head_dim * 4
    assert len(cross["per_layer"]) == c.n_layers


def test_generation_cache_stats_count_the_decoder_only(pair):
    """The encoder caches nothing: self and cross K/V have the decoder's layers, heads and head size."""
    _, lm = pair
    c, source = lm.config, [5, 9, 23, 40, 7]
    for use_cache in (True, False):
        events = list(generate(lm, source, GenerationConfig(max_new_tokens=3, use_cache=use_cache)))
        for k, event in enumerate(events):
            cache, cross = event.cache, event.cache["cross_attention"]
            assert (cache["layers"], cache["kv_heads"], cache["query_heads"], cache["head_dim"]) == (
                c.n_layers, c.n_kv_heads, c.n_heads, c.head_dim)
            tokens = 1 + k if use_cache else 0
            assert cache["bytes"] == 2 * c.n_layers * c.n_kv_heads * tokens * c.head_dim * 4
            assert (cross["layers"], cross["kv_heads"], cross["head_dim"], cross["tokens"]) == (
                c.n_layers, c.n_kv_heads, c.head_dim, len(source))
            assert cross["bytes"] == (2 * c.n_layers * c.n_kv_heads * len(source) * c.head_dim * 4 if use_cache else 0)


@pytest.mark.parametrize("name", SINUSOIDAL)
def test_position_vectors_are_what_the_model_adds(pairs, name):
    """What the positional panel plots (`position_vectors`) is transformers' table at positions 0..11."""
    reference, lm = pairs(name)
    c, length = lm.config, 12
    encoder = reference.get_encoder()
    ids = torch.full((1, length), c.eos_token_ids[0])  # no padding: positions 0..length-1
    with torch.no_grad():
        if c.sinusoidal_layout == "fairseq":
            theirs = encoder.embed_positions(ids, None)[0]  # M2M100: rows pad + 1 ...
        else:
            theirs = encoder.embed_positions(ids.shape)  # Marian / Pegasus: sin half | cos half from row 0
    ours = position_vectors(c, length)
    assert ours.shape == (length, c.d_model)
    torch.testing.assert_close(ours, theirs.float(), atol=1e-6, rtol=0)
    torch.testing.assert_close(lm.model.encoder.positions(0, length), ours, atol=0, rtol=0)


@pytest.mark.parametrize("name", FAIRSEQ)
def test_m2m_positions_skip_padding_tokens(pairs, name):
    """fairseq counts positions over non-padding tokens: a left-padded source reads exactly as the
    same source without padding, and a pad token inside the target takes no position."""
    reference, lm = pairs(name)
    src, mask, tgt = _batch(lm, 4, left_pad=True)
    padded = lm.logits(src, tgt, attention_mask=mask)
    alone = lm.logits(src[1:, 4:], tgt[1:])
    torch.testing.assert_close(padded[1:], alone, atol=1e-5, rtol=0)
    tgt[:, 3] = lm.config.pad_token_id
    with torch.no_grad():
        expected = reference(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(lm.logits(src, tgt, attention_mask=mask), expected, atol=1e-4, rtol=0)


# --- files that transformers would read differently from what we build -------------------------


def test_embedding_copies_are_used_only_when_equal_to_the_shared_one(tmp_path):
    """transformers unties a file's encoder/decoder embed_tokens that differ from shared.weight and
    uses them: equal copies load (with parity), a distinct one is refused by name."""
    from safetensors.torch import load_file, save_file

    save_seq2seq(tmp_path, "bart", bart_like())
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    for stack in ("encoder", "decoder"):
        tensors[f"model.{stack}.embed_tokens.weight"] = tensors["model.shared.weight"].clone()
    save_file(tensors, path, metadata={"format": "pt"})
    reference = transformers.BartForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager")
    src, tgt = torch.tensor([[5, 9, 23, 40]]), torch.tensor([[2, 7, 8]])
    with torch.no_grad():
        expected = reference(input_ids=src, decoder_input_ids=tgt).logits
    torch.testing.assert_close(playground.load_model(tmp_path).logits(src, tgt), expected, atol=1e-4, rtol=0)
    tensors["model.decoder.embed_tokens.weight"] = tensors["model.shared.weight"] + 0.5
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(playground.CheckpointError, match="model.decoder.embed_tokens.weight differs from model.shared"):
        playground.load_model(tmp_path)


@pytest.mark.parametrize("family, kwargs", [("pegasus", pegasus_like()), ("marian", marian_like())])
def test_stored_sinusoidal_tables_must_be_the_computed_ones(tmp_path, family, kwargs):
    """Pegasus files store their tables and transformers reads them: the real table loads, another is refused."""
    from safetensors.torch import load_file, save_file

    reference = save_seq2seq(tmp_path, family, kwargs)
    path = tmp_path / "model.safetensors"
    tensors = load_file(path)
    name = "model.encoder.embed_positions.weight"
    tensors[name] = reference.get_encoder().embed_positions.weight.detach().clone()  # Marian's files omit it
    save_file(tensors, path, metadata={"format": "pt"})
    assert playground.load_model(tmp_path).config.family == family
    tensors[name][5, 3] += 0.01
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(playground.CheckpointError, match=f"{name} is not the sinusoidal table"):
        playground.load_model(tmp_path)


# --- our own encoder-decoder: grouped-query attention with an encoder of its own shape ------------


def test_own_format_asymmetric_gqa_round_trip_and_cache(tmp_path):
    config = transformer_config(
        41, d_model=36, n_layers=2, n_encoder_layers=3, n_heads=6, n_kv_heads=2, d_ff=40, max_positions=32,
        n_encoder_heads=4, n_encoder_kv_heads=1, encoder_d_ff=72,
    )
    assert (config.encoder_head_dim, config.head_dim) == (9, 6) and not config.symmetric
    assert config.encoder_config().attention_kind == "MQA" and config.attention_kind.startswith("GQA")
    torch.manual_seed(0)
    model = build_model(config)
    init_weights(model, std=0.2)
    model.eval()
    g = torch.Generator().manual_seed(5)
    src, tgt = torch.randint(3, 41, (2, 9), generator=g), torch.randint(3, 41, (2, 6), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 6:] = 0
    lm = playground.load_model(save_checkpoint(tmp_path / "asym.safetensors", model, config))
    assert lm.config == config
    assert lm.model.encoder.blocks[0].attn.qkv.weight.shape == (36, 4 * 9 + 2 * 9)
    assert lm.model.encoder.blocks[0].mlp.fc1.weight.shape == (36, 72)
    with torch.inference_mode():
        full = model(src, tgt, attention_mask=mask)
        encoder_out = lm.model.encode(src, mask)
        cache = lm.model.new_cache(batch=2, max_tokens=6)
        steps = [lm.model.decode(tgt[:, t : t + 1], encoder_out, mask, cache) for t in range(6)]
    torch.testing.assert_close(lm.logits(src, tgt, attention_mask=mask), full, atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    stats = cache.stats().to_dict()
    assert stats["bytes"] == 2 * 2 * 2 * 2 * 6 * 6 * 4 and stats["mha_equivalent_bytes"] == 3 * stats["bytes"]
    cross = stats["cross_attention"]
    assert (cross["kv_heads"], cross["query_heads"], cross["head_dim"]) == (2, 6, 6)
    assert cross["mha_equivalent_bytes"] == 3 * cross["bytes"] == 3 * 2 * 2 * 2 * 2 * 9 * 6 * 4
    info = lm.info()
    assert info["encoder"] == dict(layers=3, heads=4, kv_heads=1, head_dim=9, d_ff=72, attention="MQA")
    assert info["decoder"]["kv_heads"] == 2 and info["decoder"]["layers"] == 2


def test_symmetric_models_keep_one_shape():
    config = transformer_config(41, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48)
    assert config.symmetric and config.encoder_config() is config
    assert (config.n_encoder_heads, config.n_encoder_kv_heads, config.encoder_head_dim, config.encoder_d_ff) == (4, 2, 8, 48)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (dict(n_encoder_heads=5), "n_encoder_heads"),
        (dict(n_encoder_heads=4, n_encoder_kv_heads=3), "n_encoder_kv_heads"),
        (dict(encoder_d_ff=0), "encoder_d_ff"),
        (dict(encoder_head_dim=-2), "encoder_head_dim"),
        (dict(n_encoder_heads="4"), "n_encoder_heads"),
        (dict(positional="sinusoidal", sinusoidal_layout="fairseq", pad_token_id=None), "pad_token_id"),
    ],
)
def test_bad_encoder_fields_are_refused_by_name(change, fragment):
    with pytest.raises(ConfigError, match=fragment):
        transformer_config(41, d_model=32, n_heads=4, d_ff=48, **change)


def test_decoder_configs_have_no_encoder_fields():
    with pytest.raises(ConfigError, match="n_encoder_heads"):
        ModelConfig(family="llama", vocab_size=31, d_model=16, n_layers=1, n_heads=2, d_ff=24, n_encoder_heads=2)
