"""Broken or hostile checkpoint files give one clear error naming the file and the problem."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import playground
from tests.hf_tiny import llama_like, save_decoder
from tests.safetensors_surgery import drop_tensor, read_raw, reshape_tensor, write_raw

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("good")
    save_decoder(directory, "llama", llama_like(num_key_value_heads=2))
    return directory


@pytest.fixture
def broken(good, tmp_path) -> Path:
    directory = tmp_path / "broken"
    shutil.copytree(good, directory)
    return directory


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "playground", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def _expect(directory: Path, *fragments: str) -> str:
    with pytest.raises(playground.CheckpointError) as caught:
        playground.load_model(directory)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    return message


def test_good_checkpoint_loads(good):
    assert playground.load_model(good).config.n_kv_heads == 2


def test_truncated_file(broken):
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    _expect(broken, "model.safetensors", "truncated")


def test_truncated_inside_header(broken):
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:50])
    _expect(broken, "model.safetensors", "truncated")


def test_header_offsets_lie(broken):
    weights = broken / "model.safetensors"
    header, payload = read_raw(weights)
    name = sorted(k for k in header if k != "__metadata__")[0]
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin, end + 10_000_000]
    write_raw(weights, header, payload)
    _expect(broken, "model.safetensors", name)


def test_missing_tensor(broken):
    drop_tensor(broken / "model.safetensors", "model.layers.1.mlp.down_proj.weight")
    _expect(broken, "broken", "missing tensor 'model.layers.1.mlp.down_proj.weight'")


def test_wrong_shaped_tensor(broken):
    weights = broken / "model.safetensors"
    header, _ = read_raw(weights)
    rows, cols = header["model.layers.0.self_attn.k_proj.weight"]["shape"]
    reshape_tensor(weights, "model.layers.0.self_attn.k_proj.weight", [cols, rows])
    _expect(broken, "broken", f"'model.layers.0.self_attn.k_proj.weight' ({cols}, {rows})", "shape")


def test_unknown_model_type(broken):
    config = json.loads((broken / "config.json").read_text())
    config["model_type"] = "nonsense-lm"
    (broken / "config.json").write_text(json.dumps(config))
    _expect(broken, "config.json", "'nonsense-lm' is not supported")


def test_unsupported_rope_scaling_is_refused(broken):
    config = json.loads((broken / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
    (broken / "config.json").write_text(json.dumps(config))
    _expect(broken, "config.json", "yarn", "not implemented")


class _Payload:
    def __reduce__(self):
        return (print, ("pickle payload executed",))


def test_pickle_file_is_refused_without_unpickling(tmp_path):
    evil = tmp_path / "pytorch_model.bin"
    evil.write_bytes(pickle.dumps(_Payload()))
    (tmp_path / "config.json").write_text(json.dumps(llama_like(model_type="llama")))
    message = _expect(tmp_path, "pytorch_model.bin", "pickle")
    assert "safetensors" in message
    _expect(evil, "pytorch_model.bin", "arbitrary code")


@pytest.mark.parametrize(
    "damage",
    ["truncate", "unknown_type", "pickle"],
)
def test_cli_reports_one_line_and_exit_2(broken, tmp_path, damage):
    target = broken
    if damage == "truncate":
        weights = broken / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-7])
    elif damage == "unknown_type":
        config = json.loads((broken / "config.json").read_text())
        config["model_type"] = "nonsense-lm"
        (broken / "config.json").write_text(json.dumps(config))
    else:
        target = tmp_path / "model.pt"
        target.write_bytes(pickle.dumps(_Payload()))
    result = _cli("info", "--model", str(target), "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr


def test_info_json(good):
    result = _cli("info", "--model", str(good), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["family"] == "llama" and info["kind"] == "decoder"
    assert info["positional_encoding"] == "rope"
    assert info["config"]["n_kv_heads"] == 2
    lm = playground.load_model(good)
    assert info["parameters"] == lm.parameter_count
    assert info["file_bytes"] == (good / "model.safetensors").stat().st_size
    assert info["dtype"] == "float32"
