"""“Is it a database?”: one question sampled N times, its distinct answers counted. No Gradio.

    seeds = draw_seeds(20)                                  # or seeds_from(seed, 20): a link's seed replays them
    for done, sample in sample_many(lm, widgets, seeds, owner=..., key=...):   # one sample at a time, as they come
        ...
    outcome = tally(samples, greedy, ...)                   # distinct answers: count, probability, greedy among them
    html(outcome, lang)

Many students think a model looks the answer up, and makes something up when it finds none. Asked the same question
N times, a database gives one answer N times; a language model draws every token from its probabilities, so it can
answer differently each time, and each answer comes about as often as the probability the model gives it. The
samples are drawn from the model's own probabilities (temperature 1, no top-k, top-p or repetition penalty), so a
sample's probability is the model's: the product of the probabilities of its tokens, each given the tokens before
it (its log is the sum of the chosen tokens' log-probabilities, as the engine reports them). The greedy answer (the
most likely token at every step) is computed the same way.

Every sample is a run of the page's own press (`play.start_run`: the same prompt, chat template and caps; its
events from `engine_stream.run_events`: the shared batch on the torch thread, one running generation per visitor),
recording no captures and kept in no history: only its tokens and their probabilities come back.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import math
import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from playground.app.engine_stream import run_events
from playground.app.notes import note
from playground.app.play import start_run
from playground.app.session import Session
from playground.app.settings import UISettings, plain
from playground.app.tab import Action, Out, Row, Tab, Widget, Words
from playground.app.tokens_view import shown
from playground.app.words import t
from playground.errors import PlaygroundError

DEFAULT_SAMPLES = 20
MAX_SAMPLES = 50  # N × one short run each: a class's minute, not a server's hour
MAX_ANSWER_TOKENS = 24  # each answer: at most this many tokens (fewer when the page's slider says fewer)
SEED_LIMIT = 2**31


@dataclass(frozen=True)
class Sample:
    """One answer as the engine drew it."""

    seed: int | None  # None: the greedy answer
    token_ids: tuple[int, ...]
    text: str
    logprob: float  # natural log of the model's probability of the whole answer: Σ log p(chosen token)
    finish_reason: str | None = None


@dataclass
class Answer:
    """One distinct answer of the samples (by its tokens)."""

    token_ids: tuple[int, ...]
    text: str
    count: int
    logprob: float
    seeds: list[int] = field(default_factory=list)
    greedy: bool = False  # it is the greedy answer

    @property
    def prob(self) -> float:
        return math.exp(self.logprob)


@dataclass
class Outcome:
    """What the activity shows: the question, the seeds, the distinct answers (most frequent first), the greedy
    answer and the visitor's prediction (how many different answers they expected; None: no prediction)."""

    prompt: str
    model: str
    seeds: list[int]
    answers: list[Answer]
    greedy: Sample
    max_new_tokens: int
    prediction: int | None = None
    class_guesses: list[dict[str, Any]] = field(default_factory=list)

    def began_with(self, token_id: int) -> int:
        """How many of the samples began with `token_id`."""
        return sum(a.count for a in self.answers if a.token_ids[:1] == (int(token_id),))

    @property
    def n(self) -> int:
        return len(self.seeds)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Outcome:
        answers = [Answer(**{**a, "token_ids": tuple(a["token_ids"])}) for a in d["answers"]]
        greedy = Sample(**{**d["greedy"], "token_ids": tuple(d["greedy"]["token_ids"])})
        return cls(**{**d, "answers": answers, "greedy": greedy})


# --- what is asked ---------------------------------------------------------------------------------------------


def check_count(n: Any) -> int:
    """N, the number of samples: a whole number from 1 to MAX_SAMPLES (an empty box: the default). Raises
    PlaygroundError (a keyed note saying the range) otherwise."""
    if n is None or n == "":
        return DEFAULT_SAMPLES
    value = _number(n)
    if not (value.is_integer() and 1 <= value <= MAX_SAMPLES):
        raise PlaygroundError(note("acts_samples_count", most=MAX_SAMPLES))
    return int(value)


def check_prediction(n: Any, samples: int) -> int | None:
    """The visitor's prediction of how many different answers come (empty or 0: none), within 1..samples."""
    if n is None or n == "" or n == 0:
        return None
    value = _number(n)
    if not (value.is_integer() and 1 <= value <= samples):
        raise PlaygroundError(note("acts_prediction_range", n=samples))
    return int(value)


def _number(n: Any) -> float:
    """A box's value as a float; NaN (never a whole number, so refused) for text that is no number."""
    try:
        return float(n)
    except (TypeError, ValueError):
        return math.nan


def draw_seeds(n: int) -> list[int]:
    """N different seeds drawn at random (shown with the answers: each sample is reproducible from its seed)."""
    seeds: list[int] = []
    while len(seeds) < n:
        seed = secrets.randbelow(SEED_LIMIT)
        if seed not in seeds:
            seeds.append(seed)
    return seeds


def seeds_from(seed: int, n: int) -> list[int]:
    """The seeds of a page whose seed box is set (a link that names a seed): seed, seed + 1, … so it replays them."""
    return [(int(seed) + i) % SEED_LIMIT for i in range(n)]


