"""Temperature side by side: one prompt, one seed, three temperatures, three short runs shown together. No Gradio.

    for each in settings_for(widgets, (0.3, 0.8, 1.5), seed):   # three runs through the page's own press (play)
        ...
    columns = drain(columns_work(lm, runs))                    # model work: one whole-sequence pass a run
    html(columns, seed, lang)

The runs differ only in the temperature (the same prompt, knobs, seed and model; the plain cache and weights),
so their texts show what the temperature does. Beside each text: the mean entropy, in bits, of the distribution
every token was drawn from (after repetition penalty, temperature, top-k and top-p, as the sampler drew it), and
the top-1 share, how often the drawn token was the most likely one. The candidates a run records cover only the
top few tokens, so the entropy comes from one teacher-forced pass over the run's own tokens through the run's own
sampler pipeline (`generation.plan`): the same distributions, every token of the vocabulary counted.
"""

from __future__ import annotations

import dataclasses
import html as html_lib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from playground.app.notes import note
from playground.app.run import Run
from playground.app.settings import RANGES, UISettings, plain
from playground.app.tab import Action, Out, Row, Tab, Widget, Words
from playground.app.words import t
from playground.generation.plan import plan

TEMPERATURES = (0.3, 0.8, 1.5)
MAX_NEW_TOKENS = 48  # "three short runs": at most this many tokens each (fewer when the slider says fewer)


def settings_for(widgets: UISettings, temperatures: Sequence[float], seed: int) -> list[UISettings]:
    """The three runs' settings: the widgets' prompt and knobs, sampling at each temperature with `seed`; no lab
    edits, cache policy, precision or draft (a plain run of the model), no branches."""
    low, high = RANGES["temperature"]
    base = dataclasses.replace(plain(widgets), mode="sample", seed=int(seed), edits="", branches="",
                               max_new_tokens=max(1, min(int(widgets.max_new_tokens), MAX_NEW_TOKENS)))
    return [dataclasses.replace(base, temperature=min(max(float(t), max(low, 0.05)), high)) for t in temperatures]


@dataclass
class Column:
    """One run as its column shows it."""

    temperature: float
    run: int  # the run's number in the visitor's session
    tokens: list[tuple[str, float, float]] = field(default_factory=list)  # (text, probability drawn at, entropy bits)
    prompt: str = ""
    opening: str = ""  # what the chat template wrote before the typed text (a switch hides it), out of `prompt`
    entropy: float = 0.0  # mean over its steps, bits
    top1: float = 0.0  # share of steps whose drawn token was the most likely one
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def step_entropies(lm: Any, run: Run) -> list[float]:
    """The entropy (bits) of the distribution each token of `run` was drawn from: one pass over the prompt and the
    run's tokens, every step's logits through the run's own pipeline (repetition penalty, forced tokens,
    temperature, top-k, top-p as the engine applies them). Model work: call it on the torch thread."""
    if not run.path:
        return []
    p = plan(lm, list(run.prompt_ids), run.cfg, list(run.forced))
    prefix = list(p.prefix_ids)
    stream = prefix + run.generated_ids
    with torch.inference_mode():
        if lm.kind == "decoder":
            logits = lm.logits(torch.tensor(stream[:-1]))[0]
        else:
            logits = lm.logits(torch.tensor(p.prompt_ids), decoder_input_ids=torch.tensor(stream[:-1]))[0]
        out = []
        for t in range(len(run.path)):
            sequence = torch.tensor([stream[: len(prefix) + t]], device=lm.device)
            scores = p.pipeline.run(sequence, logits[len(prefix) - 1 + t][None].float())
            out.append(entropy_bits(scores[0]))
    return out


def entropy_bits(scores: torch.Tensor) -> float:
    """Entropy in bits of softmax(scores); tokens a stage removed (-inf) count for nothing."""
    logp = torch.log_softmax(scores.double(), dim=-1)
    probs = logp.exp()
    kept = probs > 0
    return float(-(probs[kept] * logp[kept]).sum() / math.log(2))


def top1_share(run: Run) -> float:
    """How often the drawn token was the most likely one: the first candidate, ranked after penalty and temperature
    (`sampling.candidates`), which top-k and top-p keep."""
    steps = [s for s in run.path if s.candidates]
    return sum(bool(s.candidates[0].chosen) for s in steps) / len(steps) if steps else 0.0


