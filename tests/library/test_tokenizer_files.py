"""Tokenizers as visitors bring them (issue 23): the same tokens as transformers for every tokenizer
layout the families use, and nothing read outside the checkpoint folder, whatever its files name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import transformers
from transformers import AutoTokenizer

import playground
from playground.checkpoints.folder_files import read_folder_file
from playground.checkpoints.limits import Limits
from playground.checkpoints.tokenizer import load_directory_tokenizer
from playground.errors import CheckpointError, PlaygroundError
from tests.bounds import within_bounds
from tests.ui_fixtures import save_tiny_decoder

TEXT = "the quick brown fox, a tiny ab model </s> é"
LIMITS = Limits(max_file_bytes=2**30, memory_budget_bytes=2 * 2**30)


@pytest.fixture(scope="module")
def spm(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny sentencepiece model and an M2M/Marian-style vocab.json over its pieces."""
    import sentencepiece

    folder = tmp_path_factory.mktemp("spm")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(["a tiny corpus for a tiny sentencepiece model", "the quick brown fox jumps"] * 20))
    sentencepiece.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(folder / "spm"), vocab_size=30,
                                             minloglevel=2)
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(folder / "spm.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({pieces.id_to_piece(i): 4 + i for i in range(pieces.get_piece_size())
                  if pieces.id_to_piece(i) not in vocab})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    return folder / "spm.model", folder / "vocab.json"


def _saved(tmp_path: Path, name: str, tokenizer) -> Path:
    tokenizer.save_pretrained(tmp_path / name)
    return tmp_path / name


def _slow(tmp_path: Path, name: str, files: dict[str, Path | str], tokenizer_class: str) -> Path:
    """A folder in an older Hub layout: vocabulary files by their standard names + tokenizer_config.json."""
    folder = tmp_path / name
    folder.mkdir()
    for target, source in files.items():
        if isinstance(source, Path):
            shutil.copy(source, folder / target)
        else:
            (folder / target).write_text(source)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class}))
    return folder


LAYOUTS = ["gpt2", "t5", "llama", "mbart50", "nllb", "m2m100", "marian", "gemma", "qwen2", "gpt_neox", "bart", "codegen",
           "bert", "t5-spiece.model", "llama-tokenizer.model", "gpt2-vocab+merges", "mbart50-sentencepiece.bpe.model",
           "unknown-class+tokenizer.json"]
BPE_VOCAB = {"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3, "Ġ": 4, "<s>": 5, "</s>": 6, "<unk>": 7, "<pad>": 8,
             "<mask>": 9}
BPE = {"gemma": lambda: transformers.GemmaTokenizer(vocab={"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "a": 4,
                                                           "b": 5, "▁": 6}, merges=[]),
       "qwen2": lambda: transformers.Qwen2Tokenizer(vocab=BPE_VOCAB, merges=[("a", "b")]),
       "gpt_neox": lambda: transformers.GPTNeoXTokenizer(vocab=BPE_VOCAB, merges=[("a", "b")]),
       "bart": lambda: transformers.BartTokenizer(vocab=BPE_VOCAB, merges=[("a", "b")]),
       "codegen": lambda: transformers.CodeGenTokenizer(vocab=BPE_VOCAB, merges=[("a", "b")]),
       "bert": lambda: transformers.BertTokenizer(vocab={"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "[PAD]": 3, "[MASK]": 4,
                                                        "a": 5, "ab": 6})}


