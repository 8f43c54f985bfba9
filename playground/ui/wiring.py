"""Binds the page's events to the handlers: what triggers what, queues and concurrency limits."""

from __future__ import annotations

import gradio as gr

from playground.app.settings import WIDGETS
from playground.ui.experiments import fork_line_outputs, wire_experiments
from playground.ui.gradio_internals import LOCALE_JS
from playground.ui.handlers import Handlers
from playground.ui.lanes import API, FIGURES, GENERATE, JOBS, LOAD, Lanes, ServerLane, check
from playground.ui.language import relabel, relabelled
from playground.ui.layout import COPY_LINK_JS, STOP_JS, TICKET_JS, Page
from playground.ui.models import LOAD_SLOTS, session_key
from playground.ui.projector import wire_projector
from playground.ui.runs import ABSOLUTE_LINK_JS
from playground.ui.tabs import field_widgets
from playground.ui.teacher import wire_teacher
from playground.ui.views import wire_views

SAMPLE_ONLY = ("temperature", "top_k", "top_p", "seed")  # a seed matters only when sampling
BEAM_ONLY = ("num_beams", "length_penalty", "early_stopping")


def mode_visibility(mode: str) -> tuple:
    sample, beam = mode == "sample", mode == "beam"
    return tuple(gr.update(visible=sample) for _ in SAMPLE_ONLY) + tuple(gr.update(visible=beam) for _ in BEAM_ONLY)


