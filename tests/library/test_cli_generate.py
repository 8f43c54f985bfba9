"""`python -m playground generate --json`: the fields DESIGN.md promises, and one-line errors with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from playground.cli import main
from tests.conftest import REPO_ROOT
from tests.hf_tiny import llama_like, save_decoder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cli-llama")
    reference = save_decoder(directory, "llama", llama_like(num_attention_heads=4, num_key_value_heads=2))
    return directory, reference


def test_generate_json_fields_and_greedy_ids(checkpoint, capsys):
    directory, reference = checkpoint
    code = main(["generate", "--model", str(directory), "--input-ids", "5,9,23,40", "--max-new-tokens", "6", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"token_ids", "text", "sequences", "cache", "timing"}
    assert set(out["timing"]) >= {"prefill_ms", "decode_ms_per_token", "tokens_per_s"}
    with torch.no_grad():
        expected = reference.generate(torch.tensor([[5, 9, 23, 40]]), max_new_tokens=6, do_sample=False)[0, 4:].tolist()
    assert out["token_ids"] == expected
    assert out["cache"]["bytes"] == 2 * 2 * 1 * 2 * out["cache"]["tokens"] * 12 * 4
    assert out["sequences"][0]["token_ids"] == expected


def test_generate_beam_json_has_n_best(checkpoint, capsys):
    directory, _ = checkpoint
    code = main(["generate", "--model", str(directory), "--input-ids", "5,9,23", "--max-new-tokens", "5",
                 "--num-beams", "3", "--length-penalty", "0.6", "--early-stopping", "--no-cache", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["sequences"]) == 3
    scores = [s["score"] for s in out["sequences"]]
    assert scores == sorted(scores, reverse=True)
    assert out["token_ids"] == out["sequences"][0]["token_ids"]


def test_generate_with_a_weight_precision(checkpoint, capsys):
    directory, _ = checkpoint
    base = ["generate", "--model", str(directory), "--input-ids", "5,9,23,40", "--max-new-tokens", "6", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "precision" not in plain
    assert main(base + ["--weight-precision", "float32"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert exact["token_ids"] == plain["token_ids"] and exact["sequences"] == plain["sequences"]  # bitwise scores
    assert main(base + ["--weight-precision", "int4"]) == 0
    int4 = json.loads(capsys.readouterr().out)
    assert int4["precision"]["precision"] == "int4" and int4["precision"]["simulated"] is True
    assert int4["sequences"][0]["score"] != plain["sequences"][0]["score"]


@pytest.mark.parametrize(
    "extra",
    [
        ["--temperature", "-1"],
        ["--top-p", "0"],
        ["--num-beams", "0"],
        ["--max-new-tokens", "100000"],
        ["--input-ids", "1,x"],
        ["--input-ids", "5,100000"],
        ["--max-new-tokens", "many"],
        ["--weight-precision", "fp8"],
    ],
)
def test_bad_settings_exit_2_with_one_line(checkpoint, capsys, extra):
    directory, _ = checkpoint
    args = ["generate", "--model", str(directory), "--json"]
    if extra[0] != "--input-ids":
        args += ["--input-ids", "5,9"]
    try:
        code = main(args + extra)
    except SystemExit as exit_:  # argparse type errors
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in err


def test_missing_model_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "playground", "generate", "--model", str(tmp_path / "nope"), "--prompt", "hi", "--json"],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr


def test_generate_with_a_kv_window_and_rope_scaling(checkpoint, capsys):
    directory, _ = checkpoint
    args = ["generate", "--model", str(directory), "--input-ids", "5,9,23,40,7,11", "--max-new-tokens", "10", "--json"]
    assert main(args + ["--kv-window", "4", "--kv-sink", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cache"]["policy"]["window"] == 4 and out["cache"]["kept_positions"] == 5
    assert out["cache"]["bytes"] == 2 * 2 * 1 * 2 * 5 * 12 * 4
    assert main(args + ["--rope-scaling", "yarn:2"]) == 0
    assert json.loads(capsys.readouterr().out)["cache"]["policy"]["rope_scaling"]["attention_factor"] > 1
    assert main(args + ["--rope-scaling", "sideways:2"]) == 2
    err = capsys.readouterr().err
    assert "rope_scaling" in err and err.count("\n") == 1
