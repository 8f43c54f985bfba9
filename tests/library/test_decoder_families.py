"""The decoder families of issue 15 against transformers on real safetensors files saved by
`save_pretrained`: logits, attention maps, cached decoding past the sliding window, greedy, seeded
sampling (same tokens, same distribution at every step) and beam search pick what `generate()` picks.

Sizes are unusual on purpose: head dims of 9 and 10, GQA 3:1, untied heads, partial rotary, NoPE
layers, sliding windows (5) shorter than the sequences (up to 26 positions).
"""

from __future__ import annotations

import json

import pytest
import torch

import playground
from playground.app import describe
from playground.generation import GenerationConfig, generate, generate_all
from playground.models.positional import positional_layout
from playground.models.recorder import Recorder
from tests.hf_tiny import gemma3_like, llama_like, neo_like, neox_like, opt_like, save_decoder

GQA_3_1 = dict(num_attention_heads=6, num_key_value_heads=2)
CASES = {
    # name: (model_type, transformers config kwargs)
    "gpt_neox-parallel-head9": ("gpt_neox", neox_like(hidden_size=36, rotary_pct=0.5)),  # 4 of 9 dims rotate
    "gpt_neox-sequential-tied": (
        "gpt_neox", neox_like(use_parallel_residual=False, attention_bias=False, tie_word_embeddings=True),
    ),
    "gpt_neo-local-global-head9": ("gpt_neo", neo_like(num_heads=4)),
    "qwen3-gqa3-head10": ("qwen3", llama_like(hidden_size=36, head_dim=10, **GQA_3_1)),
    "gemma3-sliding-local-rope": ("gemma3_text", gemma3_like()),
    "phi3-partial-gqa3": ("phi3", llama_like(partial_rotary_factor=0.5, **GQA_3_1)),
    "phi3-longrope-window": (
        "phi3",
        llama_like(
            num_attention_heads=4, num_key_value_heads=4, sliding_window=7, max_position_embeddings=64,
            original_max_position_embeddings=16, tie_word_embeddings=True,
            rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.4],
                          "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0]},
        ),
    ),
    "olmo2-gqa3": ("olmo2", llama_like(**GQA_3_1)),
    "opt-pre-ln": ("opt", opt_like()),
    "opt-post-ln-projected": ("opt", opt_like(do_layer_norm_before=False, word_embed_proj_dim=24, num_attention_heads=3)),
    "smollm3-nope-gqa3": ("smollm3", llama_like(num_hidden_layers=4, tie_word_embeddings=False, **GQA_3_1)),
}
PROMPT = [5, 9, 23, 40, 7, 11]
BEAMS = [
    # num_beams, length_penalty, early_stopping
    (3, 0.6, True),
    (3, 1.5, False),
    (4, 0.6, False),
    (4, 1.5, True),
]


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    family, kwargs = CASES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs, init_std=0.1)
    return reference, playground.load_model(directory)


def _ids(seed: int, length: int = 17) -> torch.Tensor:
    return torch.randint(3, 97, (2, length), generator=torch.Generator().manual_seed(seed))


def test_logits_match_transformers(pair, one_thread):
    reference, ours = pair
    ids = _ids(1, 26)  # longer than every window here; past phi3-longrope's original context of 16
    with torch.no_grad():
        expected = reference(ids).logits
    got = ours.logits(ids)
    assert got.shape == expected.shape and ours.config.family == reference.config.model_type
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_each_layer_attends_with_its_own_mask(pair, one_thread):
    """Recorded attention equals transformers' eager attention weights, layer by layer: sliding
    layers see only their window, global ones everything before them."""
    reference, ours = pair
    ids = _ids(2)
    with torch.no_grad():
        expected = reference(ids, output_attentions=True).attentions
        recorder = Recorder()
        logits = ours.model(ids, recorder=recorder)
        fast = ours.model(ids)
    captured = recorder.layers_of("self", ours.config.n_layers)
    for kind, ours_layer, theirs in zip(ours.config.layer_kinds(), captured, expected):
        torch.testing.assert_close(ours_layer, theirs, atol=1e-5, rtol=0)
        T = ids.shape[1]
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        band = (j <= i) & (j > i - kind.window) if kind.window is not None else j <= i
        assert torch.equal(ours_layer[0, 0] > 0, band) and (kind.window is None or kind.window < T)
    torch.testing.assert_close(logits, fast, atol=1e-5, rtol=0)


