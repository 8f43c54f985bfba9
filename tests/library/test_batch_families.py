"""The shared batch on every supported family: a request's tokens never depend on who else decodes.

For each decoder type and each encoder-decoder family (tiny random checkpoints saved by transformers),
a greedy request that captures attention and the residual stream, a beam search, a request with edits (an
ablated head, a steered and a patched block; on an encoder-decoder also a cross-attention head and the encoder)
and a sampled one decode side by side, in the same passes. Each equals:
- its run alone through the batch-invariant kernels (`run_alone(invariant=True)`): bitwise, captures
  and cache statistics included;
- `playground.generate_all`: the same token ids, probabilities within 1e-5 (float32);
- its run alone as the server runs it (the model's own pass): the same tokens, probabilities within 1e-5.
The prompts are longer than every sliding window here, so ring caches wrap while rows share a pass.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import transformers

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler, run_alone
from playground.generation.plan import plan
from playground.interventions import Ablate, Patch, Steer
from tests.hf_tiny import (
    bart_like,
    gemma3_like,
    gpt2_like,
    llama_like,
    m2m_like,
    marian_like,
    mbart_like,
    neo_like,
    neox_like,
    opt_like,
    pegasus_like,
    save_decoder,
    save_seq2seq,
    t5_like,
)
from tests.library.test_batch import _assert_equal_runs, decoded_together

transformers.logging.set_verbosity_error()

# Widths are multiples of 16 as real models' are (row-wise vector code then treats every row alike);
# each case keeps its family's quirk: GQA, windows shorter than the prompt, partial rotary, NoPE layers...
GQA = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=97)
DECODERS = {
    "llama-gqa": ("llama", llama_like(**GQA)),
    "gpt2": ("gpt2", gpt2_like(n_embd=64)),
    "mistral-window": ("mistral", llama_like(**GQA, sliding_window=5)),
    "qwen2-bias": ("qwen2", llama_like(**GQA)),
    "qwen3-qk-norm": ("qwen3", llama_like(**GQA, head_dim=16)),
    "gemma3-sliding-local-rope": (
        "gemma3_text", gemma3_like(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=16, vocab_size=97)),
    "phi3-partial-rotary": ("phi3", llama_like(**GQA, partial_rotary_factor=0.5)),
    "gpt_neox-parallel": ("gpt_neox", neox_like(hidden_size=64, rotary_pct=0.25)),
    "gpt_neo-local-global": ("gpt_neo", neo_like(hidden_size=64, num_heads=4)),
    "olmo2-output-norm": ("olmo2", llama_like(**GQA)),
    "opt-post-ln-projected": ("opt", opt_like(hidden_size=64, ffn_dim=96, do_layer_norm_before=False,
                                              word_embed_proj_dim=32)),
    "smollm3-nope": ("smollm3", llama_like(**GQA, num_hidden_layers=4)),
}
WIDE = dict(d_model=64, encoder_ffn_dim=96, decoder_ffn_dim=96)
SEQ2SEQ = {
    "t5": ("t5", t5_like(d_model=64, d_kv=16, d_ff=96)),
    "bart": ("bart", bart_like(**WIDE)),
    "marian": ("marian", marian_like(**WIDE)),
    "mbart": ("mbart", mbart_like(**WIDE)),
    "pegasus": ("pegasus", pegasus_like(**WIDE)),
    "m2m_100": ("m2m_100", m2m_like(**WIDE)),
}


def _requests(lm) -> list[tuple[list[int], GenerationConfig]]:
    """A capturing greedy request, a beam search, an edited request and a sampled one (the beams and the
    sampled rows attend in one call: their caches share a pool): each prompt passes every window."""
    top = lm.config.vocab_size - 4
    prompt = [(7 * i) % top + 3 for i in range(9)]
    if lm.kind == "seq2seq":
        prompt[-1] = lm.config.eos_token_id if isinstance(lm.config.eos_token_id, int) else 1
    last, d = min(1, lm.config.n_layers - 1), lm.config.d_model
    place = 3 if lm.kind == "seq2seq" else 11  # a decoded token's place (a decoder-only prompt holds 8)
    edits = [Ablate(last, head=lm.config.n_heads - 1), Steer(0, np.linspace(-1, 1, d, dtype=np.float32), scale=2.0),
             Patch(last, place, np.linspace(0.5, -0.5, d, dtype=np.float32))]
    if lm.kind == "seq2seq":
        edits += [Ablate(0, head=0, attention="cross"), Steer(0, np.ones(d, dtype=np.float32), stack="encoder")]
    # mBART and M2M100 start from their end token: a forced target language, as they are used
    lang = {"forced_bos_token_id": 57} if lm.config.family in ("mbart", "m2m_100") else {}
    return [
        (prompt, GenerationConfig(max_new_tokens=7, capture_attention=True, capture_residual=True, **lang)),
        (prompt[2:], GenerationConfig(max_new_tokens=5, num_beams=2, **lang)),
        (prompt[1:], GenerationConfig(max_new_tokens=6, interventions=tuple(edits), **lang)),
        (prompt[3:], GenerationConfig(max_new_tokens=6, temperature=0.8, seed=5, **lang)),
    ]


def _load(tmp_path_factory, name: str, cases: dict, save) -> object:
    family, kwargs = cases[name]
    directory = tmp_path_factory.mktemp(name)
    save(directory, family, kwargs, init_std=0.1)
    return playground.load_model(directory)


def _check(lm) -> None:
    requests = _requests(lm)
    plans = [plan(lm, ids, cfg) for ids, cfg in requests]
    alone = [run_alone(p, invariant=True) for p in plans]
    scheduler = Scheduler(lm, max_rows=8, max_prefills=4, invariant_alone=True)
    tickets = [scheduler.submit(p, tag=i) for i, p in enumerate(plans)]
    while scheduler.busy():
        scheduler.step()
    assert decoded_together(scheduler, set(range(len(plans))))  # the edited request among them
    for ticket, solo, p, (ids, cfg) in zip(tickets, alone, plans, requests):
        got = ticket.drain()
        assert got and got[-1].finished and len(got) >= 3
        _assert_equal_runs(got, solo)  # beside others: bitwise the same request alone
        reference = generate_all(lm, ids, cfg)
        assert got[-1].token_ids == reference.token_ids
        assert np.allclose([e.prob for e in got], [e.prob for e in reference.steps], rtol=0, atol=1e-5)
        assert got[-1].cache == reference.cache
        served = run_alone(p)
        assert served[-1].token_ids == reference.token_ids
        assert np.allclose([e.prob for e in served], [e.prob for e in got], rtol=0, atol=1e-5)
    captured = alone[0]
    assert all(e.attention is not None and e.residual is not None for e in captured)
    # the edit is real: the ablated request differs from the same prompt unedited
    plain = generate_all(lm, requests[2][0], dataclasses.replace(requests[2][1], interventions=()))
    edited = generate_all(lm, requests[2][0], requests[2][1])
    assert plain.token_ids != edited.token_ids or [e.prob for e in plain.steps] != [e.prob for e in edited.steps]


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_decoder_family_in_a_batch_equals_alone(tmp_path_factory, one_thread, name):
    _check(_load(tmp_path_factory, name, DECODERS, save_decoder))


@pytest.mark.parametrize("name", sorted(SEQ2SEQ))
def test_seq2seq_family_in_a_batch_equals_alone(tmp_path_factory, one_thread, name):
    _check(_load(tmp_path_factory, name, SEQ2SEQ, save_seq2seq))
