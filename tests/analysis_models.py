"""The models every analysis is tested on: the two shipped defaults and tiny random GPT-2, T5, BART
(and a Mistral with a sliding window shorter than the run), saved with `save_pretrained`, plus one
recorded run of each."""

from __future__ import annotations

from pathlib import Path

import transformers

import playground
from playground.generation import GenerationConfig, GenerationResult, generate_all
from playground.loaded import LoadedModel
from tests.hf_tiny import bart_like, gpt2_like, llama_like, save_decoder, save_seq2seq, t5_like

transformers.logging.set_verbosity_error()

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("tiny-lm", "tiny-seq2seq", "gpt2", "t5", "bart")
PROMPTS = {"tiny-lm": "The import statement", "tiny-seq2seq": "March 5, 2021"}
IDS = [5, 9, 23, 40, 7, 11, 3]  # for checkpoints without a tokenizer


def load(name: str, tmp: Path) -> LoadedModel:
    """A shipped default by name, or a tiny random Hugging Face checkpoint written under `tmp`."""
    if name in ("tiny-lm", "tiny-seq2seq"):
        return playground.load_model(REPO / "weights" / name)
    directory = tmp / name
    if name == "gpt2":
        save_decoder(directory, "gpt2", gpt2_like())
    elif name == "mistral":
        save_decoder(directory, "mistral", llama_like(num_attention_heads=4, num_key_value_heads=2, sliding_window=4))
    elif name == "t5":
        save_seq2seq(directory, "t5", t5_like(), init_std=0.1)
    elif name == "bart":
        save_seq2seq(directory, "bart", bart_like())
    else:
        raise ValueError(name)
    return playground.load_model(directory)


def record(lm: LoadedModel, name: str, new_tokens: int = 8, **knobs) -> GenerationResult:
    """A greedy run that records the residual stream and every step's attention rows."""
    prompt = PROMPTS.get(name, IDS)
    cfg = GenerationConfig(max_new_tokens=new_tokens, capture_residual=True, capture_attention=True, **knobs)
    quiet = lm if knobs.get("num_beams", 1) > 1 else _no_eos(lm)
    return generate_all(quiet, prompt, cfg)


def _no_eos(lm: LoadedModel) -> LoadedModel:
    """The same model and weights with a config that never stops early (every run has all its steps)."""
    import dataclasses

    return dataclasses.replace(lm, config=dataclasses.replace(lm.config, eos_token_id=None))
