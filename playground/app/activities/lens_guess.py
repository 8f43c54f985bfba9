"""“Which layer knows?”: guess the first layer at which the logit lens ranks a step's chosen token first. No Gradio.

    q = ask(run, index, n_layers)                        # the question (no model work): the text, the token, the layers
    ranks = lens_ranks(lm, run, index)                   # model work (a job): the chosen token's rank after each layer
    state = reveal(state, guess, ranks)                  # the answer, the guess scored, the visitor's board
    html(state, lang)

The logit lens reads the residual stream the run recorded at a step (after the embedding and after every block)
through the model's own final norm and head (`analysis.logit_lens`): what the model would predict if it stopped
there. Layer 0 is the embedding, layer i is after block i (the last is the model's own output). The answer is the
first layer whose top-1 token is the token the step chose (None: no layer ranks it first, as for a sampled token
the model itself did not rank first). A guess scores minus how many layers it is off (0 is a perfect guess; a guess
of "never" counts as layer L + 1), the way the game scores a guess by how far it is from a sure thing; the board
keeps the visitor's mean over the steps they played.
"""

from __future__ import annotations

import html as html_lib
from collections.abc import Sequence
from typing import Any

from playground import analysis
from playground.app.notes import note
from playground.app.run import Run
from playground.app.tab import Action, Out, Row, Tab, Widget, Words
from playground.app.tokens_view import shown
from playground.app.words import t
from playground.errors import PlaygroundError

CONTEXT_CHARS = 240  # the text before the step shown in the question (its end: the rest scrolls off)
MAX_HISTORY = 100  # steps a visitor's board keeps


def index_for(run: Run | None, at: Any, selected: int | None) -> int:
    """The path index of the step played: `at` as the page counts steps (empty or 0: the step on screen)."""
    if run is None or run.running or not run.path:
        raise PlaygroundError(note("acts_lens_needs_run"))
    try:
        number = int(float(at)) if at not in (None, "") else 0
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        return run.step(selected)
    return run.step(number - 1 - run.steps_before)


def ask(run: Run, index: int, n_layers: int) -> dict[str, Any]:
    """The question at path index `index` of the finished `run`: the step as every screen counts it, the text before
    it, its chosen token, and the layers (0: the embedding … n_layers: after the last block). Raises PlaygroundError
    when the run recorded no residual stream there (a drafted run, or arrays the memory budget freed)."""
    step = run.path[index]
    if step.capture is None or step.capture.residual is None:
        raise PlaygroundError(note("acts_lens_no_residual"))
    before = "".join(run.prompt_texts) + "".join(run.stream_texts[: run.steps_before + index])
    return {"run": run.token, "index": int(index), "step": run.step_number(index), "token": step.token_text,
            "token_id": int(step.token_id), "before": before[-CONTEXT_CHARS:], "layers": int(n_layers),
            "revealed": False, "guess": None, "answer": None, "ranks": None}


def lens_ranks(lm: Any, run: Run, index: int) -> list[int]:
    """The chosen token's rank (1 = the top token) after the embedding and after each block, at path index `index`
    of `run`. Model work (one unembedding per layer): call it as a job on the torch thread."""
    entries = analysis.logit_lens(lm, run.as_result(), int(index), top_k=1)
    return [int(e["rank"]) for e in entries]


def first_layer(ranks: Sequence[int]) -> int | None:
    """The first layer whose logit lens ranks the chosen token first (None: none does)."""
    return next((layer for layer, rank in enumerate(ranks) if int(rank) == 1), None)


def score(guess: int, answer: int | None, n_layers: int) -> int:
    """Minus how many layers `guess` is off (0: right); "never" (answer None) is layer n_layers + 1."""
    target = n_layers + 1 if answer is None else int(answer)
    return -abs(int(guess) - target)


def check_guess(guess: Any, n_layers: int) -> int:
    """A guess: a whole layer from 0 (the embedding) to n_layers + 1 ("never"). PlaygroundError otherwise."""
    try:
        value = float(guess)
    except (TypeError, ValueError):
        raise PlaygroundError(note("acts_lens_pick", most=n_layers + 1)) from None
    if not (value.is_integer() and 0 <= value <= n_layers + 1):
        raise PlaygroundError(note("acts_lens_pick", most=n_layers + 1))
    return int(value)


def reveal(state: dict[str, Any], guess: Any, ranks: Sequence[int]) -> dict[str, Any]:
    """The question of `state` answered by the lens's `ranks`, the visitor's `guess` scored and kept on their board
    (a step already revealed keeps its first guess)."""
    if state.get("revealed"):
        return state
    layers = int(state["layers"])
    g = check_guess(guess, layers)
    answer = first_layer(ranks)
    history = list(state.get("history", []))[-(MAX_HISTORY - 1):]
    history.append({"step": state["step"], "token": state["token"], "guess": g, "answer": answer,
                    "score": score(g, answer, layers)})
    return {**state, "revealed": True, "guess": g, "answer": answer, "ranks": [int(r) for r in ranks],
            "history": history}