def sample_settings(widgets: UISettings, seed: int | None) -> UISettings:
    """One sample's settings: the page's model, prompt and chat switch; the model's own probabilities (temperature 1,
    no top-k, top-p or repetition penalty) with `seed`, or greedy when `seed` is None; short; no experiment."""
    base = dataclasses.replace(
        plain(widgets), temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=1.0, branches="", game="", pace_ms=0,
        max_new_tokens=max(1, min(int(widgets.max_new_tokens), MAX_ANSWER_TOKENS)))
    if seed is None:
        return dataclasses.replace(base, mode="greedy", seed=None)
    return dataclasses.replace(base, mode="sample", seed=int(seed))


# --- the model work ----------------------------------------------------------------------------------------------


def one_sample(lm: Any, settings: UISettings, *, owner: str, key: str, stop: threading.Event | None = None) -> Sample:
    """One answer through the page's press: planned as a run of the visitor's (`key`), its events from the shared
    batch (`owner`: the visitor's one running generation). Raises PlaygroundError when it cannot start."""
    run, p = start_run(Session(key=key, lang=settings.lang), lm, settings, captures=False)
    ids: list[int] = []
    logprob = 0.0
    last = None
    for event in run_events(p, stop if stop is not None else threading.Event(), owner=owner):
        if not hasattr(event, "token_id"):  # a place in line, or a ZeroGPU notice: nothing drawn yet
            continue
        ids.append(int(event.token_id))
        logprob += math.log(max(float(event.prob), 1e-300))
        last = event
    if last is None or not last.finished:  # stopped: a cut answer is no answer of the model's
        raise PlaygroundError(note("acts_samples_stopped"))
    return Sample(settings.seed if settings.mode == "sample" else None, tuple(ids), last.text, logprob,
                  last.finish_reason)


def sample_many(lm: Any, widgets: UISettings, seeds: Sequence[int], *, owner: str, key: str,
                stop: threading.Event | None = None) -> Iterator[Sample]:
    """The greedy answer, then one sample per seed, each as it finishes. `stop` set: no further sample starts, and
    one cut short raises PlaygroundError (only whole answers are counted)."""
    for seed in (None, *seeds):
        if stop is not None and stop.is_set():
            return
        yield one_sample(lm, sample_settings(widgets, seed), owner=owner, key=key, stop=stop)


def tally(samples: Sequence[Sample], greedy: Sample, *, prompt: str, model: str, max_new_tokens: int,
          prediction: int | None = None, class_guesses: Sequence[dict[str, Any]] = ()) -> Outcome:
    """The distinct answers of `samples` (by their tokens), most frequent first (then most likely), each with its
    count, seeds and probability; the greedy answer marked among them when it came; the class's guesses kept."""
    by_ids: dict[tuple[int, ...], Answer] = {}
    for s in samples:
        answer = by_ids.setdefault(s.token_ids, Answer(s.token_ids, s.text, 0, s.logprob))
        answer.count += 1
        answer.seeds.append(int(s.seed) if s.seed is not None else -1)
    if greedy.token_ids in by_ids:
        by_ids[greedy.token_ids].greedy = True
    answers = sorted(by_ids.values(), key=lambda a: (-a.count, -a.logprob, a.token_ids))
    return Outcome(prompt, model, [int(s.seed) for s in samples if s.seed is not None], answers, greedy,
                   max_new_tokens, prediction, [dict(g) for g in class_guesses])


# --- the view ----------------------------------------------------------------------------------------------------


def _pct(p: float) -> str:
    """A probability for people: 12.3%, 0.042%, and below one in 100,000 just "<0.001%" (the exact number in the
    row's data)."""
    if p < 1e-5:
        return "<0.001%"
    return f"{100 * p:.1f}%" if p >= 0.001 else f"{100 * p:.3f}%"


def _expected(x: float) -> str:
    return f"{x:.2f}" if x >= 0.01 else "<0.01"


def _answer_text(text: str, lang: str) -> str:
    return html_lib.escape(shown(text)) if text.strip() else f'<em>{html_lib.escape(t("acts_samples_empty", lang))}</em>'