def _layout(name: str, tmp_path: Path, spm: tuple[Path, Path]) -> Path:
    model, vocab = spm
    gpt2_vocab = {"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3, "Ġ": 4}
    if name == "gpt2":
        return _saved(tmp_path, name, transformers.GPT2Tokenizer(vocab=gpt2_vocab, merges=[("a", "b")]))
    if name == "t5":
        return _saved(tmp_path, name, transformers.T5Tokenizer(vocab_file=str(model)))
    if name == "llama":
        return _saved(tmp_path, name, transformers.LlamaTokenizer(vocab_file=str(model)))
    if name == "mbart50":
        return _saved(tmp_path, name, transformers.MBart50Tokenizer(vocab_file=str(model)))
    if name == "nllb":
        return _saved(tmp_path, name, transformers.NllbTokenizer(vocab_file=str(model)))
    if name == "m2m100":
        return _saved(tmp_path, name, transformers.M2M100Tokenizer(vocab_file=str(vocab), spm_file=str(model)))
    if name == "marian":
        return _saved(tmp_path, name, transformers.MarianTokenizer(source_spm=str(model), target_spm=str(model),
                                                                   vocab=str(vocab)))
    if name in BPE:
        return _saved(tmp_path, name, BPE[name]())
    if name == "unknown-class+tokenizer.json":  # a class we do not run, over a tokenizer.json: the plain fast one
        folder = _saved(tmp_path, name, transformers.GPT2Tokenizer(vocab=gpt2_vocab, merges=[("a", "b")]))
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "tokenizer_class": "MyT5Tokenizer"}))
        return folder
    if name == "t5-spiece.model":
        return _slow(tmp_path, name, {"spiece.model": model}, "T5Tokenizer")
    if name == "llama-tokenizer.model":
        return _slow(tmp_path, name, {"tokenizer.model": model}, "LlamaTokenizer")
    if name == "gpt2-vocab+merges":
        return _slow(tmp_path, name, {"vocab.json": json.dumps(gpt2_vocab), "merges.txt": "#version: 0.2\na b\n"},
                     "GPT2Tokenizer")
    assert name == "mbart50-sentencepiece.bpe.model"
    return _slow(tmp_path, name, {"sentencepiece.bpe.model": model}, "MBart50Tokenizer")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_family_layout_gives_transformers_tokens(layout, tmp_path, spm):
    """The staged, allow-listed load gives the class and the ids AutoTokenizer gives on the folder itself."""
    folder = _layout(layout, tmp_path, spm)
    ours, error = load_directory_tokenizer(folder)
    if layout.startswith("unknown-class"):
        reference = transformers.TokenizersBackend.from_pretrained(str(folder))
    else:
        reference = AutoTokenizer.from_pretrained(str(folder))
    assert error is None and type(ours) is type(reference)
    ids = reference.encode(TEXT)
    assert ours.encode(TEXT) == ids and ours.decode(ids) == reference.decode(ids)
    assert ours.special_tokens_map == reference.special_tokens_map
    assert ours.name_or_path == folder.name  # never the staging folder


def test_the_real_smollm2_tokenizer_and_template_match_transformers():
    folder = Path(__file__).resolve().parents[2] / "weights" / "SmolLM2-135M-Instruct"
    if not (folder / "tokenizer.json").exists():
        pytest.skip("the SmolLM2 import is not present")
    reference = AutoTokenizer.from_pretrained(str(folder))
    ours, error = load_directory_tokenizer(folder)
    assert error is None and ours.encode(TEXT) == reference.encode(TEXT)
    assert ours.chat_template == reference.chat_template