def test_cached_decoding_matches_full_recompute_past_the_window(pair, one_thread):
    _, ours = pair
    # Longrope switches tables past its original context, where generation re-encodes everything
    # (as transformers does): the cache alone matches a full pass up to there.
    switch = ours.model.rope.switch_after if ours.model.rope is not None else None
    length = 20 if switch is None else switch
    assert switch is None or ours.model.reencodes_at(switch, 1) and not ours.model.reencodes_at(switch + 1, 1)
    ids = _ids(3, length)
    with torch.no_grad():
        full = ours.model(ids)
        cache = ours.model.new_cache(batch=2, max_tokens=22)
        prefix = ours.model(ids[:, :7], cache=cache)
        steps = [ours.model(ids[:, t : t + 1], cache=cache) for t in range(7, 11)]
        # the ordered path a recorder takes through a wrapped sliding-window cache
        recorder = Recorder()
        steps += [ours.model(ids[:, t : t + 1], cache=cache, recorder=recorder) for t in range(11, 13)]
        steps.append(ours.model(ids[:, 13:], cache=cache))  # a chunk of several tokens after the ring wrapped
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == length
    assert recorder.layers_of("self", ours.config.n_layers)[0].shape == (2, ours.config.n_heads, 1, 13)


def _hf_generate(reference, n_new: int, **kwargs):
    with torch.no_grad():
        return reference.generate(torch.tensor([PROMPT]), max_new_tokens=n_new, pad_token_id=0, **kwargs)


def test_greedy_matches_transformers(pair, one_thread):
    reference, lm = pair
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=20, top_candidates=0))
    expected = _hf_generate(reference, 20, do_sample=False)[0, len(PROMPT):].tolist()
    assert result.token_ids == expected and len(expected) == 20
    uncached = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=20, top_candidates=0, use_cache=False))
    assert uncached.token_ids == expected


def test_sampling_matches_transformers_step_by_step(pair, one_thread):
    """Same seed, same tokens; and at every step the same distribution after repetition penalty,
    temperature, top-k and top-p (within 1e-6), read from generate(output_scores=True)."""
    reference, lm = pair
    vocab = lm.config.vocab_size
    knobs = dict(temperature=1.3, top_k=40, top_p=0.9, repetition_penalty=1.2)
    torch.manual_seed(11)
    out = _hf_generate(reference, 16, do_sample=True, return_dict_in_generate=True, output_scores=True, **knobs)
    expected = out.sequences[0, len(PROMPT):].tolist()
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=16, seed=11, top_candidates=vocab, **knobs))
    assert result.token_ids == expected
    for event, scores in zip(result.steps, out.scores):
        ours = torch.zeros(vocab)
        for candidate in event.candidates:
            ours[candidate.token_id] = candidate.prob_final
        torch.testing.assert_close(ours, torch.softmax(scores[0], dim=-1), atol=1e-6, rtol=0)


@pytest.mark.parametrize("num_beams,length_penalty,early_stopping", BEAMS)
def test_beam_search_matches_transformers(pair, num_beams, length_penalty, early_stopping, one_thread):
    reference, lm = pair
    cfg = GenerationConfig(max_new_tokens=12, num_beams=num_beams, length_penalty=length_penalty,
                           early_stopping=early_stopping, top_candidates=0)
    # A token the best beam produces mid-way becomes the end-of-sequence token, so hypotheses finish early.
    eos = generate_all(lm, PROMPT, cfg).sequences[0].token_ids[3]
    saved = lm.config.eos_token_id
    lm.config.eos_token_id = eos
    try:
        result = generate_all(lm, PROMPT, cfg)
    finally:
        lm.config.eos_token_id = saved
    out = _hf_generate(
        reference, 12, do_sample=False, num_beams=num_beams, num_return_sequences=num_beams,
        length_penalty=length_penalty, early_stopping=early_stopping, eos_token_id=eos,
        return_dict_in_generate=True, output_scores=True,
    )
    lengths = (out.beam_indices + 1).bool().sum(dim=1).tolist()
    expected = [row[len(PROMPT) : len(PROMPT) + n].tolist() for row, n in zip(out.sequences, lengths)]
    assert [s.token_ids for s in result.sequences] == expected
    torch.testing.assert_close(
        torch.tensor([s.score for s in result.sequences]), out.sequences_scores, atol=1e-4, rtol=0
    )
    assert any(b.finished and b.token_ids[-1] == eos for e in result.steps for b in e.beams)


