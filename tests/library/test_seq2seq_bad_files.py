"""Broken or hostile seq2seq checkpoints (T5 / BART / Marian folders and our own `transformer` files)
give one clear `CheckpointError` naming the file and the problem, never a crash."""

from __future__ import annotations

import json
import pickle
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

import playground
from playground.checkpoints.families.transformer import transformer_config
from playground.checkpoints.own_format import save_checkpoint
from playground.models import build_model
from playground.models.layers import init_weights
from tests.hf_tiny import bart_like, marian_like, save_seq2seq, t5_like
from tests.library.test_fuzz_checkpoints import _mutate
from tests.safetensors_surgery import drop_tensor, read_raw, reshape_tensor, write_raw

transformers.logging.set_verbosity_error()
ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(vocab_size=31, d_model=16, d_ff=24)


@pytest.fixture(scope="module")
def good_dirs(tmp_path_factory) -> dict[str, Path]:
    made = {}
    for family, kwargs in (
        ("t5", t5_like(**SMALL, d_kv=4, num_layers=1)),
        ("bart", bart_like(vocab_size=31, d_model=16, encoder_ffn_dim=24, decoder_ffn_dim=24, encoder_layers=1, decoder_layers=1)),
        ("marian", marian_like(vocab_size=31, d_model=16, encoder_ffn_dim=24, decoder_ffn_dim=24, encoder_layers=1,
                               decoder_layers=1, pad_token_id=30, decoder_start_token_id=30)),
    ):
        directory = tmp_path_factory.mktemp(family)
        save_seq2seq(directory, family, kwargs)
        made[family] = directory
    return made


@pytest.fixture(scope="module")
def own_file(tmp_path_factory) -> Path:
    config = transformer_config(31, d_model=16, n_layers=1, n_encoder_layers=1, n_heads=2, d_ff=24, max_positions=16)
    torch.manual_seed(0)
    model = build_model(config)
    init_weights(model)
    return save_checkpoint(tmp_path_factory.mktemp("own") / "tiny-seq2seq.safetensors", model, config)


@pytest.fixture(params=["t5", "bart", "marian"])
def broken(request, good_dirs, tmp_path) -> tuple[str, Path]:
    directory = tmp_path / "broken"
    shutil.copytree(good_dirs[request.param], directory)
    return request.param, directory


@pytest.fixture
def broken_own(own_file, tmp_path) -> Path:
    return Path(shutil.copy(own_file, tmp_path / "broken.safetensors"))


def _expect(target: Path, *fragments: str) -> str:
    with pytest.raises(playground.CheckpointError) as caught:
        playground.load_model(target)
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "\n" not in message
    return message


def _works(target: Path, *, finite: bool = True) -> torch.Tensor:
    lm = playground.load_model(target)
    assert lm.kind == "seq2seq"
    start = lm.config.decoder_start_token_id
    logits = lm.logits(torch.tensor([[3, 4, 5]]), torch.tensor([[start, 3]]))
    assert logits.shape == (1, 2, lm.config.vocab_size)
    if finite:
        assert torch.isfinite(logits).all()
    return logits


# Tensors to damage per family: (a decoder cross-attention key, an encoder FFN input matrix (non-square)).
TENSORS = {
    "t5": ("decoder.block.0.layer.1.EncDecAttention.k.weight", "encoder.block.0.layer.1.DenseReluDense.wi.weight"),
    "bart": ("model.decoder.layers.0.encoder_attn.k_proj.weight", "model.encoder.layers.0.fc1.weight"),
    "marian": ("model.decoder.layers.0.encoder_attn.v_proj.weight", "model.encoder.layers.0.fc1.weight"),
}


def test_good_checkpoints_load(good_dirs, own_file):
    for directory in good_dirs.values():
        _works(directory)
    _works(own_file)


def test_truncated_file(broken, broken_own):
    _, directory = broken
    for weights, target in ((directory / "model.safetensors", directory), (broken_own, broken_own)):
        weights.write_bytes(weights.read_bytes()[:-100])
        _expect(target, weights.name, "truncated")


def test_truncated_inside_header(broken):
    _, directory = broken
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:50])
    _expect(directory, "model.safetensors", "truncated")


def test_header_offsets_lie(broken_own):
    header, payload = read_raw(broken_own)
    name = sorted(k for k in header if k != "__metadata__")[0]
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin, end + 10_000_000]
    write_raw(broken_own, header, payload)
    _expect(broken_own, broken_own.name, name)


def test_missing_cross_attention_tensor(broken):
    family, directory = broken
    name = TENSORS[family][0]
    drop_tensor(directory / "model.safetensors", name)
    _expect(directory, "broken", f"missing tensor '{name}'")


def test_missing_tensor_in_own_file(broken_own):
    drop_tensor(broken_own, "decoder.blocks.0.cross.kv.weight")
    _expect(broken_own, broken_own.name, "decoder.blocks.0.cross.kv.weight")


def test_wrong_shaped_tensor(broken):
    family, directory = broken
    name = TENSORS[family][1]
    weights = directory / "model.safetensors"
    rows, cols = read_raw(weights)[0][name]["shape"]
    reshape_tensor(weights, name, [cols, rows])
    _expect(directory, "broken", f"'{name}' ({cols}, {rows})", "shape")


