"""The benchmark's table, chart and measurements helpers (the timed run itself is for a quiet machine)."""

from __future__ import annotations

import pytest
import torch

from playground.tools import bench

RESULTS = {
    "model": "weights/SmolLM2-135M-Instruct", "device": "cpu", "dtype": "float32", "threads": 2, "torch": "2",
    "python": "3.11", "quick": True, "bandwidth_gb_s": 22.6, "weight_bytes": 538_000_000,
    "bandwidth_ceiling_tokens_per_s": 42.0, "bandwidth_utilisation": 0.7, "capture_slowdown": 0.1,
    "capture_slowdowns": {"app": 0.02, "all layers": 0.1, "residual": 0.05},
    "metrics": [
        {"metric": "greedy decode, 128 new tokens", "unit": "tokens/s", "ours": 30.0, "transformers": 10.0, "speedup": 3.0},
        {"metric": "load time", "unit": "s", "ours": 0.2, "transformers": 0.5, "speedup": 2.5},
        {"metric": "greedy, capture on", "unit": "tokens/s", "ours": 27.0, "transformers": None, "speedup": None},
    ],
}


def test_table_lists_every_metric_with_ratio():
    table = bench.format_table(RESULTS)
    assert "greedy decode, 128 new tokens" in table and "3.00×" in table and "bandwidth utilisation 70%" in table
    assert "one layer's attention, 8 candidates) 2%" in table


def test_the_capture_rows_record_what_they_say(tmp_path):
    """Each named capture records exactly that: the app's live setting one layer, 'all layers' every one."""
    import playground
    from playground.generation import GenerationConfig, generate_all

    lm = playground.load_model(bench.Path(__file__).resolve().parents[2] / "weights" / "tiny-lm")
    ids = lm.tokenize("The list")
    app = generate_all(lm, ids, GenerationConfig(max_new_tokens=2, **bench.CAPTURES["app"](lm)))
    rows = app.path[1].capture.attention["self"]
    assert [r is not None for r in rows] == [i == lm.config.n_layers - 1 for i in range(lm.config.n_layers)]
    assert len(app.path[1].candidates) == 8
    every = generate_all(lm, ids, GenerationConfig(max_new_tokens=2, **bench.CAPTURES["all layers"](lm)))
    assert all(r is not None for r in every.path[1].capture.attention["self"])
    residual = generate_all(lm, ids, GenerationConfig(max_new_tokens=2, **bench.CAPTURES["residual"](lm)))
    assert residual.path[1].capture.residual.shape == (lm.config.n_layers + 1, lm.config.d_model)
    assert generate_all(lm, ids, GenerationConfig(max_new_tokens=2, **bench.CAPTURES["off"](lm))).path[1].capture.residual is None


def test_chart_has_a_panel_per_compared_metric_with_both_values():
    fig = bench.chart(RESULTS)
    compared = [m for m in RESULTS["metrics"] if m["transformers"] is not None]
    assert len(fig.data) == len(compared)
    for trace, m in zip(fig.data, compared):
        assert list(trace.x) == ["ours", "transformers"] and list(trace.y) == [m["ours"], m["transformers"]]
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"{m['metric']} ({m['unit']})" for m in compared]
    assert "bandwidth utilisation 70%" in fig.layout.title.text


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
    assert "the app's live capture (one layer's attention, 8 candidates) +2%" in table
    assert "attention of every layer +10%" in table and "residual stream of every layer +5%" in table
    assert "**70%**" in table and "transformers 5.23.0" in table


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
