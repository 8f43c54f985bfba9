"""Generation with mBART, Pegasus, M2M100 / NLLB and asymmetric BART, Marian and T5 equals
transformers' generate() on the same files: greedy (cached and not), seeded sampling (same tokens,
same distribution at every step), beam search, and the forced target language, from the checkpoint's
config, from `GenerationConfig.forced_bos_token_id` and from `--target-lang` through the tokenizer."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers

import playground
from playground.cli import main
from playground.generation import GenerationConfig, SettingsError, generate_all, language_codes, language_token_id, plan
from tests.hf_tiny import mbart_like, save_seq2seq
from tests.library.test_seq2seq_families import CASES, LANG, build_pair

transformers.logging.set_verbosity_error()

SOURCE = [5, 9, 23, 40, 7, 11, 4]
SAMPLING = dict(temperature=0.8, top_k=20, top_p=0.9)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    reference, lm = build_pair(request.param, tmp_path_factory.mktemp(request.param))
    return reference, lm, CASES[request.param][3]  # the generate() kwargs of the forced target language


def _cfg(forced: dict, **knobs) -> GenerationConfig:
    return GenerationConfig(forced_bos_token_id=forced.get("forced_bos_token_id"), **knobs)


def _hf(reference, forced: dict, n: int, **kwargs):
    with torch.no_grad():
        return reference.generate(torch.tensor([SOURCE]), max_new_tokens=n, **forced, **kwargs)


def test_greedy_matches_transformers(case):
    reference, lm, forced = case
    expected = _hf(reference, forced, 12, do_sample=False)[0, 1:].tolist()
    for use_cache in (True, False):
        assert generate_all(lm, SOURCE, _cfg(forced, max_new_tokens=12, use_cache=use_cache)).token_ids == expected
    if forced:
        assert expected[0] == LANG


@pytest.mark.parametrize(
    "num_beams,length_penalty,early_stopping", [(3, 0.6, True), (3, 1.5, False), (4, 0.6, False), (4, 1.5, True)]
)
def test_beam_matches_transformers(case, num_beams, length_penalty, early_stopping):
    reference, lm, forced = case
    knobs = dict(num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping)
    out = _hf(reference, forced, 10, do_sample=False, num_return_sequences=num_beams, return_dict_in_generate=True,
              output_scores=True, **knobs)
    lengths = (out.beam_indices + 1).bool().sum(dim=1).tolist()
    expected = [row[1 : 1 + n].tolist() for row, n in zip(out.sequences, lengths)]
    result = generate_all(lm, SOURCE, _cfg(forced, max_new_tokens=10, **knobs))
    assert [s.token_ids for s in result.sequences] == expected
    torch.testing.assert_close(
        torch.tensor([s.score for s in result.sequences]), out.sequences_scores.float(), atol=1e-4, rtol=0
    )
    if num_beams == 4 and early_stopping:  # full recompute picks the same beams
        uncached = generate_all(lm, SOURCE, _cfg(forced, max_new_tokens=10, use_cache=False, **knobs))
        assert [s.token_ids for s in uncached.sequences] == expected


def test_sampling_matches_transformers_step_by_step(case):
    """Same seed, same tokens; along that path our processed distribution equals generate()'s scores."""
    reference, lm, forced = case
    seed = 1234
    torch.manual_seed(seed)
    out = _hf(reference, forced, 10, do_sample=True, output_scores=True, output_logits=True,
              return_dict_in_generate=True, **SAMPLING)
    expected = out.sequences[0, 1:].tolist()
    cfg = _cfg(forced, max_new_tokens=10, seed=seed, **SAMPLING)
    assert generate_all(lm, SOURCE, cfg).token_ids == expected
    p = plan(lm, SOURCE, cfg)
    stepper = p.stepper(lm.model, batch=1, max_tokens=p.max_length, use_cache=True)
    spread = []
    with torch.inference_mode():
        logits = stepper.start(torch.tensor(p.prompt_ids), torch.tensor(p.prefix_ids))
        for t, token in enumerate(expected):
            torch.testing.assert_close(logits, out.logits[t].float(), atol=1e-4, rtol=0)
            ours = torch.softmax(p.pipeline.run(stepper.sequence(), logits), dim=-1)
            theirs = torch.softmax(out.scores[t].float(), dim=-1)
            assert float((ours - theirs).abs().max()) <= 1e-6, f"step {t}"
            spread.append(float(ours.max()))
            logits = stepper.step(torch.tensor([token]))
    assert min(spread) < 0.99  # some step really was a draw from several tokens


# --- the forced target language -------------------------------------------------------------------


