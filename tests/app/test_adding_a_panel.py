"""Adding a panel is its module, its figure and its words: nothing else of the package changes.

A copy of the package gains a toy panel (each generated token's probability against a bar the visitor moves, and a
job that counts the run's distinct tokens): `app/panels/toy.py`, `viz/toy.py` and its words at the end of both locale
files. In a fresh interpreter that imports the copy, the toy is a tab of the whole app: in its section of the
registry, built from its layout with its ids and words, relabelled by the language switch, its view drawn when its
tab opens and redrawn when its control moves, its job served by the one job handler and its result drawn."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.app.test_adding_an_experiment import REPO, _add_words, _changed

TOY = '''"""A toy panel: each generated token's probability against a bar the visitor moves, and a job that counts the
run's distinct tokens."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from playground.app.jobs import Progress
from playground.app.tab import Action, JobRequest, Out, Row, Tab, Widget, Words
from playground.app.view import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.viz import toy as figures


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    return {"number": run.number, "bar": float(sel.values.get("toy_bar", 0.5)), "probs": [s.prob for s in run.path],
            "distinct": run.results.get("toy_count")}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    return {"toy_plot": shown(figures.probs_figure(d["probs"], d["bar"], lang=lang))}


def caption(d: dict[str, Any], lang: str) -> str:
    words = t("toy_caption", lang, n=d["number"], bar=d["bar"])
    return words if d["distinct"] is None else words + " " + t("toy_counted", lang, k=d["distinct"])


def idle(lang: str, words: str) -> Drawn:
    return {"toy_plot": HIDDEN}


def count(req: JobRequest) -> Iterator[Any]:
    yield Progress("count", 0, 1)
    yield len({s.token_id for s in req.run.path})


VIEW = View("toy", "toy", frozenset({"finished", "controls"}), ("toy_md", "toy_plot"), compute, draw, caption, idle,
            waits="toy_needs_run", busy="toy_needs_run")

TAB = Tab(tab="toy", elem_id="toy-tab", section="machine", order=99, view=VIEW, needs_run="toy_needs_run", layout=(
    Words("toy_intro", ("toy_intro",), "toy-intro"),
    Row((Widget("toy_bar", "slider", "toy_bar", "toy-bar", default=0.5, low=0, high=1, step=0.05, view=True),
         Action("toy_count", "job", "toy_count", "toy-count-btn", run=count, out="toy_md", progress="toy_progress"))),
    Out("toy_md", "markdown", "toy-md", words="toy_needs_run"),
    Out("toy_plot", "plot", "toy-plot")))
