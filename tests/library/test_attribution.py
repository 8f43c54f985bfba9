"""Direct logit attribution: on every decoder family and on T5, BART and Marian decoders (real files
saved by transformers), the parts sum to the model's own logit, and chosen-vs-runner-up parts to the
logit difference, within float32 error; an ablated head contributes nothing; edits of a run count."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import playground
from playground.analysis.attribution import attribute, attribute_step, runner_up
from playground.generation import GenerationConfig, generate_all
from playground.interventions import Ablate, Patch, Steer
from tests.hf_tiny import bart_like, gemma3_like, marian_like, save_decoder, save_seq2seq, t5_like
from tests.library.test_interventions import DECODERS, PROMPT

SEQ2SEQ = {
    "t5": ("t5", t5_like(num_heads=3, d_kv=10)),
    "t5-gated-untied": ("t5", t5_like(feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
    "bart-post-ln": ("bart", bart_like()),
    "marian": ("marian", marian_like()),
}
SOURCE = [5, 9, 23, 40, 7, 11, 30]
REL = 1e-4


@pytest.fixture(scope="module", params=sorted(DECODERS))
def decoder(request, tmp_path_factory):
    family, kwargs = DECODERS[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    save_decoder(directory, family, kwargs, init_std=0.1)
    return playground.load_model(directory)


@pytest.fixture(scope="module", params=sorted(SEQ2SEQ))
def seq2seq(request, tmp_path_factory):
    family, kwargs = SEQ2SEQ[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    save_seq2seq(directory, family, kwargs)
    return playground.load_model(directory)


def _assert_sums(att, expected: float) -> None:
    """Σ parts = the logit, relative to the size of what was summed (float32 activations)."""
    scale = max(abs(expected), max(abs(v) for _, v in att.parts))
    assert abs(att.total - expected) <= REL * scale, (att.total, expected)
    assert abs(att.logit - expected) <= 1e-6 * scale
    assert att.heads.sum() + att.mlps.sum() + sum(att.other.values()) + (
        0.0 if att.cross_heads is None else att.cross_heads.sum()) == pytest.approx(att.total, rel=1e-9, abs=1e-9)


def test_decoder_parts_sum_to_the_logit(decoder, one_thread):
    lm = decoder
    ids = PROMPT + [12, 33, 50]
    logits = lm.logits([ids])[0, -1].double()
    top = torch.topk(logits, 2).indices.tolist()
    att = attribute(lm, ids, top[0])
    _assert_sums(att, float(logits[top[0]]))
    assert att.heads.shape == (lm.config.n_layers, lm.config.n_heads) and np.abs(att.heads).max() > 0
    assert runner_up(lm, ids, top[0]) == top[1]
    why = attribute(lm, ids, top[0], versus_id=top[1])
    _assert_sums(why, float(logits[top[0]] - logits[top[1]]))


def test_decoder_parts_under_edits(decoder, one_thread):
    lm = decoder
    c = lm.config
    ids = PROMPT + [12, 33]
    v = torch.randn(c.d_model, generator=torch.Generator().manual_seed(0))
    edits = [Ablate(0, head=1), Ablate(c.n_layers - 1, component="mlp"), Steer(0, v, scale=2.0)]
    logits = lm.logits([ids], interventions=edits)[0, -1].double()
    token = int(logits.argmax())
    att = attribute(lm, ids, token, interventions=edits)
    _assert_sums(att, float(logits[token]))
    assert att.heads[0, 1] == 0.0 and att.mlps[-1] == 0.0 and att.other["steering"] != 0.0
    # a patch at the attributed position after the last block leaves one part (and the head's biases)
    patched = [Patch(c.n_layers - 1, len(ids) - 1, v)]
    logits = lm.logits([ids], interventions=patched)[0, -1].double()
    att = attribute(lm, ids, token, interventions=patched)
    _assert_sums(att, float(logits[token]))
    assert not att.heads.any() and not att.mlps.any() and att.other["patch"] != 0.0


def test_a_softcapped_logit_splits_before_the_cap(tmp_path, one_thread):
    """Gemma-2-style tanh softcap is not linear: the parts sum to the logit before it, and capping that
    sum gives the model's logit."""
    save_decoder(tmp_path, "gemma3_text", gemma3_like(final_logit_softcapping=2.0), init_std=0.1)
    lm = playground.load_model(tmp_path)
    assert lm.config.final_logit_softcap == 2.0
    logits = lm.logits([PROMPT])[0, -1].double()
    token = int(logits.argmax())
    att = attribute(lm, PROMPT, token)
    assert att.softcapped and att.logit > 2.0
    assert abs(att.total - att.logit) <= REL * max(abs(v) for _, v in att.parts)
    assert 2.0 * np.tanh(att.total / 2.0) == pytest.approx(float(logits[token]), rel=1e-5)