def test_unexpected_extra_tensor(broken):
    _, directory = broken
    weights = directory / "model.safetensors"
    header, payload = read_raw(weights)
    header["decoder.extra_adapter.weight"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(payload), len(payload) + 4]}
    write_raw(weights, header, payload + struct.pack("<f", 1.0))
    _expect(directory, "unexpected tensor 'decoder.extra_adapter.weight'")


def test_nan_weights_are_refused(broken, broken_own):
    _, directory = broken
    for weights, target in ((directory / "model.safetensors", directory), (broken_own, broken_own)):
        header, payload = read_raw(weights)
        name = sorted(k for k in header if k != "__metadata__" and header[k]["dtype"] == "F32")[-1]
        begin, _ = header[name]["data_offsets"]
        payload = payload[:begin] + struct.pack("<f", float("nan")) + payload[begin + 4 :]
        write_raw(weights, header, payload)
        _expect(target, "NaN")


def test_unknown_model_type(broken):
    _, directory = broken
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = "nonsense-seq2seq"
    (directory / "config.json").write_text(json.dumps(config))
    _expect(directory, "config.json", "'nonsense-seq2seq' is not supported")


@pytest.mark.parametrize(
    "family, change, fragment",
    [
        ("t5", {"feed_forward_proj": "gated-gelu-extra"}, "feed_forward_proj"),
        ("t5", {"feed_forward_proj": "exotic"}, "activation 'exotic'"),
        ("t5", {"num_heads": 0}, "n_heads"),
        ("t5", {"d_kv": "8"}, "head_dim"),
        ("bart", {"encoder_attention_heads": 3}, "not divisible by n_encoder_heads (3)"),
        ("bart", {"encoder_ffn_dim": 30}, "does not fit encoder.blocks.0.mlp.fc1.weight"),
        ("bart", {"max_position_embeddings": 3}, "does not fit encoder.positions.weight"),
        ("bart", {"encoder_layers": 2}, "missing tensor"),
        ("marian", {"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings"),
        ("marian", {"decoder_vocab_size": 7}, "decoder_vocab_size"),
        ("marian", {"d_model": None}, "d_model"),
    ],
)
def test_bad_configs_are_refused(good_dirs, tmp_path, family, change, fragment):
    directory = tmp_path / "case"
    shutil.copytree(good_dirs[family], directory)
    config = json.loads((directory / "config.json").read_text())
    config.update(change)
    (directory / "config.json").write_text(json.dumps(config))
    _expect(directory, fragment)


@pytest.mark.parametrize(
    "change, fragment",
    [({"positional": "rope"}, "RoPE"), ({"n_encoder_layers": 0}, "n_encoder_layers"), ({"sinusoidal_layout": "x"}, "sinusoidal_layout")],
)
def test_bad_own_config_is_refused(broken_own, change, fragment):
    header, payload = read_raw(broken_own)
    config = json.loads(header["__metadata__"]["config"])
    config.update(change)
    header["__metadata__"]["config"] = json.dumps(config)
    write_raw(broken_own, header, payload)
    _expect(broken_own, broken_own.name, fragment)


class _Payload:
    def __reduce__(self):
        return (print, ("pickle payload executed",))


def test_pickle_file_is_refused_without_unpickling(tmp_path, good_dirs):
    shutil.copy(good_dirs["bart"] / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload()))
    message = _expect(tmp_path, "pytorch_model.bin", "pickle")
    assert "safetensors" in message
    _expect(tmp_path / "pytorch_model.bin", "pytorch_model.bin", "arbitrary code")


def test_cli_info_and_one_line_errors(good_dirs, broken_own):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "playground", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)

    result = cli("info", "--model", str(good_dirs["t5"]), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["kind"] == "seq2seq" and info["family"] == "t5" and info["positional_encoding"] == "relative"
    broken_own.write_bytes(broken_own.read_bytes()[:-9])
    result = cli("info", "--model", str(broken_own), "--json")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr


MUTATIONS = 60  # per format; the decoder fuzz test covers the reader itself with hundreds more


@pytest.mark.parametrize("fmt", ["bart", "own"])
def test_mutated_seq2seq_checkpoints_fail_cleanly(fmt, good_dirs, own_file, tmp_path):
    rng = random.Random(f"fuzz-seq2seq-{fmt}")
    outcomes = {"refused": 0, "loaded": 0, "nonfinite": 0}
    for i in range(MUTATIONS):
        if fmt == "own":
            target = weights = tmp_path / f"case{i}.safetensors"
            shutil.copy(own_file, weights)
        else:
            target = tmp_path / f"case{i}"
            shutil.copytree(good_dirs[fmt], target)
            weights = target / "model.safetensors"
        kind = _mutate(weights, rng)
        try:
            try:
                # A flipped payload byte can make a valid file with absurd but finite weights (say 8e22),
                # whose logits overflow: garbage in, garbage out, not a loader failure.
                logits = _works(target, finite=kind not in ("flip_any",))
                outcomes["loaded"] += 1
                outcomes["nonfinite"] += int(not torch.isfinite(logits).all())
            except playground.CheckpointError as error:
                assert str(error) and "\n" not in str(error)
                outcomes["refused"] += 1
        except Exception as error:  # name the mutation that crashed the loader
            raise AssertionError(f"mutation {i} ({kind}) raised {type(error).__name__}: {error}") from error
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    assert outcomes["refused"] > MUTATIONS // 2, outcomes
