"""Interventions against transformers on real safetensors files saved by `save_pretrained`: the same
edit made with forward hooks on transformers' model (tests/hf_hooks.py) gives the same logits, and
greedy decoding under Ablate and Steer picks what transformers' `generate()` picks with the hooks, on
every decoder family and on T5 and BART (decoder self- and cross-attention heads, encoder heads)."""

from __future__ import annotations

import json

import pytest
import torch

import playground
from playground.generation import GenerationConfig, SettingsError, generate_all
from playground.interventions import (
    Ablate,
    InterventionError,
    Patch,
    Steer,
    as_interventions,
    from_dict,
    pack,
    unpack,
)
from tests.hf_hooks import hf_edited
from tests.hf_tiny import bart_like, save_decoder, save_seq2seq, t5_like
from tests.library.test_decoder_families import CASES as FAMILY_CASES
from tests.library.test_decoder_parity import CASES as PARITY_CASES

# One case per family and block kind: pre-LN, parallel residual, post-LN, sandwich and output norms.
DECODERS = {
    "gpt2": PARITY_CASES["gpt2-untied-gelu"],
    "llama-gqa-bias": ("llama", PARITY_CASES["llama-odd-head-dim-bias"][1] | {"num_key_value_heads": 2}),
    "mistral-sliding": PARITY_CASES["mistral-sliding-window"],
    "qwen2": PARITY_CASES["qwen2-gqa-bias"],
    **{name: FAMILY_CASES[name] for name in (
        "gpt_neox-parallel-head9", "gpt_neox-sequential-tied", "gpt_neo-local-global-head9", "qwen3-gqa3-head10",
        "gemma3-sliding-local-rope", "phi3-partial-gqa3", "olmo2-gqa3", "opt-pre-ln", "opt-post-ln-projected",
        "smollm3-nope-gqa3",
    )},
}
SEQ2SEQ = {"t5": ("t5", t5_like(num_heads=3, d_kv=10)), "bart": ("bart", bart_like())}
PROMPT = [5, 9, 23, 40, 7, 11]
ATOL = 1e-4


def _vector(d: int, seed: int, norm: float = 1.0) -> torch.Tensor:
    v = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    return v * (norm / v.norm())


def _edit_sets(lm) -> dict[str, tuple]:
    """Edits of every kind on a model; vectors sized to its residual stream's typical norm."""
    c = lm.config
    ids = torch.tensor([PROMPT])
    last = c.n_layers - 1
    return {
        "head": (Ablate(min(1, last), head=c.n_heads - 1),),
        "head-mean": (Ablate(0, head=0, mode="mean", mean=_vector(c.head_dim, 3, 0.5)),),
        "mlp": (Ablate(0, component="mlp"),),
        "mlp-mean": (Ablate(last, component="mlp", mode="mean", mean=_vector(c.d_model, 4)),),
        "steer-last": (Steer(last, _vector(c.d_model, 1, 3.0), scale=-1.5),),
        "patch": (Patch(0, 3, _vector(c.d_model, 2, 4.0)),),
        "all": (Ablate(min(1, last), head=0), Steer(0, _vector(c.d_model, 5, 2.0), scale=1.5),
                Ablate(last, component="mlp"), Patch(last, 2, _vector(c.d_model, 6, 4.0))),
        "ids": ids,
    }


@pytest.fixture(scope="module", params=sorted(DECODERS))
def decoder(request, tmp_path_factory):
    family, kwargs = DECODERS[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs, init_std=0.1)
    return reference, playground.load_model(directory)


@pytest.fixture(scope="module", params=sorted(SEQ2SEQ))
def seq2seq(request, tmp_path_factory):
    family, kwargs = SEQ2SEQ[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    return save_seq2seq(directory, family, kwargs), playground.load_model(directory)


def test_decoder_logits_match_transformers_under_each_edit(decoder, one_thread):
    reference, lm = decoder
    sets = _edit_sets(lm)
    ids = sets.pop("ids")
    plain = lm.logits(ids)
    for name, edits in sets.items():
        ours = lm.logits(ids, interventions=list(edits))
        with torch.no_grad(), hf_edited(reference, edits, head_dim=lm.config.head_dim):
            expected = reference(ids).logits
        torch.testing.assert_close(ours, expected, atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
        assert (ours - plain).abs().max() > 1e-3, f"{name} changed nothing"
        if name == "patch":  # positions before the patched one are untouched
            torch.testing.assert_close(ours[:, :3], plain[:, :3], atol=0, rtol=0)


def test_decoder_greedy_matches_generate_with_hooks(decoder, one_thread):
    reference, lm = decoder
    c = lm.config
    edits = (Ablate(min(1, c.n_layers - 1), head=0), Steer(0, _vector(c.d_model, 7, 3.0), scale=1.0),
             Ablate(c.n_layers - 1, component="mlp"))
    with torch.no_grad(), hf_edited(reference, edits, head_dim=c.head_dim):
        expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False, pad_token_id=0)
    expected = expected[0, len(PROMPT):].tolist()
    plain = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12, top_candidates=0)).token_ids
    for use_cache in (True, False):
        cfg = GenerationConfig(max_new_tokens=12, temperature=0.0, use_cache=use_cache, interventions=edits)
        result = generate_all(lm, PROMPT, cfg)
        assert result.token_ids == expected
        assert result.interventions == [iv.to_dict() for iv in edits]
    assert generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12, top_candidates=0)).token_ids == plain


