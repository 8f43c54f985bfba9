"""Adding an experiment is its module, its figure and its words: nothing else of the package changes.

A copy of the package gains a toy experiment (a min-p what-if): `app/experiments/toy.py`, `viz/toy.py` and its
words at the end of both locale files. In a fresh interpreter that imports the copy, the toy is an experiment of
the whole app: a run setting that links read and write, a tab built from its layout, a fork that streams beside
the run on screen, a badge, a view drawn with its figure; and Generate after it is still a plain run."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TOY = '''"""A min-p what-if: fork a run with min-p filtering (each step drops the tokens below p_min · the top
probability), and see the chosen tokens' probabilities against that bar."""

from __future__ import annotations

from typing import Any

from playground.app.experiments.base import Action, Experiment, Fork, ForkError, ForkRequest, Out, Widget, Words
from playground.app.fields import Field
from playground.app.notes import note
from playground.app.view import HIDDEN, Context, Drawn, Selection, View, shown
from playground.app.words import t
from playground.notes import Note
from playground.viz import toy as figures


def config(settings: Any) -> dict[str, Any]:
    return {"min_p": settings.toy_min_p} if settings.toy_min_p else {}


def badge(settings: Any) -> list[Note]:
    return [note("toy_badge", p=settings.toy_min_p)] if settings.toy_min_p else []


def fork(req: ForkRequest) -> Fork:
    p = float(req.values.get("toy_min_p") or 0)
    if not 0 < p <= 1:
        raise ForkError(note("toy_choose"))
    return Fork({"toy_min_p": p})


def compute(ctx: Context, sel: Selection) -> dict[str, Any]:
    run = ctx.run
    return {"number": run.number, "min_p": run.settings.toy_min_p, "probs": [s.prob for s in run.path]}


def draw(d: dict[str, Any], lang: str) -> Drawn:
    if not d["min_p"]:
        return {"toy_plot": HIDDEN}
    return {"toy_plot": shown(figures.probs_figure(d["probs"], d["min_p"], lang=lang))}


def caption(d: dict[str, Any], lang: str) -> str:
    return t("toy_caption", lang, n=d["number"], p=d["min_p"])


def idle(lang: str, words: str) -> Drawn:
    return {"toy_plot": HIDDEN}


VIEW = View("toy", "toy", frozenset({"finished"}), ("toy_md", "toy_plot"), compute, draw, caption, idle,
            waits="toy_needs_run", busy="toy_needs_run")

