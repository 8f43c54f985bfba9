"""The project's command-line tools (benchmarks, load tests, deploy) import and parse their arguments.

They live outside the tests' import graph (nothing in the package imports them), so a module that
moved or a function whose signature changed would otherwise only show when someone runs the tool."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import playground.tools
from playground.cpu import default_threads
from playground.tools import crowd, gpu_bench

TOOLS = sorted(m.name for m in pkgutil.iter_modules(playground.tools.__path__))
LIBRARIES = {"server", "deploy", "gpu_bench", "zerogpu_emulation"}  # helpers of the other tools; deploy runs as `python -m playground deploy`


def test_every_tool_is_listed():
    assert {"bench", "crowd", "deploy", "kernels", "loadtest", "loadtest_page", "server"} <= set(TOOLS)


@pytest.mark.parametrize("name", TOOLS)
def test_tool_imports_and_prints_its_help(name, capsys):
    module = importlib.import_module(f"playground.tools.{name}")
    main = getattr(module, "main", None)
    assert (main is None) == (name in LIBRARIES)
    if main is None:
        return
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_crowd_runs_with_the_apps_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert crowd.app_threads([]) == default_threads(browser_here=True)  # off a Space the app leaves a core
    assert crowd.app_threads(["--threads", "3"]) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert crowd.app_threads([]) == 5


def test_the_crowd_chart_is_an_svg_with_a_bar_per_crowd_and_its_legend():
    import xml.etree.ElementTree as ET

    rows = [(1, 34.0, 26.4, 0.1), (8, 14.1, 72.8, 0.7), (16, 9.3, 102.9, 0.6)]
    root = ET.fromstring(crowd.chart(rows, cli=37.9))
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == "#4c78a8"]
    assert len(bars) == 1 + len(rows)  # one per crowd, and the legend's swatch
    assert {"1", "8", "16", "26", "73", "103"} <= set(texts)
    assert "the CLI, one request" in texts and "each visitor (median)" in texts


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the GPU tools would run")
@pytest.mark.parametrize("tool", ["bench", "crowd"])
def test_the_gpu_tools_say_in_one_line_that_there_is_no_cuda(tool, capsys):
    module = importlib.import_module(f"playground.tools.{tool}")
    assert module.main(["--device", "cuda"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "CUDA" in out.err and out.err.startswith("error:")


def test_the_gpu_benchmark_measures_every_engine_and_checks_each_stream_against_its_solo_run(tmp_path, one_thread):
    """Its code on the CPU with a tiny model of SmolLM2's kind (transformers' static cache is not compiled here)."""
    shape = {**gpu_bench.SMOLLM2_SHAPE, "vocab_size": 256, "hidden_size": 48, "intermediate_size": 96,
             "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 1}
    folder, what = gpu_bench.checkpoint(None, tmp_path, shape)
    assert what.startswith("random weights") and (folder / "config.json").exists()
    rows = gpu_bench.measure(folder, device="cpu", dtypes=("float32",), streams=(1, 3), new_tokens=4, repeats=1,
                             log=lambda line: None)
    assert [(r.streams, r.capture) for r in rows] == [(1, False), (1, True), (3, False), (3, True)]
    for row in rows:
        assert row.rates["ours"] > 0 and row.equal_to_solo == row.streams
        assert (set(row.rates) >= {"eager", "compiled"}) == (not row.capture)
        assert ("ours alone" in row.rates) == (row.streams == 1)
    table = gpu_bench.markdown(rows, what, "CPU")
    assert table.count("\n| float32 |") == 4 and "ours / compiled" in table


def test_the_core_load_test_prints_each_visitor_beside_the_cli_and_transformers(tmp_path, capsys, one_thread):
    """`loadtest --core` on a tiny chat Llama: each visitor's row, the crowd equal to the solo runs, transformers'
    static cache beside it, and the CPU targets said (met or not: a speed is read, never asserted)."""
    from transformers import PreTrainedTokenizerFast

    from playground.tools import loadtest
    from tests.hf_tiny import llama_like, save_decoder
    from tests.ui_fixtures import save_char_tokenizer

    folder = tmp_path / "tiny-chat"
    folder.mkdir()
    save_decoder(folder, "llama", llama_like(vocab_size=256, eos_token_id=2), seed=3)  # transformers draws ids ≥ 100
    save_char_tokenizer(folder)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(folder)
    # more new tokens than the model's context holds: one line that says what to lower, no traceback
    assert loadtest.main(["--core", "--model", str(folder), "--new-tokens", "100000", "--no-transformers"]) == 2
    assert "lower max_new_tokens" in capsys.readouterr().err
    assert loadtest.main(["--core", "--model", str(folder), "--visitors", "1,2", "--new-tokens", "5"]) == 0
    out = capsys.readouterr().out
    assert "1 visitor at once" in out and "2 visitors at once" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| visitor")]
    assert len(rows) == 3 and all("| yes |" in row for row in rows)  # every visitor equal to its solo run
    assert all(row.endswith("| eager (the model was loaded without compile=True) |") for row in rows)
    assert out.count("transformers static cache, ") == 2
    assert "1 visitor: " in out and "2 visitors: the slowest " in out
    # with the captured step (uncompiled here), on a warm server: both visitors in one step of two rows, and again
    # without the page's captures
    assert loadtest.main(["--core", "--model", str(folder), "--visitors", "2", "--new-tokens", "5", "--compile",
                          "eager", "--plain-too", "--no-transformers", "--breakdown"]) == 0
    out = capsys.readouterr().out
    assert "; the captured step synchronous; the CLI alone" in out  # on the CPU a call is computed when launched
    assert "2 visitors at once\n" in out and "2 visitors at once, nothing captured" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| visitor")]
    assert len(rows) == 4 and all(row.endswith("| yes | captured, 2 rows |") for row in rows), rows
    # where the steps went: each crowd's 2 rows a step call, read back by the runs (5 tokens: 4 after the prefill)
    breakdowns = [line for line in out.splitlines() if line.startswith("breakdown, per scheduler step (")]
    assert len(breakdowns) == 2 and all(" rows a step call)" in line and "µs a row" in line for line in breakdowns)
    assert all("(of which its rows read for every run at once " in line for line in breakdowns)
    from playground.generation import batch, shared_step

    assert batch.Scheduler.step.__qualname__ == "Scheduler.step"  # the tool put the scheduler back
    assert shared_step.SharedStep.advance.__qualname__ == "SharedStep.advance"
    assert shared_step.read_rows.__qualname__ == "read_rows"
