"""The training view: the recipe our checkpoints store, and the loss curves training writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from playground.analysis import training_view
from playground.checkpoints.safetensors_io import read_header
from playground.train.__main__ import main as train_main
from playground.train.recipe import Recipe, lr_factor
from playground.viz.training import training_caption, training_figure
from tests.analysis_models import REPO, load

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name,schedule,steps,warmup", [("tiny-lm", "cosine", 700, 100),
                                                        ("tiny-seq2seq", "inverse_sqrt", 4000, 400)])
def test_shipped_defaults_show_their_recipe_and_say_they_have_no_curves(name, schedule, steps, warmup):
    view = training_view(REPO / "weights" / name)
    assert view["available"] and view["schedule"] == schedule and view["steps"] == steps and view["warmup"] == warmup
    assert view["label_smoothing"] == 0.1 and view["clip"] == 1.0 and view["curves"] is None
    recipe = Recipe(steps=steps, lr=view["peak_lr"], warmup=warmup, schedule=schedule)
    np.testing.assert_allclose(view["lr"], [view["peak_lr"] * lr_factor(int(s) - 1, recipe) for s in view["lr_steps"]])
    assert view["lr"].max() == pytest.approx(view["peak_lr"], rel=1e-3)
    assert ("min_lr_ratio" in view["assumed"]) == (schedule == "cosine")  # not stored by older trainers
    assert "No loss curve was saved" in training_caption(view)
    assert len(training_figure(view).data) == 1


def test_hugging_face_checkpoints_have_no_recipe(tmp_path):
    view = training_view(load("gpt2", tmp_path))
    assert not view["available"] and view["reason"] == "no_provenance"
    assert "no training recipe" in training_caption(view)
    assert "no training recipe" in training_figure(view).layout.annotations[0].text


def test_training_now_writes_curves_the_view_draws(tmp_path):
    out = tmp_path / "lm.safetensors"
    args = ["lm", "--steps", "6", "--warmup", "2", "--max-docs", "4", "--vocab-size", "300", "--d-model", "32",
            "--layers", "1", "--heads", "2", "--kv-heads", "1", "--d-ff", "64", "--context", "64", "--batch-size", "4",
            "--eval-every", "3", "--eval-tokens", "64", "--threads", "1", "--out", str(out)]
    assert train_main(args) == 0
    stored = json.loads(read_header(out).metadata["provenance"])
    assert stored["curves"]["step"] == [1, 2, 3, 4, 5, 6] and len(stored["evals"]) == 2
    assert stored["recipe"]["min_lr_ratio"] == 0.1 and stored["recipe"]["clip"] == stored["recipe"]["grad_clip"] == 1.0
    view = training_view(out)
    assert view["available"] and view["assumed"] == [] and view["curves"]["loss"] == stored["curves"]["loss"]
    recipe = Recipe(steps=6, lr=2e-3, warmup=2)
    np.testing.assert_allclose(stored["curves"]["lr"], [2e-3 * lr_factor(s, recipe) for s in range(6)], rtol=1e-5)
    np.testing.assert_allclose(view["lr"], stored["curves"]["lr"], rtol=1e-5)  # the view's schedule is the run's
    fig = training_figure(view)
    assert len(fig.data) >= 3 and "final training loss" in training_caption(view)