def test_transformers_5_template_file_takes_precedence_as_in_transformers(tmp_path):
    """chat_template.jinja beats tokenizer_config.json's template (transformers' order); chat_template.json
    (where processors keep it) is read only when neither has one."""
    folder = save_tiny_decoder(tmp_path / "lm")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = "config: {{ messages[0]['content'] }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "chat_template.jinja").write_text("jinja: {{ messages[0]['content'] }}")
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": "json: {{ messages[0]['content'] }}"}))
    reference = AutoTokenizer.from_pretrained(str(folder))
    lm = playground.load_model(folder, limits=LIMITS)
    assert lm.tokenizer.chat_template == reference.chat_template == "jinja: {{ messages[0]['content'] }}"
    (folder / "chat_template.jinja").unlink()
    assert playground.load_model(folder, limits=LIMITS).tokenizer.chat_template.startswith("config:")
    del settings["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    lm = playground.load_model(folder, limits=LIMITS)
    assert lm.tokenizer.chat_template.startswith("json:") and lm.render_chat([{"role": "user", "content": "hi"}]) == "json: hi"


def test_a_transformers_5_save_loads_with_chat(tmp_path):
    """save_pretrained with a chat template writes chat_template.jinja beside a tokenizer_config.json without one."""
    folder = save_tiny_decoder(tmp_path / "lm")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.chat_template = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
    tokenizer.save_pretrained(folder)
    assert (folder / "chat_template.jinja").exists()
    assert "chat_template" not in json.loads((folder / "tokenizer_config.json").read_text())
    lm = playground.load_model(folder, limits=LIMITS)
    assert lm.chat_template_available
    expected = AutoTokenizer.from_pretrained(str(folder)).apply_chat_template(
        [{"role": "user", "content": "ab"}], tokenize=False, add_generation_prompt=True)
    assert lm.render_chat([{"role": "user", "content": "ab"}]) == expected


# --- hostile folders: each refused in one line that names only the checkpoint's own files ---------


def _myt5(tmp_path: Path, name: str, target: str) -> Path:
    """The issue's upload: MyT5's byte_maps.json names a server file, which its tokenizer would open."""
    folder = save_tiny_decoder(tmp_path / name)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (folder / f).unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MyT5Tokenizer"}))
    (folder / "byte_maps.json").write_text(json.dumps({"decompose_map": target, "merge_map": {}}))
    return folder


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd", "/nonexistent/x"])
def test_a_tokenizer_class_that_opens_named_files_is_never_run(target, tmp_path):
    """/dev/zero read forever before; /etc/passwd and /nonexistent told which server files exist. Now all
    three give the same line, fast and in bounded memory, and the model still loads (token ids only)."""
    folder = _myt5(tmp_path, "myt5", target)
    lm = within_bounds(f"MyT5 naming {target}", lambda: playground.load_model(folder, limits=LIMITS))
    why = lm.tokenizer_error
    assert lm.tokenizer is None and "MyT5Tokenizer" in why and "\n" not in why
    for leak in (target, "JSONDecodeError", "Unable to load", str(tmp_path), "root:"):
        assert leak not in why and leak not in json.dumps(lm.info()["tokenizer_error"])
    assert why == load_directory_tokenizer(_myt5(tmp_path, "other", "/etc/passwd"))[1].replace("other", folder.name)
    assert lm.tokenize("1, 2, 3") == [1, 2, 3]  # the page takes token ids instead


def test_auto_map_tokenizer_is_refused_without_the_folder(tmp_path):
    folder = save_tiny_decoder(tmp_path / "remote")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "tokenization_evil.py").write_text("raise SystemExit('ran remote code')\n")
    lm = playground.load_model(folder, limits=LIMITS)
    assert lm.tokenizer is None and "auto_map" in lm.tokenizer_error and str(tmp_path) not in lm.tokenizer_error


@pytest.mark.parametrize("kind", ["link-out", "fifo", "device-link", "too-big", "not-json", "file-setting"])
def test_tokenizer_files_that_are_not_plain_files_inside_are_refused(kind, tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    tokenizer_json = folder / "tokenizer.json"
    if kind == "link-out":
        outside = tmp_path / "secret.json"
        outside.write_text('{"secret": 1}')
        tokenizer_json.unlink()
        tokenizer_json.symlink_to(outside)
    elif kind == "fifo":
        tokenizer_json.unlink()
        os.mkfifo(tokenizer_json)
    elif kind == "device-link":
        (folder / "special_tokens_map.json").symlink_to("/dev/zero")
    elif kind == "too-big":
        with open(folder / "added_tokens.json", "wb") as f:
            f.truncate(65 * 2**20)  # sparse: 65 MiB of zeros, never read
    elif kind == "not-json":
        (folder / "tokenizer_config.json").write_bytes(b"\xff\xfe not json")
    else:  # a setting naming a server file is dropped, not opened
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings.update(vocab_file="/etc/passwd", merges_file="/dev/zero", tokenizer_file="/dev/zero")
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
        tokenizer, error = within_bounds(kind, lambda: load_directory_tokenizer(folder))
        assert error is None and tokenizer.encode("ab") == AutoTokenizer.from_pretrained(str(save_tiny_decoder(
            tmp_path / "clean"))).encode("ab")
        return
    tokenizer, error = within_bounds(kind, lambda: load_directory_tokenizer(folder))
    assert tokenizer is None and "\n" not in error and str(tmp_path) not in error and "/dev" not in error
    assert "token ids" in error


def test_bounded_reads_refuse_devices_links_and_sizes(tmp_path):
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "passwd").symlink_to("/etc/passwd")
    (tmp_path / "big").write_bytes(b"x" * 101)
    for name, fragment in (("zero", "outside"), ("passwd", "outside"), ("big", "over the")):
        with pytest.raises(CheckpointError, match=fragment) as caught:
            read_folder_file(tmp_path, name, 100)
        assert str(tmp_path) not in str(caught.value)
    for name in ("../x", "/etc/passwd", "a/b/c"):
        with pytest.raises(CheckpointError):
            read_folder_file(tmp_path, name, 100)
    assert read_folder_file(tmp_path, "missing", 100) is None and read_folder_file(tmp_path, "big", 101) == b"x" * 101