def wire(page: Page, h: Handlers, *, generate_concurrency: int = 4, server_lane: ServerLane | None = None) -> None:
    p, s = page, page.settings
    lanes = Lanes(generate=generate_concurrency)
    in_tab_lane = server_lane.for_tab if server_lane is not None else (lambda fn: fn)  # a tab's own work, in turn
    settings_inputs = [s[f] for f in WIDGETS]  # Generate reads the left column only: a run of it is plain
    lab_fields = field_widgets()  # the experiments' widgets a link sets (its experiment's settings on the page)
    mode_outputs = [s[f] for f in SAMPLE_ONLY + BEAM_ONLY]
    lang = s["lang"]
    load_outputs = [page.component(name) for name in LOAD_SLOTS]

    def keyed(load):
        """A model-loading handler's updates by component name, keyed by component for Gradio."""
        def handler(source, dtype: str, code: str, request: gr.Request) -> dict:
            return {page.component(name): update for name, update in load(source, dtype, code, request).items()}
        return handler
    load_kw = lanes.lane(LOAD)
    figures_kw = dict(lanes.lane(FIGURES), trigger_mode="always_last")
    jobs_kw = dict(lanes.lane(JOBS), show_progress="minimal")  # jobs write their own progress line

    def labels_in(code: str, request: gr.Request, notes: bool) -> list:
        models = h.models.choices(session_key(request), code)
        return relabel(page, h.sessions, h.models.session_model(request), code, request, models, notes=notes)

    def switch_language(code: str, request: gr.Request) -> list:
        return labels_in(code, request, True)

    redraws = []  # events after which the open view redraws (a model loaded, the language, a run ended)

    def page_load(request: gr.Request) -> tuple:
        h.open_tab(request)  # the tab counts for its visitor (an address or an account)
        return h.models.page_load(request, tuple(name for _, name in lab_fields))

    # Page load: settings from the URL (language included), then the model, its PE panel and the knobs.
    start = p.demo.load(in_tab_lane(page_load), None, [*settings_inputs, *(page.component(w) for w, _ in lab_fields), p.notes],
                        queue=False)
    start.then(mode_visibility, s["mode"], mode_outputs, queue=False)
    start.then(None, lang, lang, js=LOCALE_JS, queue=False)
    relabel_outputs = relabelled(page)
    loaded = start.then(keyed(h.models.load_from_link), [s["model"], s["dtype"], lang], load_outputs, **load_kw)
    redraws.append(loaded)
    # after the load, every label in the link's language; not the notes: the load and the link's run write them
    # themselves, and this relabel, answered after the run's own note on a busy server, took that note away

    def relabel_after_load(code: str, request: gr.Request) -> list:
        return labels_in(code, request, False)
    loaded.then(in_tab_lane(relabel_after_load), lang, relabelled(page, notes=False), queue=False)

    s["mode"].change(mode_visibility, s["mode"], mode_outputs, queue=False)
    wire_projector(page)  # large type, the settings column hidden (a click or a link)
    redraws.append(s["model"].input(keyed(h.models.load), [s["model"], s["dtype"], lang], load_outputs, **load_kw))
    redraws.append(s["dtype"].input(keyed(h.models.load_dtype), [s["model"], s["dtype"], lang], load_outputs,
                                    **load_kw))
    # The file box empties with the upload's own answer, taken or refused: the box adds a new upload's files to
    # the ones it shows, and the next upload would send both (two config.json, refused). Emptied in a later
    # event, a second upload made before it came was lost.
    upload_loaded = keyed(h.models.upload)

    def upload_and_empty(files, dtype: str, code: str, request: gr.Request) -> dict:
        return {**upload_loaded(files, dtype, code, request), p.upload: None}
    redraws.append(p.upload.upload(upload_and_empty, [p.upload, s["dtype"], lang], [*load_outputs, p.upload],
                                   **load_kw))
    for trigger in (p.hub_load.click, p.hub_id.submit):
        redraws.append(trigger(keyed(h.models.load_hub), [p.hub_id, s["dtype"], lang], load_outputs, **load_kw))

    # English / 中文: every label, the live screen, the model's texts.
    switched = lang.input(in_tab_lane(switch_language), lang, relabel_outputs, queue=False)
    switched.then(None, lang, lang, js=LOCALE_JS, queue=False)
    switched.then(in_tab_lane(h.stream.relabelled_value), lang, p.live, queue=False)
    redraws.append(switched.then(in_tab_lane(h.models.refresh), [lang, s["prompt"]],
                                 [p.model_status, p.model_about, s["prompt"], p.card], queue=False))

    # Generation: streamed into the live screen, with the badge of the run on screen and the run history. Each
    # press carries a ticket (the client's clock) so that Stop also cancels a run still waiting for a slot.
    # A link that names a prompt runs by itself once its model is loaded (then its forks and branches).
    gen_outputs = [p.live, p.notes, p.branches, p.active_settings, p.run_history]
    gen_kw = dict(lanes.lane(GENERATE), trigger_mode="once", show_progress="minimal")
    streamed = h.runs.streamed
    runs = [loaded.then(streamed(h.stream.generate_link), [p.ticket, *settings_inputs], gen_outputs, **gen_kw)]
    for trigger in (p.generate.click, s["prompt"].submit):
        runs.append(trigger(streamed(h.stream.generate), [p.ticket, *settings_inputs], gen_outputs, js=TICKET_JS,
                            **gen_kw))
    p.stop.click(h.stream.stop, p.ticket, None, js=STOP_JS, queue=False)
    runs.append(p.live.submit(streamed(h.stream.branch), None, gen_outputs, **gen_kw))
    forks, jobs = wire_experiments(page, h.experiments, gen_outputs, gen_kw, jobs_kw, streamed)
    runs += forks  # every experiment's fork streams like every run
    runs.append(p.run_history.click(h.runs.pick, None, gen_outputs, **lanes.lane(FIGURES)))  # a run picked
    # the tokenizer view, temperature side by side (three streamed runs), the class game, export
    runs += wire_teacher(page, h.teacher, lanes, settings_inputs, gen_outputs, streamed, in_tab_lane)

    # What follows the run on screen: its badge, the history and the link box, after every run, pick, model load
    # and language switch; under each lab's fork button, what a fork of it keeps.
    fork_lines = fork_line_outputs(page)
    for dep in redraws + runs:
        dep.then(h.runs.show, settings_inputs, [p.active_settings, p.run_history, p.link], queue=False).then(
            None, p.link, p.link, js=ABSOLUTE_LINK_JS, queue=False).then(  # one chain follows a run, then its redraw
            h.experiments.fork_lines, None, fork_lines, queue=False)

    # The open view (deep panel, lesson or lab) redraws after each run, load and language switch, and on a
    # step selected, a tab opened, a lesson picked or one of its controls moved: one event each.
    wire_views(page, h.views, redraws + runs + jobs, figures_kw)  # every tab's jobs too: their result is drawn

    # Sharing: the server writes the query string; the browser turns it into a full URL.
    p.copy_link.click(h.runs.copied, settings_inputs, p.link, queue=False).then(
        None, p.link, p.link, js=COPY_LINK_JS, queue=False)

    # Scripts (gradio_client, the load test) call generation by name; nothing else is listed.
    gr.api(h.stream.generate_text, api_name="generate_text", **lanes.lane(API))
    p.demo.unload(h.unload)
    for fn in p.demo.fns.values():  # the page's own events are not an API
        if fn.api_name != "generate_text":
            fn.api_visibility = "private"
    check(p.demo.fns.values(), lanes.limits())  # no event may lower another lane's limit