def columns_work(lm: Any, runs: Sequence[Run]) -> Iterator[None]:
    """A generator for `serving.call_sliced`: one run's pass per slice; returns the columns."""
    columns = []
    for run in runs:
        entropies = step_entropies(lm, run)
        yield None
        columns.append(Column(
            temperature=float(run.cfg.temperature), run=run.number, prompt="".join(run.prompt_texts[run.opening:]),
            opening="".join(run.prompt_texts[: run.opening]),
            tokens=[(s.token_text, float(s.prob), h) for s, h in zip(run.path, entropies)],
            entropy=sum(entropies) / len(entropies) if entropies else 0.0, top1=top1_share(run),
            finish_reason=run.finish_reason))
    return columns


# --- the view ------------------------------------------------------------------------------------------------


def shade(p: float) -> str:
    """The live screen's colour for a probability (light to strong blue, `probColour` in live.js)."""
    p = max(0.0, min(1.0, float(p)))
    lo, hi = (239, 243, 255), (8, 81, 156)
    return "rgb({}, {}, {})".format(*(round(a + (b - a) * p) for a, b in zip(lo, hi)))


def _token(text: str, p: float, h: float, lang: str) -> str:
    shown = text if text else "∅"
    colour = "#fff" if p > 0.6 else "#111"
    return (f'<span class="tok" style="background:{shade(p)};color:{colour}" data-prob="{p:.4g}" '
            f'title="{html_lib.escape(t("sbs_token_title", lang, p=p, h=h))}">{html_lib.escape(shown)}</span>')


def opening(c: Column) -> str:
    """The chat template's opening of a column's prompt, marked as the stream marks it: the same switch hides it."""
    return f'<span class="pg-sys">{html_lib.escape(c.opening)}</span>' if c.opening else ""


def html(columns: Sequence[Column], seed: int, model: str, lang: str = "en") -> str:
    """Three columns (stacked on a phone): each temperature's text, tokens shaded by probability, and its numbers."""
    esc = html_lib.escape
    if not columns:
        return ""
    parts = [f'<div class="pg-sbs" data-seed="{int(seed)}"><p class="pg-sbs-head">'
             f'{esc(t("sbs_seed", lang, seed=int(seed), model=model, runs=", ".join(str(c.run) for c in columns)))}'
             '</p><div class="pg-sbs-cols">']
    for c in columns:
        text = "".join(_token(s, p, h, lang) for s, p, h in c.tokens)
        stats = t("sbs_stats", lang, h=c.entropy, top1=100 * c.top1, n=len(c.tokens))
        parts.append(f'<section class="pg-sbs-col" data-temperature="{c.temperature:g}" data-entropy="{c.entropy:.4f}" '
                     f'data-top1="{c.top1:.4f}"><h4>{esc(t("sbs_temperature", lang, t=c.temperature))}</h4>'
                     f'<p class="pg-sbs-stats">{esc(stats)}</p><div class="pg-sbs-text">'
                     f'<span class="pg-sbs-prompt">{opening(c)}{esc(c.prompt)}</span>{text}</div></section>')
    parts.append(f'</div><p class="pg-hint">{esc(t("sbs_explain", lang))}</p></div>')
    return "".join(parts)


def label_run(run: Run | None, started: Run | None, temperature: float) -> None:
    """Name the comparison's run by its temperature in the history ("run 5 · T = 0.7 (side by side)"), once it has
    started (`run` is not `started`, the run on screen before the press); a run that could not start is left."""
    if run is not None and run is not started and not run.about:
        run.about = [note("history_temperature", t=float(temperature))]


# The tool's part of the Class tools page (its events: `playground.ui.teacher`): three temperatures, one press.
_LOW, _HIGH = RANGES["temperature"]
TAB = Tab(tab="side_by_side", elem_id="temperature-compare", section="teacher", order=10, view=None, layout=(
    Words("sbs_title_md", ("sbs_title",)),
    Words("sbs_intro_md", ("sbs_intro",), classes=("pg-hint",)),
    Row((*(Widget(name, "number", key, name.replace("_", "-"), default=value, low=max(_LOW, 0.05), high=_HIGH,
                  step=0.05, capped=True, min_width=110)
           for name, key, value in zip(("sbs_t1", "sbs_t2", "sbs_t3"), ("sbs_temp_low", "sbs_temp_mid", "sbs_temp_high"),
                                       TEMPERATURES)),
         Action("sbs_run", "press", "sbs_run", "sbs-run-btn", min_width=140)), elem_id="sbs-controls", equal_height=True),
    Out("sbs_view", "html", "temperature-compare-view", plain=True),
    Out("sbs_columns", "state")))  # the last comparison, drawn again in the other language