def board(history: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The visitor's scores so far: steps played, mean score, how many exactly right."""
    if not history:
        return None
    scores = [h["score"] for h in history]
    return {"steps": len(scores), "mean": sum(scores) / len(scores), "right": sum(s == 0 for s in scores)}


def layer_name(layer: int | None, n_layers: int, lang: str) -> str:
    if layer is None or layer > n_layers:
        return t("acts_lens_never", lang)
    return t("acts_lens_embedding", lang) if layer == 0 else t("acts_lens_block", lang, n=layer)


# --- the view ----------------------------------------------------------------------------------------------------


def html(state: dict[str, Any] | None, lang: str = "en", error: str = "") -> str:
    """The step's text with its chosen token, the question; after the reveal the answer, the score, the rank after
    every layer and the visitor's board. Every text a model wrote is escaped."""
    esc = html_lib.escape
    if not state or "step" not in state:
        return f'<div class="pg-lens-guess"><p class="pg-muted">{esc(error or t("acts_lens_idle", lang))}</p></div>'
    layers = int(state["layers"])
    token = esc(shown(state["token"]))
    parts = [f'<div class="pg-lens-guess" data-step="{state["step"]}" data-revealed="{str(state["revealed"]).lower()}"'
             f' data-layers="{layers}">',
             f'<p class="pg-lens-head">{esc(t("acts_lens_head", lang, step=state["step"], blocks=layers))}</p>',
             f'<div class="pg-lens-text"><div>{esc(state["before"])}<span class="pg-lens-token">{token}</span></div></div>',
             f'<p class="pg-lens-question">{esc(t("acts_lens_question", lang, token=shown(state["token"])))}</p>']
    if error:
        parts.append(f'<p class="pg-game-error">{esc(error)}</p>')
    if state["revealed"]:
        answer, guess = state["answer"], state["guess"]
        s = score(guess, answer, layers)
        parts.append(f'<p class="pg-lens-answer" data-answer="{"" if answer is None else answer}" data-guess="{guess}" '
                     f'data-score="{s}">{esc(t("acts_lens_answer", lang, layer=layer_name(answer, layers, lang), guess=layer_name(guess, layers, lang), score=s))}</p>')
        parts.append('<ol class="pg-lens-ranks" start="0">')
        for layer, rank in enumerate(state["ranks"]):
            cls = "top" if rank == 1 else ""
            cls += " first" if layer == answer else ""
            parts.append(f'<li class="{cls.strip()}" data-rank="{rank}" title="{esc(layer_name(layer, layers, lang))}">'
                         f'<b>{layer}</b><span>#{rank}</span></li>')
        parts.append(f'</ol><p class="pg-hint">{esc(t("acts_lens_explain", lang))}</p>')
    b = board(state.get("history", []))
    if b is not None:
        parts.append(f'<p class="pg-lens-board" data-mean="{b["mean"]:.4f}" data-steps="{b["steps"]}">'
                     f'{esc(t("acts_lens_board", lang, steps=b["steps"], mean=b["mean"], right=b["right"]))}</p>')
    parts.append("</div>")
    return "".join(parts)


# The activity's part of the Class tools page (its events: `playground.ui.activities`).
TAB = Tab(tab="lens", elem_id="lens-guess", section="teacher", order=40, view=None, layout=(
    Words("acts_lens_title_md", ("acts_lens_title",)),
    Words("acts_lens_intro_md", ("acts_lens_intro",), classes=("pg-hint",)),
    Row((Widget("lens_at", "number", "acts_lens_at", "lens-at", default=0, precision=0, min_width=90, bounded=False),
         Action("lens_ask", "press", "acts_lens_start", "lens-ask-btn", min_width=150),
         Action("lens_next", "press", "acts_lens_next", "lens-next-btn", min_width=90, primary=False, visible=False)),
        elem_id="lens-controls", equal_height=True),
    Out("lens_view", "html", "lens-guess-view", plain=True, initial=lambda lang: html(None, lang)),
    Row((Widget("lens_pick", "slider", "acts_lens_guess", "lens-pick", default=0, low=0, high=5, scale=3),
         Action("lens_reveal", "press", "acts_lens_reveal", "lens-reveal-btn", min_width=120, scale=1)),
        elem_id="lens-player", name="lens_player", visible=False, equal_height=True),  # shown once a step is asked
    Out("lens_state", "state")))  # the visitor's question and board: their own, per tab
