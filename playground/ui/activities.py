"""The class activities on the page: thin adapters over `playground.app.activities` (components: each activity's
declared tab, built by `playground.ui.tabs`; their words are relabelled with the page's).

"Is it a database?": the press samples the page's question N times; each sample is a run of the page's own press
(`samples.sample_many`: the shared batch on the torch thread, one running generation per visitor at a time), in the
generation lane like the temperatures side by side; the answer so far streams as "answer i of N". "Which layer
knows?": the question needs no model work; the reveal's logit lens is one job on the torch thread
(`serving.call_job`), in the jobs lane. Every visitor's outcome, question and board are their own (`gr.State`, per
tab).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from playground.app import describe, serving, visitors
from playground.app.activities import game, lens_guess, samples
from playground.app.notes import error_line
from playground.app.session import Sessions
from playground.app.settings import widget_settings
from playground.app.words import t
from playground.errors import PlaygroundError
from playground.ui.lanes import GENERATE, JOBS, Lanes
from playground.ui.layout import AFTER_STEP_TOLD_JS
from playground.ui.models import Models, session_key


def _note(text: str) -> str:
    return f'<p class="pg-muted">{describe.esc(text)}</p>'


def _own_run(session: Any, state: dict | None) -> Any:
    """The visitor's own run the question is about (None: gone from their history, or no question)."""
    token = (state or {}).get("run")
    return next((r for r in session.runs if r.token == token), None)


