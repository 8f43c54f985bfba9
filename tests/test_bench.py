"""The benchmark's table, chart and measurements helpers (the timed run itself is for a quiet machine)."""

from __future__ import annotations

import pytest
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


def test_markdown_table_has_units_ratios_and_the_bandwidth_line():
    table = bench.markdown_table({**RESULTS, "transformers_version": "5.23.0"})
    lines = table.splitlines()
    assert lines[:2] == ["| metric | ours | transformers | ratio |", "|---|---|---|---|"]
    assert "| greedy decode, 128 new tokens | 30.0 tokens/s | 10.0 tokens/s | 3.00× |" in lines
    assert "| load time | 0.20 s | 0.50 s | 2.50× |" in lines
    assert "| greedy, capture on | 27.0 tokens/s | – | – |" in lines
    assert "10% slower than off" in table and "**70%**" in table and "transformers 5.23.0" in table


def test_update_readme_replaces_only_the_marked_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nbefore\n{bench.README_START}\nold table\n{bench.README_END}\n\nafter\n")
    bench.update_readme(readme, RESULTS)
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n") and text.endswith(f"{bench.README_END}\n\nafter\n")
    assert "old table" not in text
    assert text.count(bench.markdown_table(RESULTS)) == 1


def test_update_readme_without_markers_is_refused(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(ValueError, match="bench-table"):
        bench.update_readme(readme, RESULTS)
    assert readme.read_text() == "no markers here\n"


def test_quick_runs_are_not_written_into_a_readme(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"{bench.README_START}\n{bench.README_END}\n")
    assert bench.main(["--quick", "--readme", str(readme)]) == 2
    assert "--quick" in capsys.readouterr().err
