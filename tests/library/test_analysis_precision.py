"""The precision what-if analysis: aligned branches of one prompt in float32 and lower weight precisions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers

import playground
from playground.analysis.precision import (
    compare_precisions,
    error_entry,
    kl_per_step,
    relative_errors,
    top1_agreement,
)
from playground.generation import GenerationConfig, generate_all
from playground.models.layers import Linear
from playground.models.quantize import INT4_GROUP, PRECISIONS
from playground.tools.precision_bench import table
from playground.variants import weight_bytes_per_token
from tests.hf_tiny import llama_like, save_decoder, save_seq2seq, t5_like

transformers.logging.set_verbosity_error()


def test_pure_measures():
    a = np.array([[2.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    b = np.array([[2.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
    kl = kl_per_step(a, b)
    p, q = np.exp(a[1]) / np.exp(a[1]).sum(), np.exp(b[1]) / np.exp(b[1]).sum()
    assert kl[0] == 0.0 and kl[1] == pytest.approx(float((p * np.log(p / q)).sum()), rel=1e-12)
    assert top1_agreement(a, b).tolist() == [True, False]
    assert relative_errors(np.array([[3.0, 4.0]]), np.array([[3.0, 5.0]])).tolist() == [pytest.approx(0.2)]
    assert error_entry([0.0, 0.01, 0.02, 0.5, 0.51]) == 3 and error_entry([0.3, 0.31]) == 0 and error_entry([]) is None


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_decoder(directory, "llama", llama_like(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                                num_key_value_heads=2, vocab_size=112, num_hidden_layers=3), init_std=0.1)
    return playground.load_model(directory)


def test_branches_are_aligned_on_the_float32_tokens(llama, one_thread):
    cfg = GenerationConfig(max_new_tokens=12)
    report = compare_precisions(llama, [5, 9, 23, 40, 7], cfg)
    assert [b.precision for b in report.branches] == list(PRECISIONS)
    assert report.reference_ids == generate_all(llama, [5, 9, 23, 40, 7], cfg).token_ids
    exact = report.branch("float32")
    assert exact.first_difference is None and exact.kl == [0.0] * 12 and all(exact.top1)
    assert exact.residual_error == [] and exact.residual_reason == "none" and exact.token_ids == report.reference_ids
    int4 = report.branch("int4")
    assert int4.first_difference is not None  # int4 on this tiny random model changes the text
    d = int4.first_difference
    assert int4.token_ids[:d] == report.reference_ids[:d] and int4.token_ids[d] != report.reference_ids[d]
    # greedy: on the shared prefix both chose their top token, so the teacher-forced top-1 agrees before the
    # first difference and not at it; after it the steps stay comparable (same prefix, float32's tokens)
    assert all(int4.top1[:d]) and not int4.top1[d] and len(int4.kl) == len(int4.top1) == 12
    assert int4.kl[d] > 0 and int4.mean_kl > report.branch("int8").mean_kl
    assert int4.residual_step == d and int4.residual_reason == "first difference"
    errors = np.array(int4.residual_error)
    assert errors.shape == (llama.config.n_layers + 1,) and errors[0] > 0  # the embedding is quantised too
    assert 0 <= int4.error_entry <= llama.config.n_layers
    for b in report.branches:
        assert b.tokens_per_s > 0 and len(b.kl) == 12
    data = json.loads(json.dumps(report.to_dict()))
    assert data["branches"][4]["precision"] == "int4" and data["branches"][4]["first_difference"] == d


def test_residual_error_is_the_engines_capture_at_that_step(llama, one_thread):
    report = compare_precisions(llama, [5, 9, 23, 40, 7], GenerationConfig(max_new_tokens=12), ["int8"])
    branch = report.branches[0]
    step = branch.residual_step
    assert step is not None
    probe = GenerationConfig(max_new_tokens=1, capture_residual=True)
    ref = generate_all(llama, [5, 9, 23, 40, 7], probe, forced_prefix=report.reference_ids[:step]).steps[0].residual
    low = generate_all(llama, [5, 9, 23, 40, 7], probe.replace(weight_precision="int8"),
                       forced_prefix=report.reference_ids[:step]).steps[0].residual
    expected = np.linalg.norm(low - ref, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert np.allclose(branch.residual_error, expected, rtol=1e-6)


def test_weight_bytes_per_token_count_each_matrix_once_at_its_precision(llama):
    linears = [m.weight for m in llama.model.modules() if isinstance(m, Linear)]
    small = sum(p.numel() for p in llama.model.parameters() if p.dim() == 1)
    d = llama.config.d_model
    weights = sum(w.numel() for w in linears)  # the untied head is a Linear; the embedding: one row per token
    assert llama.model.lm_head is not None
    assert weight_bytes_per_token(llama, "float32") == 4 * (weights + d + small)
    assert weight_bytes_per_token(llama, "int8") == round(sum(w.numel() + 4 * w.shape[1] for w in linears)
                                                          + (d + 4) + 4 * small)
    assert weight_bytes_per_token(llama, "int4") == round(weights * (0.5 + 4 / INT4_GROUP) + d * (0.5 + 4 / INT4_GROUP)
                                                          + 4 * small)
    assert weight_bytes_per_token(llama, None) == weight_bytes_per_token(llama, "float32")


def test_seq2seq_branches(tmp_path, one_thread):
    save_seq2seq(tmp_path, "t5", t5_like(d_model=64, d_kv=16, d_ff=96), init_std=0.1)
    lm = playground.load_model(tmp_path)
    report = compare_precisions(lm, [5, 9, 23, 1], GenerationConfig(max_new_tokens=6), ["float32", "int4"])
    int4 = report.branch("int4")
    assert len(int4.kl) == len(report.reference_ids) and int4.mean_kl > 0
    assert int4.residual_step is not None and len(int4.residual_error) == lm.config.n_layers + 1


def test_bench_table_has_a_row_per_branch(llama, one_thread):
    report = compare_precisions(llama, [5, 9, 23], GenerationConfig(max_new_tokens=4), ["float32", "int4"])
    rows = [{**b.to_dict(), "ratio": 1.0} for b in report.branches]
    text = table(rows)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[2].startswith("| float32 | float32 | no |") and "| int4 | float32 | yes |" in lines[3]


def test_precision_bench_prints_the_table(tmp_path, capsys, one_thread):
    from playground.tools.precision_bench import CHOICES, main
    from tests.conftest import REPO_ROOT

    out = tmp_path / "bench.json"
    assert main(["--model", str(REPO_ROOT / "weights" / "tiny-lm"), "--new-tokens", "4", "--rounds", "2",
                 "--json", str(out)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + len(CHOICES)
    data = json.loads(out.read_text())
    rows = {r["label"]: r for r in data["rows"]}
    assert set(rows) == {"float32", "bfloat16", "bfloat16 (simulated)", "float16", "float16 (native)", "int8", "int4"} \
        or set(rows) >= {"float32", "bfloat16 (simulated)", "int8", "int4"}  # without native kernels labels merge
    assert rows["float32"]["ratio"] == 1.0 and rows["int4"]["simulated"] is True
    assert rows["int4"]["weight_bytes_per_token"] < rows["int8"]["weight_bytes_per_token"] < rows["float32"]["weight_bytes_per_token"]
    assert data["rounds"] == 2
