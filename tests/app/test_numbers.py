"""Numbers that cannot be right say so (issue 31, row 12), against a served app.

- A checkpoint whose embedding is scaled by 1e30: its residual stream's squares overflow float32, every
  token comes out equally likely; the page's run and the script API carry a note saying so, and a
  sound model's run carries none.
- A checkpoint of one position holds no prompt and a new token: refused at upload with that reason.
- A byte-level BPE (GPT-2's) splits "é" and an emoji into bytes: each piece is drawn as its bytes
  ("<0xC3>"), never as the same "�".
"""

from __future__ import annotations

import gradio as gr
import pytest
from safetensors.torch import load_file, save_file

import playground
from playground.app.settings import FIELDS, UISettings
from playground.errors import PlaygroundError
from tests.hf_tiny import gpt2_like, llama_like, save_decoder
from tests.ui.test_hostile_uploads import _as_uploaded
from tests.ui_fixtures import save_char_tokenizer, save_tiny_decoder, script_client, served_app


def _overflowing(directory):
    save_tiny_decoder(directory)
    tensors = load_file(directory / "model.safetensors")
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"] * 1e30
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    return directory


def _byte_level_gpt2(directory):
    """A tiny GPT-2 with a byte-level BPE trained here: no merge covers "é" or an emoji, so both split
    into their UTF-8 bytes, as GPT-2's own tokenizer splits rarer characters."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(["hello world, the cat sat on the mat"] * 10, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    save_decoder(directory, "gpt2", gpt2_like(vocab_size=len(fast), bos_token_id=0, eos_token_id=0))
    fast.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(weights / "tiny-lm")
    _overflowing(weights / "overflow-lm")
    _byte_level_gpt2(weights / "bytes-lm")
    with served_app(weights, tmp_path_factory.mktemp("uploads")) as app:
        yield app


@pytest.fixture(scope="module")
def client(served):
    with script_client(served[1]) as c:
        yield c


def _page_run(served, session: str, **settings):
    handlers = served[0].playground_handlers
    values = UISettings(**{"max_new_tokens": 3, **settings})
    frames = list(handlers.stream.generate(gr.Request(session_hash=session), 0.0,
                                           *[getattr(values, f) for f in FIELDS]))
    return frames, handlers.sessions.get(session).current


def test_an_overflowing_upload_says_its_numbers_mean_nothing(served, client):
    frames, run = _page_run(served, "overflow", model="overflow-lm", prompt="Hello")
    assert run.finish_reason in ("length", "eos")
    assert all(abs(c.prob_raw - 1 / 98) < 1e-6 for c in run.path[0].candidates)  # uniform, as the issue saw
    print(f"\noverflow: notes on the run {run.notes}")
    assert any("beyond what float32 can square" in n for n in run.notes), run.notes
    assert "float32 can square" in frames[-1][1]  # on the page, above the live screen
    api = client.predict("overflow-lm", "Hello", "max_new_tokens=3", api_name="/generate_text")
    assert any("equally likely" in n for n in api["notes"]), api["notes"]
    sound = client.predict("tiny-lm", "Hello", "max_new_tokens=3", api_name="/generate_text")
    assert sound["notes"] == []
    _, fine = _page_run(served, "sound", model="tiny-lm", prompt="Hello")
    assert fine.notes == []


def test_a_model_of_one_position_is_refused_at_upload_with_the_reason(served, tmp_path):
    folder = tmp_path / "one"
    save_decoder(folder, "llama", llama_like(vocab_size=98, max_position_embeddings=1))
    save_char_tokenizer(folder)
    with pytest.raises(PlaygroundError, match="too few positions"):
        playground.load_model(folder)
    handlers = served[0].playground_handlers
    status = handlers.models.upload(_as_uploaded(folder, tmp_path), "float32", "en", gr.Request(session_hash="one"))["model_status"]
    print(f"\none position: {status}")
    assert "Upload refused" in status and "too few positions" in status and "max\\_new\\_tokens" not in status


def test_a_prompt_longer_than_the_context_names_a_possible_fix():
    from playground.generation.plan import fit_to_context
    from playground.generation.stepper import DecoderStepper

    with pytest.raises(PlaygroundError) as caught:
        fit_to_context(DecoderStepper, 4, 6, 1, truncate=False)
    assert "shorten the prompt to at most 3 tokens" in str(caught.value) and "to 0" not in str(caught.value)


def test_byte_pieces_of_a_character_are_drawn_as_their_bytes(served):
    frames, run = _page_run(served, "bytes", model="bytes-lm", prompt="café 😀")
    shown = run.prompt_texts
    print(f"\nbyte-level chips: {shown}")
    assert "\ufffd" not in "".join(shown)
    assert shown[3:5] == ["<0xC3>", "<0xA9>"]  # é
    assert shown[-4:] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]  # 😀
    lm = playground.load_model(served[0].playground_handlers.models.catalog.resolve("bytes-lm"))
    assert lm.detokenize(lm.tokenize("café 😀")) == "café 😀"  # the text itself is untouched
    assert lm.token_texts(lm.tokenize("é")) == ["<0xC3>", "<0xA9>"]