def test_patched_cached_decoding_equals_the_patched_full_pass(decoder, one_thread):
    """A patch at a prompt position reaches every later step through the cache, as in a full pass."""
    _, lm = decoder
    patch = Patch(0, 2, _vector(lm.config.d_model, 8, 4.0))
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=6, interventions=(patch,), top_candidates=0))
    full = lm.logits(torch.tensor([PROMPT + result.token_ids[:-1]]), interventions=[patch])[0, len(PROMPT) - 1:]
    assert full.argmax(-1).tolist() == result.token_ids


def _s2s_edits(lm) -> dict[str, tuple]:
    c, e = lm.config, lm.config.encoder_config()
    return {
        "self-head": (Ablate(1, head=1),),
        "cross-head": (Ablate(0, head=2, attention="cross"),),
        "encoder-head": (Ablate(1, head=0, stack="encoder"),),
        "mlp": (Ablate(1, component="mlp"),),
        "encoder-mlp-mean": (Ablate(0, component="mlp", stack="encoder", mode="mean", mean=_vector(e.d_model, 9)),),
        "steer": (Steer(1, _vector(c.d_model, 10, 3.0), scale=-2.0),),
        "encoder-steer": (Steer(0, _vector(c.d_model, 11, 3.0), stack="encoder"),),
        "patch": (Patch(0, 2, _vector(c.d_model, 12, 3.0)),),
    }


def test_seq2seq_logits_match_transformers_under_each_edit(seq2seq, one_thread):
    reference, lm = seq2seq
    src = torch.tensor([[5, 9, 23, 40, 7, 11, 30]])
    tgt = torch.tensor([[lm.config.decoder_start_token_id, 8, 14, 3, 22]])
    plain = lm.logits(src, tgt)
    for name, edits in _s2s_edits(lm).items():
        ours = lm.logits(src, tgt, interventions=edits)
        with torch.no_grad(), hf_edited(reference, edits, head_dim=lm.config.head_dim,
                                        encoder_head_dim=lm.config.encoder_head_dim):
            expected = reference(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours, expected, atol=ATOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
        assert (ours - plain).abs().max() > 1e-3, f"{name} changed nothing"


def test_seq2seq_greedy_matches_generate_with_hooks(seq2seq, one_thread):
    reference, lm = seq2seq
    c = lm.config
    edits = (Ablate(0, head=1, attention="cross"), Ablate(1, head=0, stack="encoder"),
             Steer(1, _vector(c.d_model, 13, 3.0), scale=1.0))
    source = [5, 9, 23, 40, 7, 11, 30]
    with torch.no_grad(), hf_edited(reference, edits, head_dim=c.head_dim, encoder_head_dim=c.encoder_head_dim):
        expected = reference.generate(torch.tensor([source]), max_new_tokens=10, do_sample=False)[0, 1:].tolist()
    for use_cache in (True, False):
        cfg = GenerationConfig(max_new_tokens=10, use_cache=use_cache, interventions=edits, top_candidates=0)
        assert generate_all(lm, source, cfg).token_ids == expected


def test_round_trip_and_hashing():
    v = torch.randn(8)
    edits = [Ablate(1, head=2), Ablate(0, component="mlp", mode="mean", mean=v), Steer(0, v, scale=-1.5),
             Patch(3, 4, v, stack="encoder"), Ablate(2, head=1, attention="cross")]
    again = [from_dict(json.loads(json.dumps(iv.to_dict()))) for iv in edits]
    assert again == edits and {hash(iv) for iv in again} == {hash(iv) for iv in edits}
    assert Steer(0, v, scale=2).vector == tuple(float(x) for x in v.double())
    assert as_interventions([iv.to_dict() for iv in edits]) == tuple(edits)
    cfg = GenerationConfig(interventions=[iv.to_dict() for iv in edits]).validate()
    assert cfg.interventions == tuple(edits) and cfg.to_dict()["interventions"][2]["scale"] == -1.5


def test_packed_for_links_round_trips_exactly_and_refuses_garbage():
    v32 = torch.randn(576, generator=torch.Generator().manual_seed(1))
    edits = (Ablate(1, head=2), Steer(3, v32, scale=-1.5), Patch(0, 4, [0.1, 1 / 3, 2.0]),
             Ablate(0, component="mlp", mode="mean", mean=v32))
    text = pack(edits)
    assert unpack(text) == edits and text.isascii() and "/" not in text and "+" not in text
    assert len(text) < 2 * len(json.dumps([iv.to_dict() for iv in edits])) // 3  # smaller than the plain JSON
    assert unpack(pack(())) == ()
    for bad in ("", "not base64!", pack(edits)[:-7], "eJwLycgsVgAAC2YC0w", "x" * 300_000):
        with pytest.raises(InterventionError, match="not readable|type|field"):
            unpack(bad)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: Ablate(1), "head=h"),
        (lambda: Ablate(1, head=2, component="mlp"), "takes no head"),
        (lambda: Ablate(-1, head=0), "non-negative"),
        (lambda: Ablate(0, head=0, mode="mean"), "needs mean="),
        (lambda: Ablate(0, head=0, mean=[1.0]), "mode='mean'"),
        (lambda: Ablate(0, head=0, stack="encoder", attention="cross"), "no cross-attention"),
        (lambda: Steer(0, torch.ones(2, 2)), "1-D"),
        (lambda: Steer(0, [float("nan")]), "NaN"),
        (lambda: Steer(0, [1.0], scale=float("inf")), "finite"),
        (lambda: Patch(0, 1, []), "non-empty"),
        (lambda: from_dict({"type": "steer", "layer": 0, "vector": [1.0], "gain": 2}), "no field 'gain'"),
        (lambda: from_dict({"type": "swap"}), "type"),
    ],
)
def test_bad_interventions_say_what_to_change(make, fragment):
    with pytest.raises(InterventionError, match=fragment.replace("(", r"\(").replace("=", "=")):
        make()


