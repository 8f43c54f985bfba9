"""The GPU check runs on the CPU at small sizes (--quick), so the script is ready the day a GPU is lent."""

from __future__ import annotations

import json

import pytest
import torch

from playground.tools import gpu_check


def test_the_gpu_check_runs_on_the_cpu_and_prints_one_table(tmp_path, capsys, one_thread):
    out = tmp_path / "check.json"
    code = gpu_check.main(["--device", "cpu", "--quick", "--dtypes", "float32", "--streams", "1", "2", "--new-tokens",
                           "6", "--engines", "ours eager", "ours captured, uncompiled", "transformers eager",
                           "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    result = json.loads(out.read_text())
    (check,) = result["parity"]
    assert check["families"] == len(gpu_check.families()) == check["equal"] and check["worst"] < 1e-5
    assert [(r["streams"], r["live"]) for r in result["rows"]] == [(1, False), (1, True), (2, False), (2, True)]
    for row in result["rows"]:
        assert set(row["rates"]) == {"ours eager", "ours captured, uncompiled"} | (set() if row["live"] else
                                                                                    {"transformers eager"})
        assert row["equal"]["ours captured, uncompiled"] == row["streams"]  # the same tokens as our eager pass
    table = result["table"]
    assert table in printed and table.count("\n| float32 |") == 4 and "12/12 equal" in table


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_without_cuda_it_says_so_in_one_line(capsys):
    assert gpu_check.main([]) == 2  # --device cuda is the default
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "CUDA" in out.err and out.err.startswith("error:")