def test_a_folder_without_config_names_no_server_folder(tmp_path):
    folder = tmp_path / "deep" / "server" / "uploads" / "0123abcd"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{}      ")
    with pytest.raises(PlaygroundError) as caught:
        playground.load_model(folder, limits=LIMITS)
    message = str(caught.value)
    assert message.startswith("0123abcd: no config.json") and str(tmp_path) not in message
    with pytest.raises(PlaygroundError) as caught:
        playground.load_model(tmp_path / "deep" / "nothing-here", limits=LIMITS)
    assert str(tmp_path) not in str(caught.value)


def test_a_tokenizer_that_would_not_fit_the_memory_left_is_refused(tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    tokenizer, error = load_directory_tokenizer(folder, memory_bytes=10_000)
    assert tokenizer is None and "more than the memory left" in error and "token ids" in error
    assert load_directory_tokenizer(folder, memory_bytes=2**30)[1] is None


def test_template_files_have_their_own_small_budget(tmp_path):
    folder = save_tiny_decoder(tmp_path / "lm")
    (folder / "chat_template.jinja").write_text("{{ 'x' }}" * 200_000)  # 1.8 MB
    tokenizer, error = load_directory_tokenizer(folder)
    assert tokenizer is None and error.startswith("chat_template.jinja: 1.7 MiB is over the 1.0 MiB")
    (folder / "chat_template.jinja").unlink()
    (folder / "chat_template.json").write_bytes(b"\xff not json")  # processors' file: ignored when broken
    tokenizer, error = load_directory_tokenizer(folder)
    assert error is None and not tokenizer.chat_template


@pytest.mark.parametrize("target", ["/dev/zero", "/etc/passwd", "/nonexistent/x"])
def test_a_sentencepiece_setting_naming_a_server_file_is_dropped(target, tmp_path, spm):
    """sp_model_kwargs goes to sentencepiece, which opens its `model_file`: before, /etc/passwd and
    /nonexistent gave different errors (and /dev/zero reads forever). Now the setting is dropped and the
    folder's own source.spm is read."""
    folder = _layout("marian", tmp_path, spm)
    reference = AutoTokenizer.from_pretrained(str(folder))
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["sp_model_kwargs"] = {"model_file": target, "model_proto": "x"}
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    tokenizer, error = within_bounds(f"sp_model_kwargs naming {target}", lambda: load_directory_tokenizer(folder))
    assert error is None and tokenizer.encode(TEXT) == reference.encode(TEXT)


def test_our_own_format_s_embedded_settings_cannot_name_files(tmp_path):
    from playground.checkpoints.tokenizer import tokenizer_from_json, tokenizer_to_json

    plain = AutoTokenizer.from_pretrained(str(save_tiny_decoder(tmp_path / "lm")))
    text, settings = tokenizer_to_json(plain)
    hostile = {**settings, "tokenizer_file": "/dev/zero", "gguf_file": "/dev/zero", "vocab_file": "/etc/passwd",
               "name_or_path": "/etc", "sp_model_kwargs": {"model_file": "/dev/zero"}}
    tokenizer = within_bounds("embedded settings naming files", lambda: tokenizer_from_json(text, hostile))
    assert tokenizer.encode("ab c") == plain.encode("ab c") and "/etc" not in json.dumps(tokenizer.init_kwargs, default=str)
    with pytest.raises(CheckpointError):
        tokenizer_from_json(text, ["not", "a", "dict"])


def test_token_id_prompts_without_a_tokenizer(tmp_path):
    lm = playground.load_model(save_tiny_decoder(tmp_path / "lm"), limits=LIMITS, tokenizer=False)
    vocab = lm.config.vocab_size
    assert lm.tokenize("1, 2, 3") == lm.tokenize(" 1 2,3, ") == [1, 2, 3]
    for text, fragment in (("hello", "token ids separated by commas"), (f"1, {vocab}", "outside the vocabulary"),
                           ("1, -2", "token ids"), ("", "token ids")):
        with pytest.raises(PlaygroundError, match=fragment):
            lm.tokenize(text)
    with pytest.raises(PlaygroundError, match="turn chat off"):
        lm.tokenize("1, 2", chat=True)
    result = playground.generate_all(lm, "1, 2, 3", playground.GenerationConfig(max_new_tokens=2, temperature=0.0))
    assert result.token_ids == playground.generate_all(lm, [1, 2, 3], playground.GenerationConfig(
        max_new_tokens=2, temperature=0.0)).token_ids
