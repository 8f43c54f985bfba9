"""The benchmark's table, chart and measurements helpers (the timed run itself is for a quiet machine)."""

from __future__ import annotations

import torch

from playground import bench

RESULTS = {
    "model": "weights/SmolLM2-135M-Instruct", "device": "cpu", "dtype": "float32", "threads": 2, "torch": "2",
    "python": "3.11", "quick": True, "bandwidth_gb_s": 22.6, "weight_bytes": 538_000_000,
    "bandwidth_ceiling_tokens_per_s": 42.0, "bandwidth_utilisation": 0.7, "capture_slowdown": 0.1,
    "metrics": [
        {"metric": "greedy decode, 128 new tokens", "unit": "tokens/s", "ours": 30.0, "transformers": 10.0, "speedup": 3.0},
        {"metric": "load time", "unit": "s", "ours": 0.2, "transformers": 0.5, "speedup": 2.5},
        {"metric": "greedy, capture on", "unit": "tokens/s", "ours": 27.0, "transformers": None, "speedup": None},
    ],
}


def test_table_lists_every_metric_with_ratio():
    table = bench.format_table(RESULTS)
    assert "greedy decode, 128 new tokens" in table and "3.00×" in table and "bandwidth utilisation 70%" in table


def test_chart_has_a_panel_per_compared_metric():
    fig = bench.chart(RESULTS)
    assert len(fig.data) == 2


def test_bandwidth_and_weight_bytes():
    assert bench.streaming_bandwidth(torch.device("cpu"), mib=8, repeats=2) > 1e8
    model = torch.nn.Linear(4, 3)
    assert bench.weight_bytes(model) == (12 + 3) * 4


def test_missing_model_exits_2(tmp_path, capsys):
    assert bench.main(["--model", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("error:")
