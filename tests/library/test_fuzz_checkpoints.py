"""Fuzzing checkpoint intake: hundreds of mutated safetensors files and configs.

Every load must end in a clean `CheckpointError` or a correct model (finite logits) — no other
exception, no hang.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
from pathlib import Path

import pytest
import torch

import playground
from playground.checkpoints.own_format import save_checkpoint
from playground.config import ModelConfig
from playground.models import build_model
from playground.models.layers import init_weights
from tests.hf_tiny import llama_like, save_decoder
from tests.safetensors_surgery import read_raw, write_raw

MUTATIONS_PER_FORMAT = 300  # two formats: 600 mutated files in all
SECONDS_PER_LOAD = 20


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("hf")
    save_decoder(directory, "llama", llama_like(num_hidden_layers=1, hidden_size=16, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1, vocab_size=31))
    return directory


@pytest.fixture(scope="module")
def own_file(tmp_path_factory) -> Path:
    config = ModelConfig(family="llama", vocab_size=31, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=24)
    torch.manual_seed(0)
    model = build_model(config)
    init_weights(model)
    return save_checkpoint(tmp_path_factory.mktemp("own") / "tiny.safetensors", model, config)


def _mutate(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    header, payload = read_raw(path)
    names = [k for k in header if k != "__metadata__"]
    kind = rng.choice(["flip_header", "flip_any", "truncate", "append", "length_prefix", "offsets", "dtype", "shape", "json", "metadata"])
    if kind == "flip_header":
        n = int.from_bytes(data[:8], "little")
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(8, 8 + n)] = rng.randrange(256)
        path.write_bytes(bytes(data))
    elif kind == "flip_any":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(bytes(data))
    elif kind == "truncate":
        path.write_bytes(bytes(data[: rng.randrange(len(data))]))
    elif kind == "append":
        path.write_bytes(bytes(data) + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64))))
    elif kind == "length_prefix":
        value = rng.choice([0, 1, 7, len(data), 2**63 - 1, int.from_bytes(data[:8], "little") + rng.randint(-9, 9)])
        path.write_bytes(max(0, value).to_bytes(8, "little") + bytes(data[8:]))
    elif kind == "offsets":
        name = rng.choice(names)
        entry = header[name]["data_offsets"]
        entry[rng.randrange(2)] = rng.choice([-1, 0, 3, entry[0] + 1, entry[1] - 1, 2**40, entry[1] * 2])
        write_raw(path, header, payload)
    elif kind == "dtype":
        header[rng.choice(names)]["dtype"] = rng.choice(["F16", "BF16", "I64", "U8", "F64", "BOOL", "Q4", 7, None])
        write_raw(path, header, payload)
    elif kind == "shape":
        name = rng.choice(names)
        header[name]["shape"] = rng.choice([[], [0], [-1, 4], [2**31, 2**31], ["a"], list(reversed(header[name]["shape"])), header[name]["shape"] + [1]])
        write_raw(path, header, payload)
    elif kind == "json":
        choice = rng.choice(["[" * 5000, "{}", "null", '{"a": 1}', json.dumps(header)[:-3], "\xff\xfe"])
        encoded = choice.encode("utf-8", "surrogatepass")
        path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + payload)
    else:
        meta = header.setdefault("__metadata__", {})
        meta[rng.choice(["format", "config", "tokenizer"])] = rng.choice(["playground", "{", "[]", '{"family": 3}', "x" * 100])
        if "config" in meta and rng.random() < 0.5:
            config = json.loads(meta["config"]) if meta["config"].startswith('{"') and "family" in meta["config"] and meta["config"] != '{"family": 3}' else {}
            config.update(rng.choice([{"n_heads": 0}, {"d_model": "16"}, {"n_kv_heads": 3}, {"vocab_size": -5}, {"norm": "batchnorm"}, {"max_positions": 10**12}]))
            meta["config"] = json.dumps(config)
        write_raw(path, header, payload)
    return kind


def _timeout(signum, frame):
    raise TimeoutError("checkpoint load hung")


def _load_checked(target: Path) -> str:
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(SECONDS_PER_LOAD)
    try:
        lm = playground.load_model(target)
    except playground.CheckpointError as error:
        message = str(error)
        assert message and "\n" not in message
        return "refused"
    finally:
        signal.alarm(0)
    logits = lm.logits(torch.tensor([[1, 2, 3]]))
    assert torch.isfinite(logits).all()
    return "loaded"


@pytest.mark.parametrize("fmt", ["hf", "own"])
def test_mutated_checkpoints_fail_cleanly(fmt, hf_dir, own_file, tmp_path):
    rng = random.Random(f"fuzz-{fmt}")
    outcomes = {"refused": 0, "loaded": 0}
    for i in range(MUTATIONS_PER_FORMAT):
        if fmt == "hf":
            target = tmp_path / f"case{i}"
            shutil.copytree(hf_dir, target)
            weights = target / "model.safetensors"
        else:
            target = weights = tmp_path / f"case{i}.safetensors"
            shutil.copy(own_file, weights)
        kind = _mutate(weights, rng)
        try:
            outcomes[_load_checked(target)] += 1
        except Exception as error:  # report which mutation crashed the loader
            raise AssertionError(f"mutation {i} ({kind}) raised {type(error).__name__}: {error}") from error
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    assert outcomes["refused"] > MUTATIONS_PER_FORMAT // 2, outcomes


CONFIG_MUTATIONS = [
    {"num_attention_heads": 0}, {"num_attention_heads": 5}, {"num_key_value_heads": 3}, {"hidden_size": "48"},
    {"hidden_size": -48}, {"vocab_size": 10}, {"intermediate_size": None}, {"num_hidden_layers": 3},
    {"rms_norm_eps": -1}, {"max_position_embeddings": 10**9}, {"hidden_act": "exotic"}, {"head_dim": 7},
    {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}}, {"rope_parameters": "x"},
    {"model_type": None}, {"tie_word_embeddings": True},
]


@pytest.mark.parametrize("change", CONFIG_MUTATIONS, ids=[next(iter(c)) + str(i) for i, c in enumerate(CONFIG_MUTATIONS)])
def test_mutated_configs_fail_cleanly(change, hf_dir, tmp_path):
    target = tmp_path / "case"
    shutil.copytree(hf_dir, target)
    config = json.loads((target / "config.json").read_text())
    config.update(change)
    (target / "config.json").write_text(json.dumps(config))
    outcome = _load_checked(target)
    if change in ({"tie_word_embeddings": True},):
        assert outcome == "loaded"  # a tied head simply ignores lm_head.weight, like transformers
    else:
        assert outcome == "refused"


def test_model_over_memory_budget_is_refused_with_numbers(hf_dir):
    from playground.checkpoints.limits import Limits

    with pytest.raises(playground.CheckpointError) as caught:
        playground.load_model(hf_dir, limits=Limits(max_file_bytes=10**9, memory_budget_bytes=10_000))
    message = str(caught.value)
    assert "memory budget is 0.0 MiB" in message and "MiB of weights" in message and "KV cache" in message
    with pytest.raises(playground.CheckpointError, match="exceeds the"):
        playground.load_model(hf_dir, limits=Limits(max_file_bytes=1000, memory_budget_bytes=10**9))
