"""The analyses' figure builders stay pure: no torch, no Gradio, strings in one TEXT dict per module."""

from __future__ import annotations

import subprocess
import sys

import pytest

MODULES = ("attention_steps", "logit_lens", "kv_lesson", "positional_compare", "patterns", "sdpa", "anatomy",
           "training")


def test_figure_modules_import_neither_torch_nor_gradio():
    imports = "; ".join(f"import playground.viz.{m}" for m in MODULES)
    code = f"import sys; {imports}; print('torch' in sys.modules, 'gradio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


@pytest.mark.parametrize("module", MODULES)
def test_each_module_keeps_its_user_facing_strings_in_its_table(module):
    import importlib

    text = importlib.import_module(f"playground.viz.{module}")._T("en")
    assert isinstance(text, dict) and text