EXPERIMENT = Experiment(
    name="toy", tab="toy", elem_id="toy-tab", order=99,
    fields=(Field("toy_min_p", "real", 0.0, 0.0, 1.0, widget=False),),
    layout=(Words("toy_intro", ("toy_intro",), "toy-intro"),
            Widget("toy_min_p", "slider", "toy_pick", "toy-min-p", default=0, low=0, high=1, step=0.05,
                   field="toy_min_p"),
            Action("toy_fork", "fork", "toy_fork", "toy-fork-btn", inputs=("toy_min_p",), run=fork),
            Out("toy_md", "markdown", "toy-md", words="toy_needs_run"),
            Out("toy_plot", "plot", "toy-plot")),
    view=VIEW, badge=badge, config=config, needs_run="toy_needs_run",
)
'''

FIGURE = '''"""The min-p what-if's figure: each step's chosen-token probability against the min-p bar."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from playground.steps import step_number
from playground.viz._common import finish
from playground.viz._language import texts

_T = texts("toy")


def probs_figure(probs: Sequence[float], min_p: float, lang: str = "en") -> go.Figure:
    words = _T(lang)
    steps = [step_number(i) for i in range(len(probs))]
    fig = go.Figure(go.Bar(x=steps, y=list(probs), name=words["chosen"]))
    fig.add_hline(y=min_p, line_dash="dash")
    return finish(fig, words["title"].format(p=min_p), height=320)
'''

WORDS = {
    "page": {
        "tab_toy": ["Min-p what-if", "Min-p 假设实验"],
        "toy_intro": ["**Min-p.** Each step drops the tokens below p_min times the top one's probability.",
                      "**Min-p。** 每一步去掉概率低于 p_min 乘以最高概率的 token。"],
        "toy_pick": ["p_min", "p_min"],
        "toy_fork": ["Run as a branch", "作为分支运行"],
        "toy_choose": ["Choose a p_min above 0 first.", "请先选择大于 0 的 p_min。"],
        "toy_needs_run": ["Generate once: the lab runs that run again with min-p.", "先生成一次:实验会用 min-p 重跑那次运行。"],
        "toy_badge": ["min-p {p:g}", "min-p {p:g}"],
        "toy_caption": ["Run {n} keeps the tokens above {p:g} × the top probability.",
                        "第 {n} 次运行保留概率高于最高概率 {p:g} 倍的 token。"],
    },
    "figures": {"toy": {"chosen": ["chosen token", "选中的 token"],
                        "title": ["The chosen token's probability (min-p {p:g})", "选中 token 的概率(min-p {p:g})"]}},
}

CHECK = r'''
import sys, tempfile
from pathlib import Path
import gradio as gr
import playground
assert Path(playground.__file__).parents[1] == Path(sys.argv[1]), playground.__file__  # the copy, not the checkout
from playground.app.experiments import BY_NAME
from playground.app.settings import FIELDS, WIDGETS, UISettings, from_query, to_query
from playground.ui import build_app
from tests.ui_fixtures import save_tiny_decoder

# a run setting: links read and write it; Generate never reads it
assert "toy_min_p" in FIELDS and "toy_min_p" not in WIDGETS and list(BY_NAME)[-1] == "toy"
settings, notes = from_query({"prompt": "Hi", "toy_min_p": "0.25"})
assert notes == [] and settings.toy_min_p == 0.25 and "toy_min_p=0.25" in to_query(settings)
assert from_query({"toy_min_p": "2"})[0].toy_min_p == 0.0  # out of its row's range: ignored with a note

weights = Path(tempfile.mkdtemp())
save_tiny_decoder(weights / "tiny-lm")
app = build_app(weights, Path(tempfile.mkdtemp()))
page, h = app.playground_page, app.playground_handlers
assert page.component("toy_fork").value == "Run as a branch" and page.component("tab_toy").label == "Min-p what-if"
request = gr.Request(session_hash="toy", query_params={})
plain = UISettings(model="tiny-lm", prompt="Hello there", max_new_tokens=6, mode="sample", seed=3)
list(h.stream.generate(request, 0.0, *[getattr(plain, f) for f in WIDGETS]))
session = h.sessions.get("toy")
first = session.current
toy = BY_NAME["toy"]
frames = list(h.runs.streamed(h.experiments.fork)(toy, toy.actions()[0], {"toy_min_p": 0.5}, request))
fork = session.current
assert fork.origin == first.number and fork.experiment == "toy" and fork.cfg.min_p == 0.5
assert "pg-active" in frames[-1][3] and "min-p 0.5" in frames[-1][3]  # the badge (shown: it has an active setting)
assert "min-p 0.5 · from run 1" in frames[-1][4]  # the history
session.deep_tab = "toy"
drawn = h.views.redraw({}, request)
assert drawn["toy_md"]["value"] == "Run 2 keeps the tokens above 0.5 × the top probability."
assert drawn["toy_plot"]["visible"] is True
session.lang = "zh"
zh = h.views.redraw({}, request)
assert zh["toy_md"]["value"].startswith("第 2 次运行") and zh["toy_plot"]["value"].layout.title.text.startswith("选中")
assert "toy_min_p=0.5" in h.runs.show(request)[2]["value"]  # the link box
list(h.stream.generate(request, 0.0, *[getattr(plain, f) for f in WIDGETS]))
assert session.current.cfg.min_p == 0.0 and session.current.settings.toy_min_p == 0.0  # Generate: plain again
print("the toy is an experiment of the app")
'''


def _add_words(locale: Path, lang: int, words: dict = WORDS) -> None:
    """The toy's words at the end of each table, as a translator adds them."""
    table = json.loads(locale.read_text(encoding="utf-8"))
    for key, pair in words["page"].items():
        table["page"][key] = pair[lang]
    table["figures"]["toy"] = {key: pair[lang] for key, pair in words["figures"]["toy"].items()}
    locale.write_text(json.dumps(table, ensure_ascii=False, indent=1), encoding="utf-8")


def _changed(left: Path, right: Path) -> set[str]:
    """The files added or changed in `right` against `left` (paths relative to `right`)."""
    out: set[str] = set()

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.update(prefix + name for name in cmp.right_only + cmp.diff_files)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(left, right, ignore=["__pycache__"]), "")
    return out


def test_adding_an_experiment_touches_only_its_module_its_figure_and_the_locale_files(tmp_path):
    copy = tmp_path / "playground"
    shutil.copytree(REPO / "playground", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "app" / "experiments" / "toy.py").write_text(TOY, encoding="utf-8")
    (copy / "viz" / "toy.py").write_text(FIGURE, encoding="utf-8")
    for lang, name in enumerate(("en.json", "zh.json")):
        _add_words(copy / "locales" / name, lang)
    assert _changed(REPO / "playground", copy) == {"app/experiments/toy.py", "viz/toy.py", "locales/en.json",
                                                  "locales/zh.json"}
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path)], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the toy is an experiment of the app" in done.stdout