def test_plan_checks_interventions_against_the_model(decoder):
    _, lm = decoder
    c = lm.config
    bad = [
        (Ablate(c.n_layers, head=0), f"layers 0..{c.n_layers - 1}"),
        (Ablate(0, head=c.n_heads), f"heads 0..{c.n_heads - 1}"),
        (Steer(0, torch.ones(c.d_model + 1)), f"d_model = {c.d_model}"),
        (Ablate(0, head=0, attention="cross"), "no cross-attention"),
        (Patch(0, 0, torch.ones(c.d_model), stack="encoder"), "no encoder"),
        (Ablate(0, head=0, mode="mean", mean=torch.ones(c.head_dim + 1)), "outputs"),
    ]
    for iv, fragment in bad:
        with pytest.raises(SettingsError, match=fragment):
            generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=2, interventions=(iv,)))
        with pytest.raises(InterventionError, match=fragment):
            lm.logits(torch.tensor([PROMPT]), interventions=[iv])


def test_no_hooks_remain_after_an_edited_pass(decoder):
    _, lm = decoder
    lm.logits(torch.tensor([PROMPT]), interventions=[Ablate(0, head=0), Steer(0, torch.ones(lm.config.d_model))])
    hooked = [name for name, m in lm.model.named_modules()
              if m._forward_hooks or m._forward_pre_hooks or m._forward_hooks_with_kwargs]
    assert hooked == []


def test_beam_search_under_edits_matches_generate_with_hooks(decoder, one_thread):
    reference, lm = decoder
    c = lm.config
    edits = (Ablate(0, head=c.n_heads - 1), Steer(c.n_layers - 1, _vector(c.d_model, 14, 2.0), scale=1.0))
    with torch.no_grad(), hf_edited(reference, edits, head_dim=c.head_dim):
        expected = reference.generate(torch.tensor([PROMPT]), max_new_tokens=8, num_beams=3, do_sample=False,
                                      pad_token_id=0, length_penalty=1.0, early_stopping=False)
    cfg = GenerationConfig(max_new_tokens=8, num_beams=3, interventions=edits, top_candidates=0)
    assert generate_all(lm, PROMPT, cfg).token_ids == expected[0, len(PROMPT):].tolist()


def test_the_app_drops_edits_that_do_not_fit_with_a_note(decoder):
    from playground.app.limits import clamp_settings

    _, lm = decoder
    fits = (Ablate(0, head=0),)
    cfg, notes = clamp_settings(GenerationConfig(interventions=fits), lm, len(PROMPT))
    assert cfg.interventions == fits and not any("interventions" in n for n in notes)
    cfg, notes = clamp_settings(GenerationConfig(interventions=(Ablate(99, head=0),)), lm, len(PROMPT))
    assert cfg.interventions == () and any("layer 99 does not exist" in n for n in notes)
