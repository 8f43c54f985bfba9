"""Special token ids outside the vocabulary: tiny Hub checkpoints keep GPT-2's 50256 with a 170-token
vocabulary. transformers loads them and treats such an id as a token that never occurs; so do we, with
the same logits and the same greedy and beam tokens. Only a use that needs the token itself refuses."""

from __future__ import annotations

import pytest
import torch

import playground
from playground import GenerationConfig, generate_all
from playground.errors import PlaygroundError
from tests.hf_tiny import gpt2_like, llama_like, neo_like, save_decoder, save_seq2seq, t5_like

PROMPT = [5, 17, 42, 8, 99, 3]

CASES = {
    # GPT2Config's own defaults: bos = eos = 50256, whatever the vocabulary
    "gpt2": ("gpt2", gpt2_like(vocab_size=170, bos_token_id=50256, eos_token_id=50256)),
    "gpt_neo": ("gpt_neo", neo_like(vocab_size=170, bos_token_id=50256, eos_token_id=50256)),
    "llama": ("llama", llama_like(vocab_size=170, bos_token_id=32000, eos_token_id=32001, pad_token_id=None)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    family, kwargs = CASES[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    reference = save_decoder(directory, family, kwargs)
    return reference, playground.load_model(directory)


def _hf_generate(reference, n_new: int, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return reference.generate(torch.tensor([PROMPT]), max_new_tokens=n_new, pad_token_id=0, **kwargs)


def test_the_checkpoint_loads_and_its_card_names_the_ids(pair):
    _, lm = pair
    outside = lm.info()["special_ids_outside_vocab"]
    assert outside and all(not 0 <= v < 170 for v in outside.values())
    assert set(outside) >= {"bos_token_id", "eos_token_id"}


def test_logits_match_transformers(pair):
    reference, lm = pair
    ids = torch.randint(0, 170, (2, 13), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = reference(ids).logits
    torch.testing.assert_close(lm.logits(ids), expected, atol=1e-4, rtol=0)


def test_greedy_and_beam_match_transformers(pair, one_thread):
    reference, lm = pair
    greedy = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12, top_candidates=0))
    assert greedy.token_ids == _hf_generate(reference, 12, do_sample=False)[0, len(PROMPT):].tolist()
    assert len(greedy.token_ids) == 12  # the end id never occurs, so the run goes to its budget
    beam = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=8, num_beams=3, top_candidates=0))
    out = _hf_generate(reference, 8, do_sample=False, num_beams=3)
    assert beam.token_ids == out[0, len(PROMPT):].tolist()


def test_an_end_list_whose_first_id_is_outside_still_stops_on_the_second(tmp_path, one_thread):
    """eos_token_id [32000, t]: t, a token the greedy path emits mid-way, ends the run in both."""
    kwargs = llama_like(vocab_size=170, pad_token_id=None)
    reference = save_decoder(tmp_path / "free", "llama", kwargs)
    free = generate_all(playground.load_model(tmp_path / "free"), PROMPT,
                        GenerationConfig(max_new_tokens=12, top_candidates=0))
    stop = free.token_ids[4]
    kwargs = llama_like(vocab_size=170, pad_token_id=None, eos_token_id=[32000, stop])
    reference = save_decoder(tmp_path / "listed", "llama", kwargs)
    lm = playground.load_model(tmp_path / "listed")
    assert lm.info()["special_ids_outside_vocab"] == {"eos_token_id.0": 32000}
    ours = generate_all(lm, PROMPT, GenerationConfig(max_new_tokens=12, top_candidates=0))
    theirs = _hf_generate(reference, 12, do_sample=False)[0, len(PROMPT):].tolist()
    assert ours.token_ids == theirs == free.token_ids[: free.token_ids.index(stop) + 1]
    assert ours.steps[-1].finish_reason == "eos"


def test_uses_that_need_the_token_itself_are_refused_with_one_line(pair, tmp_path):
    _, lm = pair
    with pytest.raises(PlaygroundError, match="'bos_token_id' is .*outside the 170-token vocabulary.*type a prompt"):
        generate_all(lm, [], GenerationConfig(max_new_tokens=2))
    save_seq2seq(tmp_path / "t5", "t5", t5_like(decoder_start_token_id=5000))
    t5 = playground.load_model(tmp_path / "t5")
    assert t5.info()["special_ids_outside_vocab"] == {"decoder_start_token_id": 5000}
    with pytest.raises(PlaygroundError, match="'decoder_start_token_id' is 5000.*cannot start the decoder"):
        generate_all(t5, [4, 5, 6], GenerationConfig(max_new_tokens=2))