'''

FIGURE = '''"""The toy panel's figure: each step's chosen-token probability against the visitor's bar."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import finish
from playground.viz._language import texts

_T = texts("toy")


def probs_figure(probs: Sequence[float], bar: float, lang: str = "en") -> go.Figure:
    words = _T(lang)
    fig = go.Figure(go.Bar(x=[step_number(i) for i in range(len(probs))], y=list(probs), name=words["chosen"]))
    fig.add_hline(y=bar, line_dash="dash")
    return finish(fig, words["title"].format(bar=bar), height=320)
'''

WORDS = {
    "page": {
        "tab_toy": ["Probability bar", "概率门槛"],
        "toy_intro": ["**A bar.** Each token's probability against a bar you move.",
                      "**门槛。** 每个 token 的概率与你移动的门槛对比。"],
        "toy_bar": ["Bar", "门槛"],
        "toy_count": ["Count the distinct tokens", "统计不同的 token"],
        "toy_progress": ["Counting {done} of {total}…", "正在统计 {done}/{total}……"],
        "toy_needs_run": ["Generate once: the bar reads that run.", "先生成一次:门槛读取那次运行。"],
        "toy_caption": ["Run {n}'s tokens against the bar at {bar:g}.", "第 {n} 次运行的 token 与 {bar:g} 的门槛。"],
        "toy_counted": ["It has {k} distinct tokens.", "共有 {k} 个不同的 token。"],
    },
    "figures": {"toy": {"chosen": ["chosen token", "选中的 token"],
                        "title": ["The chosen token's probability (bar {bar:g})", "选中 token 的概率(门槛 {bar:g})"]}},
}

CHECK = r'''
import sys, tempfile
from pathlib import Path
import gradio as gr
import playground
assert Path(playground.__file__).parents[1] == Path(sys.argv[1]), playground.__file__  # the copy, not the checkout
from playground.app import views
from playground.app.settings import WIDGETS, UISettings
from playground.app.tabs import BY_TAB, in_section
from playground.ui import build_app
from playground.ui.language import relabel, relabelled
from playground.ui.sections import SECTION_OF
from tests.ui_fixtures import save_tiny_decoder

# a tab of the registry, in its section after the others there; a view of the page
toy = BY_TAB["toy"]
assert in_section("machine")[-1] is toy and SECTION_OF["toy"] == "machine" and "toy" in views.TABS

weights = Path(tempfile.mkdtemp())
save_tiny_decoder(weights / "tiny-lm")
app = build_app(weights, Path(tempfile.mkdtemp()))
page, h = app.playground_page, app.playground_handlers
# built from its layout: its words, its ids, inside its section's tabs
assert page.component("tab_toy").label == "Probability bar" and page.component("tab_toy").elem_id == "toy-tab"
assert page.component("toy_count").value == "Count the distinct tokens" and page.component("toy_bar").elem_id == "toy-bar"
assert page.component("toy_intro").value.startswith("**A bar.**") and page.component("toy_md").elem_id == "toy-md"
assert page.component("tab_toy") in page.component("tabs_machine").children
# wired: its control redraws its view, its button runs the one job handler in the jobs' lane
fns = list(app.fns.values())
assert any((page.toy_bar._id, "change") in list(f.targets) for f in fns)
assert any((page.toy_count._id, "click") in list(f.targets) and f.name == "job_toy_count" for f in fns)

request = gr.Request(session_hash="toy", query_params={})
session = h.sessions.get("toy")
from playground.app.words import t
assert list(h.experiments.job(toy, toy.actions()[0], {}, request)) == [t("toy_needs_run", "en")]  # no run yet
plain = UISettings(model="tiny-lm", prompt="Hello there", max_new_tokens=6, mode="sample", seed=3)
list(h.stream.generate(request, 0.0, *[getattr(plain, f) for f in WIDGETS]))
run = session.current
drawn = h.views.tab_selected("toy", {}, request)  # its tab opened: its view drawn
assert drawn["toy_md"]["value"] == "Run 1's tokens against the bar at 0.5." and drawn["toy_plot"]["visible"] is True
moved = h.views.control("toy", {"toy_bar": 0.25}, request)  # its control moved: its view again, with it
assert moved["toy_md"]["value"] == "Run 1's tokens against the bar at 0.25."
lines = list(h.experiments.job(toy, toy.actions()[0], {}, request))
assert lines[-1] == "" and run.results["toy_count"] == len({s.token_id for s in run.path})
counted = h.views.redraw({"toy_bar": 0.25}, request)["toy_md"]["value"]
assert counted.endswith(f"It has {run.results['toy_count']} distinct tokens."), counted
# the language switch says its words again; its view speaks 中文
updates = relabel(page, h.sessions, None, "zh", request)
said = {id(c): u for c, u in zip(relabelled(page), updates)}
assert said[id(page.component("tab_toy"))]["label"] == "概率门槛" and said[id(page.toy_count)]["value"] == "统计不同的 token"
assert said[id(page.toy_intro)].startswith("**门槛。**")
zh = h.views.redraw({}, request)
assert zh["toy_md"]["value"].startswith("第 1 次运行") and zh["toy_plot"]["value"].layout.title.text.startswith("选中")
print("the toy is a panel of the app")
'''


def test_adding_a_panel_touches_only_its_module_its_figure_and_the_locale_files(tmp_path):
    copy = tmp_path / "playground"
    shutil.copytree(REPO / "playground", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "app" / "panels" / "toy.py").write_text(TOY, encoding="utf-8")
    (copy / "viz" / "toy.py").write_text(FIGURE, encoding="utf-8")
    for lang, name in enumerate(("en.json", "zh.json")):
        _add_words(copy / "locales" / name, lang, WORDS)
    assert _changed(REPO / "playground", copy) == {"app/panels/toy.py", "viz/toy.py", "locales/en.json",
                                                  "locales/zh.json"}
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the toy is a panel of the app" in done.stdout