class Activities:
    """The activities' handlers for the sessions of one app."""

    def __init__(self, models: Models, sessions: Sessions, rooms: game.Rooms | None = None) -> None:
        self.models = models
        self.sessions = sessions
        self.rooms = rooms  # the class games: the class's guesses shown beside the samples

    # --- "Is it a database?" --------------------------------------------------------------------------------

    def ask_many(self, request: gr.Request, n: Any, prediction: Any, *widgets: Any) -> Iterator[tuple[Any, Any]]:
        """(the view, the outcome's data): "answer i of N" while the samples run, then the table."""
        session = self.sessions.get(session_key(request))
        settings = widget_settings(widgets)
        lang = settings.lang
        try:
            count = samples.check_count(n)
            guess = samples.check_prediction(prediction, count)
        except PlaygroundError as exc:
            yield _note(error_line(exc, lang, "samples")), gr.skip()
            return
        seeds = samples.seeds_from(settings.seed, count) if settings.seed is not None else samples.draw_seeds(count)
        stop = session.begin_job()  # the page's Stop (or the tab closing) ends the samples before the next one
        drawn: list[samples.Sample] = []
        try:
            yield _note(t("acts_samples_running", lang, i=0, n=count)), gr.skip()
            lm = self.models.model_for(settings.model, settings.dtype, session.key)
            for sample in samples.sample_many(lm, settings, seeds, owner=visitors.page(session.key), key=session.key,
                                              stop=stop):
                drawn.append(sample)
                if len(drawn) > 1 and not stop.is_set():
                    yield _note(t("acts_samples_running", lang, i=len(drawn) - 1, n=count)), gr.skip()
        except Exception as exc:  # noqa: BLE001 - one line where the table would be
            if not stop.is_set() or len(drawn) < 2:
                yield _note(error_line(exc, lang, "samples")), None
                return
        finally:
            session.end_job(stop)
        if len(drawn) < 2:  # stopped before the first sample
            yield _note(t("acts_samples_stopped", lang)), None
            return
        guesses = self.rooms.first_guesses(session.key, settings) if self.rooms is not None else []
        outcome = samples.tally(drawn[1:], drawn[0], prompt=settings.prompt, model=settings.model,
                                max_new_tokens=samples.sample_settings(settings, None).max_new_tokens, prediction=guess,
                                class_guesses=guesses)
        stopped = _note(t("acts_samples_stopped", lang)) if len(drawn) <= count else ""
        yield stopped + samples.html(outcome, lang), outcome.to_dict()

    @staticmethod
    def samples_again(data: dict | None, lang: str) -> Any:
        return samples.html(samples.Outcome.from_dict(data), lang) if data else gr.skip()

    # --- "Which layer knows?" -------------------------------------------------------------------------------

    def lens_ask(self, at: Any, state: dict | None, lang: str, request: gr.Request | None = None) -> tuple:
        """The question at step `at` of the run on screen (0: the step on screen): (view, state, slider, row, next)."""
        session = self.sessions.get(session_key(request))
        run = session.current
        try:
            index = lens_guess.index_for(run, at, session.selected_step)
            return self._ask(session, run, index, state, lang)
        except Exception as exc:  # noqa: BLE001 - one line in the activity's panel
            return lens_guess.html(None, lang, error_line(exc, lang, "lens")), gr.skip(), gr.skip(), gr.skip(), gr.skip()

    def lens_next(self, state: dict | None, lang: str, request: gr.Request | None = None) -> tuple:
        """The step after the one asked (the last one stays)."""
        session = self.sessions.get(session_key(request))
        run = _own_run(session, state)
        try:
            if run is None:
                lens_guess.index_for(None, 0, None)  # says: generate a run first
            return self._ask(session, run, min(int(state["index"]) + 1, len(run.path) - 1), state, lang)
        except Exception as exc:  # noqa: BLE001
            return lens_guess.html(state, lang, error_line(exc, lang, "lens")), gr.skip(), gr.skip(), gr.skip(), gr.skip()

    def _ask(self, session: Any, run: Any, index: int, state: dict | None, lang: str) -> tuple:
        lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
        layers = lm.config.n_layers
        q = {**lens_guess.ask(run, index, layers), "history": (state or {}).get("history", [])}
        return (lens_guess.html(q, lang), q, gr.update(maximum=layers + 1, value=0),
                gr.update(visible=True), gr.update(visible=True))

    def lens_reveal(self, guess: Any, state: dict | None, lang: str, request: gr.Request | None = None) -> tuple:
        """The lens's answer to the question on screen (one job on the torch thread), the guess scored: (view, state,
        the guess's row)."""
        session = self.sessions.get(session_key(request))
        if not state or "run" not in state:
            return lens_guess.html(None, lang), gr.skip(), gr.skip()
        if state.get("revealed"):
            return lens_guess.html(state, lang), gr.skip(), gr.update(visible=False)
        run = _own_run(session, state)
        try:
            if run is None:
                lens_guess.index_for(None, 0, None)
            lm = self.models.model_for(run.settings.model, run.settings.dtype, run.owner)
            lens_guess.check_guess(guess, int(state["layers"]))
            ranks = serving.call_job(lens_guess.lens_ranks, lm, run, int(state["index"]), owner=session.key)
            state = lens_guess.reveal(state, guess, ranks)
        except Exception as exc:  # noqa: BLE001 - the question stays, with one line under it
            return lens_guess.html(state, lang, error_line(exc, lang, "lens")), gr.skip(), gr.skip()
        return lens_guess.html(state, lang), state, gr.update(visible=False)  # answered: "Next step" asks again

    @staticmethod
    def lens_again(state: dict | None, lang: str) -> str:
        return lens_guess.html(state, lang)

    # --- the language ---------------------------------------------------------------------------------------

    def relabel(self, lang: str, outcome: dict | None, state: dict | None) -> tuple:
        """The activities' views in `lang` (their labels and words follow the page's switch)."""
        return self.samples_again(outcome, lang), self.lens_again(state, lang)


def wire_activities(page: Any, a: Activities, lanes: Lanes, settings_inputs: list[Any]) -> None:
    """Bind the activities' events: the samples in the generation lane (runs), the reveal in the jobs lane, the rest
    outside the queue (no model work)."""
    p = page
    lang = p.settings["lang"]
    quick = dict(queue=False, show_progress="hidden")

    p.samples_run.click(a.ask_many, [p.samples_n, p.samples_guess, *settings_inputs], [p.samples_view, p.samples_state],
                        **lanes.lane(GENERATE), trigger_mode="once", show_progress="minimal")
    asked = [p.lens_view, p.lens_state, p.lens_pick, p.lens_player, p.lens_next]
    p.lens_ask.click(a.lens_ask, [p.lens_at, p.lens_state, lang], asked, js=AFTER_STEP_TOLD_JS, **quick)
    p.lens_next.click(a.lens_next, [p.lens_state, lang], asked, **quick)
    p.lens_reveal.click(a.lens_reveal, [p.lens_pick, p.lens_state, lang], [p.lens_view, p.lens_state, p.lens_player],
                        **lanes.lane(JOBS), show_progress="minimal")
    lang.change(a.relabel, [lang, p.samples_state, p.lens_state], [p.samples_view, p.lens_view], **quick)