def html(o: Outcome | None, lang: str = "en", progress: str = "") -> str:
    """The answers as a table (answer, how often it came, the model's probability, N × probability), the greedy
    answer, the prediction against what came, and the seeds."""
    esc = html_lib.escape
    if o is None:
        return f'<p class="pg-muted">{esc(progress)}</p>' if progress else ""
    distinct = len(o.answers)
    parts = [f'<div class="pg-samples" data-n="{o.n}" data-distinct="{distinct}">',
             f'<p class="pg-samples-head">{esc(t("acts_samples_head", lang, n=o.n, distinct=distinct, model=o.model, tokens=o.max_new_tokens))}</p>']
    if o.prediction is not None:
        key = "acts_samples_predicted_right" if o.prediction == distinct else "acts_samples_predicted"
        parts.append(f'<p class="pg-samples-prediction" data-prediction="{o.prediction}">'
                     f'{esc(t(key, lang, guess=o.prediction, distinct=distinct))}</p>')
    greedy_count = next((a.count for a in o.answers if a.greedy), 0)
    parts.append(f'<p class="pg-samples-greedy" data-logprob="{o.greedy.logprob:.6f}" data-count="{greedy_count}">'
                 f'{esc(t("acts_samples_greedy", lang, p=_pct(math.exp(o.greedy.logprob)), count=greedy_count, n=o.n))}'
                 f' <span class="pg-samples-answer">{_answer_text(o.greedy.text, lang)}</span></p>')
    parts.append(f'<div class="pg-samples-scroll"><table class="pg-samples-table"><thead><tr><th>{esc(t("acts_samples_col_answer", lang))}</th>'
                 f'<th>{esc(t("acts_samples_col_count", lang))}</th><th>{esc(t("acts_samples_col_prob", lang))}</th>'
                 f'<th>{esc(t("acts_samples_col_expected", lang, n=o.n))}</th></tr></thead><tbody>')
    for a in o.answers:
        mark = f' <b class="pg-samples-mark">{esc(t("acts_samples_greedy_mark", lang))}</b>' if a.greedy else ""
        seeds = ", ".join(str(s) for s in a.seeds)
        parts.append(f'<tr class="{"greedy" if a.greedy else ""}" data-count="{a.count}" data-logprob="{a.logprob:.6f}" '
                     f'data-ids="{".".join(str(i) for i in a.token_ids)}"><td class="pg-samples-answer" '
                     f'title="{esc(t("acts_samples_seeds_title", lang, seeds=seeds))}">{_answer_text(a.text, lang)}{mark}</td>'
                     f'<td class="pg-bar"><span style="width:{100 * a.count / o.n:.1f}%"></span><em>{a.count} / {o.n}</em></td>'
                     f'<td>{esc(_pct(a.prob))}</td><td>{esc(_expected(o.n * a.prob))}</td></tr>')
    parts.append("</tbody></table></div>")
    parts.append(f'<p class="pg-hint">{esc(t("acts_samples_explain", lang))}</p>')
    parts.append(_class_html(o, lang))
    parts.append(f'<details class="pg-samples-seeds"><summary>{esc(t("acts_samples_seeds", lang, n=o.n))}</summary>'
                 f'<code>{esc(", ".join(str(s) for s in o.seeds))}</code></details></div>')
    return "".join(parts)


def _class_html(o: Outcome, lang: str) -> str:
    """The class's guesses for the answer's first token (the game) beside how often the samples began with each."""
    if not o.class_guesses:
        return ""
    esc = html_lib.escape
    players = sum(int(g["players"]) for g in o.class_guesses)
    parts = [f'<div class="pg-samples-class" data-players="{players}"><h4>{esc(t("acts_samples_class_head", lang))}</h4>'
             f'<div class="pg-samples-scroll"><table class="pg-samples-table"><thead><tr>'
             f'<th>{esc(t("acts_samples_class_col_token", lang))}</th><th>{esc(t("acts_samples_class_col_players", lang))}</th>'
             f'<th>{esc(t("acts_samples_class_col_began", lang))}</th><th>{esc(t("acts_samples_col_prob", lang))}</th>'
             f'</tr></thead><tbody>']
    for g in o.class_guesses:
        began = o.began_with(g["token_id"])
        parts.append(f'<tr data-id="{int(g["token_id"])}" data-players="{int(g["players"])}" data-began="{began}">'
                     f'<td class="pg-samples-answer">{_answer_text(g["text"], lang)}</td>'
                     f'<td class="pg-bar"><span style="width:{100 * g["players"] / players:.1f}%"></span>'
                     f'<em>{int(g["players"])} / {players}</em></td>'
                     f'<td class="pg-bar"><span style="width:{100 * began / o.n:.1f}%"></span><em>{began} / {o.n}</em></td>'
                     f'<td>{esc(_pct(float(g["prob"])))}</td></tr>')
    parts.append(f'</tbody></table></div><p class="pg-hint">{esc(t("acts_samples_class_explain", lang, n=o.n))}</p></div>')
    return "".join(parts)


# The activity's part of the Class tools page (its events: `playground.ui.activities`). No bounds on the boxes: the
# activity says its own range in words (Gradio's would be an English pop-up).
TAB = Tab(tab="samples", elem_id="many-samples", section="teacher", order=30, view=None, layout=(
    Words("acts_samples_title_md", ("acts_samples_title",)),
    Words("acts_samples_intro_md", ("acts_samples_intro",), classes=("pg-hint",)),
    Row((Widget("samples_n", "number", "acts_samples_n", "samples-n", default=DEFAULT_SAMPLES, precision=0,
                min_width=110, bounded=False),
         Widget("samples_guess", "number", "acts_samples_predict", "samples-guess", precision=0, min_width=150,
                bounded=False),
         Action("samples_run", "press", "acts_samples_run", "samples-run-btn", min_width=140)),
        elem_id="samples-controls", equal_height=True),
    Out("samples_view", "html", "many-samples-view", plain=True),
    Out("samples_state", "state")))  # the visitor's last outcome, drawn again in the other language