@pytest.fixture(scope="module")
def mbart50(tmp_path_factory):
    """An mBART-50-like checkpoint with a word-level tokenizer whose language codes are special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    directory = tmp_path_factory.mktemp("mbart50-tokenizer")
    words = ["<s>", "<pad>", "</s>", "<unk>", *"hello world how are you the cat sat on mat".split()]
    codes = ["en_XX", "fr_XX", "de_DE", "zh_CN"]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(words + [f"w{i}" for i in range(40)] + codes))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                        unk_token="<unk>", additional_special_tokens=codes)
    tokenizer.save_pretrained(directory)
    reference = save_seq2seq(directory, "mbart", mbart_like(vocab_size=len(vocab), encoder_layers=2, decoder_layers=1,
                                                            encoder_ffn_dim=40))
    return directory, reference, {code: vocab[code] for code in codes}


def test_language_codes_come_from_the_tokenizer(mbart50):
    directory, _, codes = mbart50
    lm = playground.load_model(directory)
    assert language_codes(lm.tokenizer) == codes
    assert language_token_id(lm.tokenizer, "de_DE") == codes["de_DE"]
    with pytest.raises(SettingsError, match="unknown target language 'xx_YY'.*en_XX"):
        language_token_id(lm.tokenizer, "xx_YY")
    assert language_codes(None) == {}


def test_language_codes_of_the_real_tokenizer_classes(tmp_path):
    """mBART, mBART-50, NLLB (built offline with their default code lists) and M2M100 (from a tiny
    sentencepiece model): every code, with the id the tokenizer itself gives it."""
    import sentencepiece

    nllb = transformers.NllbTokenizer()
    codes = language_codes(nllb)
    assert len(codes) == 202 and codes["fra_Latn"] == nllb.convert_tokens_to_ids("fra_Latn")
    for tokenizer in (transformers.MBart50Tokenizer(), transformers.MBartTokenizer()):
        assert language_codes(tokenizer) == dict(sorted(tokenizer.lang_code_to_id.items(), key=lambda kv: kv[1]))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["a tiny corpus for a tiny sentencepiece model", "the quick brown fox"] * 20))
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "spm"), vocab_size=30,
                                             minloglevel=2)
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "spm.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({pieces.id_to_piece(i): 4 + i for i in range(pieces.get_piece_size()) if pieces.id_to_piece(i) not in vocab})
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    m2m = transformers.M2M100Tokenizer(vocab_file=str(tmp_path / "vocab.json"), spm_file=str(tmp_path / "spm.model"))
    codes = language_codes(m2m)
    assert len(codes) == 100 and codes["__fr__"] == m2m.get_lang_id("fr")
    assert language_token_id(m2m, "fr") == language_token_id(m2m, "__fr__") == m2m.get_lang_id("fr")
    t5_like_tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=nllb.backend_tokenizer, additional_special_tokens=["<mask_1>", "<extra_id_0>"])
    assert language_codes(t5_like_tokenizer) == {}  # special tokens, but none shaped like a language code


def test_target_language_knob_matches_transformers(mbart50):
    directory, reference, codes = mbart50
    lm = playground.load_model(directory)
    for code in ("fr_XX", "zh_CN"):
        lang = codes[code]
        expected = _hf(reference, {"forced_bos_token_id": lang}, 8, do_sample=False)[0, 1:].tolist()
        assert generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=8, forced_bos_token_id=lang)).token_ids == expected
        assert expected[0] == lang
        beams = _hf(reference, {"forced_bos_token_id": lang}, 8, do_sample=False, num_beams=3)[0, 1:].tolist()
        got = generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=8, num_beams=3, forced_bos_token_id=lang))
        assert got.token_ids == [t for t in beams if t != lm.config.pad_token_id] and got.token_ids[0] == lang
    with pytest.raises(SettingsError, match="forced_bos_token_id"):
        generate_all(lm, SOURCE, GenerationConfig(forced_bos_token_id=lm.config.vocab_size))
    with pytest.raises(SettingsError, match="forced_bos_token_id"):
        GenerationConfig(forced_bos_token_id=-1).validate()


def test_forced_language_from_the_checkpoint_and_overridden(mbart50, tmp_path):
    """A config.json that names the language (and no generation_config.json, so transformers reads
    config.json too) forces it; the knob overrides it, as generate(forced_bos_token_id=...) does."""
    source_dir, _, codes = mbart50
    directory = tmp_path / "with-language"
    shutil.copytree(source_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    config["forced_bos_token_id"] = codes["de_DE"]
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "generation_config.json").unlink()
    reference = transformers.MBartForConditionalGeneration.from_pretrained(directory, attn_implementation="eager")
    lm = playground.load_model(directory)
    assert lm.config.forced_bos_token_id == reference.generation_config.forced_bos_token_id == codes["de_DE"]
    expected = _hf(reference, {}, 8, do_sample=False)[0, 1:].tolist()
    assert generate_all(lm, SOURCE, GenerationConfig(max_new_tokens=8)).token_ids == expected
    assert expected[0] == codes["de_DE"]
    other = {"forced_bos_token_id": codes["en_XX"]}
    expected = _hf(reference, other, 8, do_sample=False)[0, 1:].tolist()
    assert generate_all(lm, SOURCE, _cfg(other, max_new_tokens=8)).token_ids == expected
    assert expected[0] == codes["en_XX"]


def test_cli_target_language(mbart50, capsys):
    directory, reference, codes = mbart50
    expected = _hf(reference, {"forced_bos_token_id": codes["fr_XX"]}, 6, do_sample=False)[0, 1:].tolist()
    ids = ",".join(map(str, SOURCE))
    for flag in (["--target-lang", "fr_XX"], ["--forced-bos-token-id", str(codes["fr_XX"])]):
        assert main(["generate", "--model", str(directory), "--input-ids", ids, "--max-new-tokens", "6", *flag, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["token_ids"] == expected
    assert main(["generate", "--model", str(directory), "--input-ids", ids, "--target-lang", "xx_YY", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown target language 'xx_YY'" in err[0]