# --- what the panels read: per-layer kinds, the model card, cache statistics, positional layout --


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (reference, ours) for the cases the data tests read."""
    out = {}
    for name in ("gemma3-sliding-local-rope", "smollm3-nope-gqa3", "gpt_neox-parallel-head9"):
        family, kwargs = CASES[name]
        directory = tmp_path_factory.mktemp(name)
        out[name] = (save_decoder(directory, family, kwargs, init_std=0.1), playground.load_model(directory))
    return out


def test_cache_stats_count_what_each_layer_holds(models, one_thread):
    """Gemma-style: two sliding layers keep their last 5 positions, the global one keeps all."""
    _, lm = models["gemma3-sliding-local-rope"]
    c = lm.config
    per_position = 2 * c.n_kv_heads * c.head_dim * 4  # one layer, one row, float32
    events = list(generate(lm, PROMPT, GenerationConfig(max_new_tokens=8, top_candidates=0)))
    for k, event in enumerate(events):
        cache, tokens = event.cache, len(PROMPT) + k
        kept = [min(tokens, 5), min(tokens, 5), tokens]
        assert cache["tokens"] == tokens and cache["sliding_layers"] == 2
        assert [layer["tokens"] for layer in cache["per_layer"]] == kept
        assert [layer["window"] for layer in cache["per_layer"]] == [5, 5, None]
        assert [layer["attention"] for layer in cache["per_layer"]] == ["sliding", "sliding", "full"]
        assert [layer["k_shape"] for layer in cache["per_layer"]] == [[1, 1, n, 10] for n in kept]
        assert cache["bytes"] == per_position * sum(kept) == sum(layer["bytes"] for layer in cache["per_layer"])
        assert cache["allocated_bytes"] == per_position * (5 + 5 + len(PROMPT) + 8)
        assert cache["mha_equivalent_bytes"] == cache["bytes"] * 3
    # and the buffers really are that small
    cache = lm.model.new_cache(batch=1, max_tokens=100)
    assert [tuple(k.shape) for k in cache.keys] == [(1, 1, 5, 10), (1, 1, 5, 10), (1, 1, 100, 10)]
    beam = next(iter(generate(lm, PROMPT, GenerationConfig(max_new_tokens=4, num_beams=3, top_candidates=0))))
    assert beam.cache["bytes"] == 3 * per_position * (5 + 5 + len(PROMPT))
    off = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=2, use_cache=False, top_candidates=0)).cache
    assert off["bytes"] == 0 and [layer["window"] for layer in off["per_layer"]] == [5, 5, None]


def test_model_card_lists_layer_kinds(models):
    _, gemma = models["gemma3-sliding-local-rope"]
    info = json.loads(json.dumps(gemma.info()))  # the library returns data; the card puts it in words
    assert describe.layer_summary(gemma.config) == "2 sliding (window 5, RoPE base 10000) + 1 full (RoPE base 1e+06)"
    assert info["block"] == "sandwich" and describe.block_label(gemma.config).startswith("sandwich norms")
    assert describe.card_info(gemma)["layer_summary"] == describe.layer_summary(gemma.config)
    assert [(k["attention"], k["window"], k["rope"], k["rope_theta"]) for k in info["layers"]] == [
        ("sliding", 5, "local", 10000.0), ("sliding", 5, "local", 10000.0), ("full", None, "global", 1e6),
    ]
    _, smol = models["smollm3-nope-gqa3"]
    assert describe.layer_summary(smol.config) == "3 full (RoPE base 2e+06) + 1 full (no RoPE)"
    assert [k.rope for k in smol.config.layer_kinds()] == ["global", "global", "global", None]
    _, neox = models["gpt_neox-parallel-head9"]
    assert describe.layer_summary(neox.config) == "2 full (RoPE base 10000, 4 of 9 dims rotate)"
    assert neox.info()["block"] == "parallel" and describe.block_label(neox.config).startswith("parallel residual")


def test_positional_layout_is_what_the_model_uses(models):
    reference, gemma = models["gemma3-sliding-local-rope"]
    layout = json.loads(json.dumps(positional_layout(gemma.config)))
    rotary = reference.model.rotary_emb
    assert layout["tables"]["local"]["layers"] == [0, 1] and layout["tables"]["global"]["layers"] == [2]
    assert (layout["tables"]["local"]["base"], layout["tables"]["global"]["base"]) == (10000.0, 1e6)
    torch.testing.assert_close(torch.tensor(layout["tables"]["local"]["inv_freq"]).float(), rotary.sliding_attention_inv_freq)
    torch.testing.assert_close(torch.tensor(layout["tables"]["global"]["inv_freq"]).float(), rotary.full_attention_inv_freq)
    assert layout["nope_layers"] == [] and layout["pass_through_dims"] == []

    reference, neox = models["gpt_neox-parallel-head9"]
    layout = positional_layout(neox.config)
    assert (layout["head_dim"], layout["rotary_dims"]) == (9, 4)
    assert layout["rotary_pairs"] == [[0, 2], [1, 3]] and layout["pass_through_dims"] == [4, 5, 6, 7, 8]
    torch.testing.assert_close(torch.tensor(layout["tables"]["global"]["inv_freq"]).float(), reference.gpt_neox.rotary_emb.inv_freq)

    _, smol = models["smollm3-nope-gqa3"]
    layout = positional_layout(smol.config)
    assert layout["nope_layers"] == [3] and layout["tables"]["global"]["layers"] == [0, 1, 2]
    assert "local" not in layout["tables"]