def test_seq2seq_decoder_parts_sum_to_the_logit(seq2seq, one_thread):
    lm = seq2seq
    ids = [lm.config.decoder_start_token_id, 8, 14, 3]
    logits = lm.logits([SOURCE], [ids])[0, -1].double()
    top = torch.topk(logits, 2).indices.tolist()
    att = attribute(lm, ids, top[0], source_ids=SOURCE)
    _assert_sums(att, float(logits[top[0]]))
    assert att.cross_heads is not None and np.abs(att.cross_heads).max() > 0
    why = attribute(lm, ids, top[0], versus_id=top[1], source_ids=SOURCE)
    _assert_sums(why, float(logits[top[0]] - logits[top[1]]))
    edits = [Ablate(1, head=0, attention="cross"), Ablate(0, head=1, stack="encoder")]
    logits = lm.logits([SOURCE], [ids], interventions=edits)[0, -1].double()
    att = attribute(lm, ids, top[0], source_ids=SOURCE, interventions=edits)
    _assert_sums(att, float(logits[top[0]]))
    assert att.cross_heads[1, 0] == 0.0


def test_attribute_a_recorded_step_with_its_edits(decoder, one_thread):
    lm = decoder
    edits = (Ablate(0, head=0),)
    result = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=4, interventions=edits))
    step = 2
    ids = PROMPT + result.token_ids[:step]
    logits = lm.logits([ids], interventions=edits)[0, -1].double()
    att = attribute_step(lm, result, step, versus="runner-up")
    second = int(torch.topk(logits, 2).indices[1])
    assert att.token_id == result.token_ids[step] and att.versus_id == second
    _assert_sums(att, float(logits[att.token_id] - logits[second]))
    with pytest.raises(ValueError, match="outside this run's steps"):
        attribute_step(lm, result, 4)


def test_a_recorded_seq2seq_step(seq2seq, one_thread):
    lm = seq2seq
    result = generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=3))
    att = attribute_step(lm, result, 1)
    ids = result.decoder_prefix + result.token_ids[:1]
    _assert_sums(att, float(lm.logits([SOURCE], [ids])[0, -1, att.token_id]))


@pytest.mark.slow
def test_smollm2_why_paris(smollm2_dir):
    """The real SmolLM2 answers "Paris"; its logit, and its margin over the runner-up, split exactly."""
    lm = playground.load_model(smollm2_dir)
    result = generate_all(lm, "What is the capital of France?", GenerationConfig(max_new_tokens=6, chat=True))
    step = next(i for i, t in enumerate(result.token_ids) if lm.token_text(t) == " Paris")
    ids = result.decoder_prefix + result.token_ids[:step]
    logits = lm.logits([ids])[0, -1].double()
    att = attribute_step(lm, result, step)
    _assert_sums(att, float(logits[att.token_id]))
    why = attribute_step(lm, result, step, versus="runner-up")
    _assert_sums(why, float(logits[why.token_id] - logits[why.versus_id]))
    assert why.heads.shape == (30, 9) and why.logit > 0
