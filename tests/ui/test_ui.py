"""The app without a browser: real Gradio objects and handlers on tiny random checkpoints."""

from __future__ import annotations

import contextvars
import json
import re
import threading
from pathlib import Path
from urllib.parse import parse_qsl

import gradio as gr
import numpy as np
import pytest

from playground.app import describe, measurements
from playground.app import frames as fr
from playground.app import lessons as app_lessons
from playground.app.limits import CAPS
from playground.app.settings import FIELDS, WIDGETS, UISettings, from_query, from_widgets, to_query
from playground.app.tabs import BY_TAB
from playground.app.uploads import UPLOAD_PREFIX
from playground.app.words import t
from playground.generation import full_attention
from playground.ui import build_app
from tests.hf_tiny import save_seq2seq, t5_like
from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("weights")
    save_tiny_decoder(root / "tiny-lm")
    save_tiny_seq2seq(root / "tiny-seq2seq" / "model.safetensors")
    save_seq2seq(root / "t5-random", "t5", t5_like())
    return root


@pytest.fixture(scope="module")
def app(weights, tmp_path_factory):
    return build_app(weights, tmp_path_factory.mktemp("uploads"))


@pytest.fixture(scope="module")
def h(app):
    return app.playground_handlers


def values(settings: UISettings) -> list:
    """The left column's widgets (what Generate reads) holding `settings`."""
    return [getattr(settings, f) for f in WIDGETS]


def request(session: str = "s1", **query) -> gr.Request:
    return gr.Request(session_hash=session, query_params=query)


def run(h, settings: UISettings, session: str = "s1", ticket: float = 0.0):
    """Every frame of one Generate press: (live value, notes, branches) each; and the run."""
    frames = list(h.stream.generate(request(session), ticket, *values(settings)))
    return frames, h.sessions.get(session).current


def open_link(h, session: str, **query) -> list:
    """A tab opened from a link: the page load, the model's load, then the link's own run (its frames)."""
    out = h.models.page_load(request(session, **query))
    settings = dict(zip(WIDGETS, out[:-1]))
    settings["model"] = settings["model"]["value"]
    loaded = h.models.load_from_link(settings["model"], settings["dtype"], settings["lang"], request(session))
    if "value" in loaded["chat"]:  # the chat box as the model's load left it
        settings["chat"] = loaded["chat"]["value"]
    return list(h.stream.generate_link(request(session), 0.0, *[settings[f] for f in WIDGETS]))


def is_skip(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def select(step: int, run_state) -> gr.EventData:
    return gr.EventData(None, {"step": step, "run": run_state.token})


def heads_controls(kind: str, view: str, scale: str, layer: int, head: int, sink: bool) -> dict:
    """The All heads tab's controls by component name, as the page sends them."""
    return {"att_kind": kind, "att_view": view, "att_scale": scale, "att_layer": layer, "att_head": head,
            "att_query": None, "att_sink": sink}


def positional(h, length: int, base: float, pair: int, session: str) -> list:
    """The Positional tab (open) drawn for its controls: [markdown, 5 figures, pair slider] updates."""
    out = h.views.control("positional", {"pe_length": length, "pe_base": base, "pe_pair": pair}, request(session))
    return [out["pe_md"]["value"], *(out[f"pe{i}"] for i in range(1, 6)), out["pe_pair"]]


# --- page load and links -----------------------------------------------------------------------


def test_page_load_restores_settings_from_the_url(h):
    out = h.models.page_load(request(model="tiny-lm", prompt="abc", mode="beam", num_beams="4", top_p="2",
                                     model_x="1", lang="zh"))
    got = dict(zip(WIDGETS, out[:-1]))
    assert got["prompt"] == "abc" and got["mode"] == "beam" and got["num_beams"] == 4 and got["lang"] == "zh"
    assert got["model"]["value"] == "tiny-lm"
    assert "top_p" in out[-1] and "model_x" in out[-1]
    missing = h.models.page_load(request(model="../../etc"))
    assert "not a checkpoint name" in missing[-1] and dict(zip(WIDGETS, missing[:-1]))["model"]["value"] == "tiny-lm"


def test_copy_link_encodes_every_widget_including_chat_and_branches():
    s = UISettings(prompt="hi", mode="sample", seed=5, temperature=0.5, chat=False, lang="zh", branches="3:17")
    q = to_query(from_widgets({f: getattr(s, f) for f in FIELDS}))
    assert "chat=false" in q and "lang=zh" in q and "branches=3%3A17" in q
    assert from_query(dict(parse_qsl(q[1:])))[0] == s


# --- loading models ----------------------------------------------------------------------------


def test_load_shows_the_card_the_description_and_the_example_prompt(h):
    out = h.models.load("tiny-lm", "float32", "en", request("load"))
    status, about, prompt, chat, kind, view, card = (out[n] for n in ("model_status", "model_about", "prompt", "chat",
                                                                     "att_kind", "att_view", "card"))
    assert "model" not in out  # the dropdown itself made the choice
    assert "Loaded" in status and "decoder-only" in status
    assert "Parameters" in card and "GQA" in card and "RoPE" in card and "<table" in card
    assert prompt["value"] == "The Python interpreter" and "llama" in about  # generic line: no card in the file
    assert chat["visible"] is False and kind["value"] == "self"
    assert [v for _, v in view["choices"]] == ["head", "mean", "max", "group"]  # GQA: groups mean something
    # Picking the seq2seq swaps its example in and describes it; the live screen is reset.
    out = h.models.load("tiny-seq2seq", "float32", "en", request("load"))
    prompt = out["prompt"]
    assert prompt["value"] == "March 5, 2021" and "Source text" in prompt["label"] and out["live"]["run"] is None
    assert [v for _, v in out["att_view"]["choices"]] == ["head", "mean", "max"]  # plain MHA: no KV groups
    assert out["target_lang"]["visible"] is False  # no language codes: no target-language picker
    # A bad name: one line in the status (no badge), the previous model stays in use.
    bad = h.models.load("../../etc", "float32", "en", request("load"))
    status = bad["model_status"]
    assert "Could not load" in status and "\n" not in status and "Still using **tiny-seq2seq**" in status
    assert re.search("outside|not a checkpoint|no checkpoint", status)
    assert bad["model"]["value"] == "tiny-seq2seq" and set(bad) == {"model", "model_status"}  # nothing else changes


def test_the_shipped_defaults_describe_themselves_in_both_languages(tmp_path):
    repo_weights = Path(__file__).resolve().parents[2] / "weights"
    h = build_app(repo_weights, tmp_path / "uploads").playground_handlers
    about_en = h.models.load("tiny-seq2seq", "float32", "en", request("d"))["model_about"]
    about_zh = h.models.load("tiny-seq2seq", "float32", "zh", request("d2"))["model_about"]
    assert "ISO 8601" in about_en and "ISO 8601" in about_zh and "日期" in about_zh


def test_a_link_keeps_its_prompt_on_the_first_load(h):
    h.models.page_load(request("link", prompt="my own words", model="tiny-lm"))
    kept = h.models.load_from_link("tiny-lm", "float32", "en", request("link"))
    assert "value" not in kept["prompt"]  # the link's prompt is not overwritten by the model's example
    fresh = h.models.load_from_link("tiny-lm", "float32", "en", request("nolink"))
    assert fresh["prompt"]["value"] == "The Python interpreter"


def test_a_links_notes_stay_until_the_visitors_next_action_and_never_show_python(h):
    """Bad parameters and an unknown model: the page load's notes are not wiped when the model has loaded
    (nothing to run), nor replaced by the link's run's own notes; the visitor's next press clears them."""
    notes = h.models.page_load(request("badlink", model="nope", temperature="abc", top_k="x1"))[-1]
    bad, model = "temperature='abc': expected a number", "no checkpoint named 'nope'"  # shown as typed (inert)
    assert bad in notes and model in notes
    assert "could not convert" not in notes and "invalid literal" not in notes
    frames = open_link(h, "badlink", model="nope", temperature="abc", top_k="x1")
    assert frames and all(is_skip(v) for frame in frames for v in frame)  # no prompt: the notes stay as they are
    frames = open_link(h, "badrun", model="nope", temperature="abc", prompt="Hi", mode="sample", max_new_tokens="3")
    assert all(bad in f[1] and model in f[1] for f in frames)
    assert "No seed was given" in frames[-1][1]  # the run's own note beside them
    pressed, _ = run(h, UISettings(prompt="Hi", max_new_tokens=2), "badrun")
    assert "temperature" not in pressed[-1][1]  # the visitor's own press: the link's notes are done
    zh = h.models.page_load(request("badzh", lang="zh", temperature="abc"))[-1]
    assert "应为数字" in zh and "abc" in zh and "expected" not in zh


# --- generation --------------------------------------------------------------------------------


def test_generation_streams_small_frames_into_the_live_screen(h):
    """The run's first frame holds it whole (its head: the prompt), every later one only the entries the page
    lacks: each entry travels once, and the frames folded as the page folds them are the run."""
    frames, r = run(h, UISettings(prompt="Hello", max_new_tokens=12, seed=3, pace_ms=10))
    assert len(frames) >= 3
    first, last = frames[0][0], frames[-1][0]
    assert "head" in first and first["from"] == 0 and [i for _, i in first["head"]["prompt"]] == r.prompt_ids
    assert not any("head" in f[0] for f in frames[1:])
    sent = [len(fr.entries(f[0])) for f in frames]
    assert sum(sent) == 12 and max(sent) < 12  # each of the 12 entries once, spread over the frames
    path = []
    for f in frames:
        assert f[0]["from"] == len(path)  # each frame starts where the page's copy ends
        path = fr.fold(path, f[0])
    assert path == json.loads(json.dumps(r.compact))
    assert last["status"]["state"] == "done" and last["status"]["reason"] == "length"
    text, token_id, prob, cands, kv = path[5]
    assert isinstance(text, str) and 0 < prob <= 1 and cands and kv[0] == len(r.prompt_ids) + 5
    assert any(c[4] for c in cands)  # the chosen token is among the candidates
    att = fr.attention(last)
    assert att["step"] == 11 and len(att["row"]) == len(r.prompt_ids) + 11
    assert abs(sum(att["row"]) - 1) < 1e-3  # a softmax row
    # notes and branches: the same plain values every frame (Gradio sends nothing for an unchanged value,
    # where an update such as gr.skip() rebuilds the component on the server for every frame)
    assert len(frames) > 2 and all(f[1] == frames[0][1] and f[2] == frames[0][2] for f in frames[1:])
    assert not any(is_skip(f[1]) or is_skip(f[2]) for f in frames)
    assert not any(isinstance(v, str) and "<span" in v for v in last.values())  # data, never rendered markup


def test_the_first_frame_of_a_press_says_the_run_has_started_before_its_first_token(h):
    """The old run's "Done…" (or "Ready…") must not stay up until the first token: the first frame is the
    new run, started, with no token yet; the live screen words it in both languages."""
    run(h, UISettings(prompt="Hello", max_new_tokens=3), "started")
    before = h.sessions.get("started").current
    press = h.stream.generate(request("started"), 0.0, *values(UISettings(prompt="Hi", max_new_tokens=3)))
    live, notes, _ = next(press)
    assert live["run"] != before.token and live["number"] == before.number + 1
    assert fr.entries(live) == [] and live["status"]["state"] == "running" and live["status"]["n"] == 0
    rest = list(press)
    assert rest[-1][0]["status"]["state"] == "done" and all(f[1] == notes for f in rest)
    script = (Path(__file__).resolve().parents[2] / "playground/ui/assets/live.js").read_text()
    assert 'tr("status_starting")' in script
    assert t("status_starting", "en").startswith("Started") and "开始" in t("status_starting", "zh")


def test_an_empty_prompt_is_one_message_in_the_live_screen(h):
    frames, _ = run(h, UISettings(prompt="   "), session="empty")
    live, notes, branches = frames[-1]
    assert live["status"]["state"] == "error" and "prompt is empty" in live["status"]["error"]
    assert "prompt is empty" in notes and is_skip(branches)


def test_an_empty_seed_is_drawn_for_each_press_shown_and_reproduces(h):
    s = UISettings(prompt="Hello", mode="sample", seed=None, max_new_tokens=8)
    frames, r = run(h, s, session="seed")
    drawn = frames[-1][0]["status"]["seed"]
    assert isinstance(drawn, int) and str(drawn) in frames[0][1] and r.cfg.seed == drawn
    second, r2 = run(h, s, session="seed")  # the seed box stays empty: the next press draws again
    assert second[-1][0]["status"]["seed"] != drawn
    again, r3 = run(h, UISettings(prompt="Hello", mode="sample", seed=drawn, max_new_tokens=8), session="seed2")
    assert r3.generated_ids == r.generated_ids
    # The link of a drawn-seed run carries the seed it used, and opening it runs the same tokens.
    query = h.stream.link(request("seed"), *values(s))
    assert f"seed={r2.cfg.seed}" in query
    replay = open_link(h, "seed-link", **dict(parse_qsl(query[1:])))
    assert h.sessions.get("seed-link").current.generated_ids == r2.generated_ids and replay


def test_the_link_box_says_whether_it_holds_the_run_on_screen_or_the_settings(h):
    """Copy link with nothing on screen gives the run the left column's settings make, and the box says so; once a run
    is on screen the box holds its link and says "this exact run", in either language."""
    s = UISettings(prompt="Hello", max_new_tokens=4)
    box = h.runs.copied(request("label"), *values(s))
    assert box["visible"] and "prompt=Hello" in box["value"]
    assert box["label"] == t("link_settings", "en") != t("link", "en")
    assert h.runs.show(request("label"), *values(s))[2]["label"] == t("link_settings", "en")  # a redraw keeps it
    run(h, s, session="label")
    assert h.runs.show(request("label"), *values(s))[2]["label"] == t("link", "en")
    assert h.runs.copied(request("label"), *values(s))["label"] == t("link", "en")
    h.sessions.get("label").lang = "zh"
    assert h.runs.copied(request("label"), *values(s))["label"] == t("link", "zh")


def test_seeded_sampling_reproduces_and_the_api_matches_the_stream(h):
    s = UISettings(prompt="Hello", mode="sample", temperature=1.0, top_k=20, top_p=0.9, seed=11, max_new_tokens=10)
    _, a = run(h, s, "a")
    _, b = run(h, s, "b")
    assert a.generated_ids == b.generated_ids
    assert h.stream.generate_text("tiny-lm", "Hello", to_query(s))["token_ids"] == a.generated_ids


def test_settings_are_clamped_with_visible_notes(h):
    frames, _ = run(h, UISettings(prompt="Hello", mode="sample", top_k=500, max_new_tokens=1024, seed=0), "clamp")
    notes = frames[0][1]
    assert "Top-k 500" in notes and "Note:" in notes and "top_k" not in notes  # the control's name, not the knob's
    long, _ = run(h, UISettings(prompt="x" * 5000, max_new_tokens=2), "long")
    assert "4000 characters" in long[0][1] and "dropped" in long[0][1]  # 4000 characters are still 4000 tokens
    assert len(h.sessions.get("long").current.prompt_ids) <= CAPS.prompt_tokens
    api = h.stream.generate_text("tiny-lm", "x" * 5000, "max_new_tokens=2")
    assert any("dropped" in n for n in api["notes"])  # the script API cuts the same way


def test_stop_ends_a_run_within_one_step_and_refuses_queued_tickets(h):
    s = UISettings(prompt="Hello", max_new_tokens=200, pace_ms=50)
    gen = h.stream.generate(request("stopper"), 1000.0, *values(s))
    first = next(gen)
    assert first[0]["status"]["state"] == "running"
    h.stream.stop(2000.0, request("stopper"))
    last = list(gen)[-1][0]
    assert last["status"]["state"] == "stopped" and last["status"]["n"] <= 3
    # A run whose Generate was pressed before Stop (still queued) never starts.
    refused = list(h.stream.generate(request("stopper"), 1500.0, *values(s)))
    assert len(refused) == 1 and all(is_skip(v) for v in refused[0])  # refused: the screen stays as it is
    assert list(h.stream.generate(request("stopper"), 2500.0, *values(UISettings(prompt="Hi", max_new_tokens=2))))


def test_stop_ends_the_run_at_the_tokens_its_page_showed(h):
    """The engine runs ahead of the page; the page's script says how many tokens it showed as Stop is pressed
    (stop_at), and the run ends there: the status, the frames folded as the page folds them, the run itself."""
    gen = h.stream.generate(request("seen"), 0.0, *values(UISettings(prompt="Hello", max_new_tokens=200, pace_ms=20)))
    path: list = []
    for live, _, _ in gen:
        path = fr.fold(path, live)
        if len(path) >= 5:
            break
    run = h.sessions.get("seen").current
    assert h.stream.stop_at(["no such run", 1]) == {} and h.stream.stop_at([run.token]) == {} and run.running
    shown = len(path) - 2  # the page had drawn two tokens fewer than it was sent (one frame may carry several)
    h.stream.stop_at([run.token, shown])
    frames = list(gen)
    for live, _, _ in frames:
        path = fr.fold(path, live)
    assert frames[-1][0]["status"]["state"] == "stopped" and frames[-1][0]["status"]["n"] == len(path) == len(run.path)
    assert len(run.path) == len(run.events) == len(run.compact) == shown


def test_a_new_run_stops_the_previous_one_of_the_same_tab(h):
    slow = h.stream.generate(request("one"), 0.0, *values(UISettings(prompt="Hello", max_new_tokens=100, pace_ms=20)))
    next(slow)
    run(h, UISettings(prompt="Hi", max_new_tokens=2), "one")
    assert list(slow)[-1][0]["status"]["state"] == "stopped"


def test_a_model_switch_stops_the_tabs_running_generation(h):
    h.models.load("tiny-lm", "float32", "en", request("switch"))
    slow = h.stream.generate(request("switch"), 0.0, *values(UISettings(prompt="Hello", max_new_tokens=100,
                                                                           pace_ms=20)))
    next(slow)
    other = h.stream.generate(request("bystander"), 0.0, *values(UISettings(prompt="Hello", max_new_tokens=30,
                                                                               pace_ms=5)))
    next(other)
    assert h.models.load("tiny-seq2seq", "float32", "en", request("switch"))["live"]["run"] is None  # an empty screen
    frames = list(slow)
    assert frames[-1][0]["status"]["state"] == "stopped" and frames[-1][0]["status"]["n"] < 100
    assert list(other)[-1][0]["status"]["state"] == "done"  # another tab's run goes on
    slow = h.stream.generate(request("switch"), 0.0, *values(UISettings(model="tiny-seq2seq", prompt="Hello",
                                                                           max_new_tokens=60, pace_ms=20)))
    next(slow)
    h.models.load("tiny-seq2seq", "float32", "en", request("switch"))  # the same model again: no switch
    h.models.load("nope", "float32", "en", request("switch"))  # a failed load: the model in use stays
    assert h.sessions.get("switch").current.running
    h.models.load_dtype("tiny-seq2seq", "bfloat16", "en", request("switch"))  # another dtype is another model
    assert list(slow)[-1][0]["status"]["state"] == "stopped"


def test_generate_pressed_while_the_new_model_loads_keeps_its_run(h):
    """The dropdown moved to tiny-seq2seq and Generate was pressed before that load answered: the run is already the
    new model's. The load's answer neither stops it, nor empties the screen, nor swaps the visitor's prompt."""
    h.models.load("tiny-lm", "float32", "en", request("eager"))
    eager = h.stream.generate(request("eager"), 0.0, *values(UISettings(model="tiny-seq2seq", prompt="my words",
                                                                         max_new_tokens=40, pace_ms=20)))
    first = next(eager)[0]
    out = h.models.load("tiny-seq2seq", "float32", "en", request("eager"))
    assert "live" not in out and "value" not in out["prompt"] and "Loaded" in out["model_status"]
    session = h.sessions.get("eager")
    assert session.current is not None and session.current.token == first["run"] and session.current.running
    last = list(eager)[-1][0]
    assert last["run"] == first["run"] and last["status"]["state"] == "done" and last["status"]["n"] == 40
    # a switch away from it empties the screen, named for the model it leaves for (the page keeps a run of that one)
    left = h.models.load("tiny-lm", "float32", "en", request("eager"))["live"]
    assert left["run"] is None and left["left_for"] == "tiny-lm"


def test_beam_search_streams_the_best_beam_as_tokens(h):
    frames, r = run(h, UISettings(prompt="Hello", mode="beam", num_beams=3, max_new_tokens=6), "beam")
    last = frames[-1][0]
    assert last["mode"] == "beam" and last["beams"] and all(len(b) == 3 for b in last["beams"])
    path = []
    for f in frames:
        path = fr.fold(path, f[0])
    assert [p[1] for p in path] == r.final.token_ids  # the winning hypothesis, token by token
    assert all(p.source_beam is not None for p in r.path) and all(0 < p.prob <= 1 for p in r.path)
    # Every caption is consistent with the final text: the token at step k is the final text's token k.
    for k, step in enumerate(r.path):
        assert step.token_id == r.final.token_ids[k] and any(c.token_id == step.token_id for c in step.candidates)


# --- the selected step and the deep views -------------------------------------------------------


def test_attention_rows_for_any_step_layer_and_head_match_the_whole_run(h):
    _, r = run(h, UISettings(prompt="Hi there", max_new_tokens=5), "rows")
    lm = h.models.model_for("tiny-lm", "float32")
    maps = full_attention(lm, r.prompt_ids, r.generated_ids)["self"]  # (L, h, T, T)
    for step in range(5):
        for layer in (0, 1):
            got = h.stream.attention_row([r.token, step, "self", layer, "2"])["row"]
            q = len(r.prompt_ids) - 1 + step
            np.testing.assert_allclose(got, maps[layer, 2, q, : q + 1], atol=2e-4, rtol=2e-3)
    mean = h.stream.attention_row([r.token, 1, "self", 0, "mean"])["row"]
    np.testing.assert_allclose(mean, maps[0, :, len(r.prompt_ids), : len(r.prompt_ids) + 1].mean(0), atol=2e-4)
    for bad in (["nope", 0, "self", 0, "mean"], [r.token, 99, "self", 0, "mean"], [r.token, 0, "cross", 0, "mean"],
                [r.token, 0, "self", 7, "mean"], [r.token, 0, "self", 0, "group:9"], ["x"]):
        assert h.stream.attention_row(bad)["row"] is None


def test_selecting_a_step_moves_the_open_deep_view(h):
    _, r = run(h, UISettings(prompt="Hello", mode="sample", temperature=0.7, top_k=3, seed=1, max_new_tokens=4,
                              top_candidates=8), "deep")
    h.stream.select_step([r.token, 1])  # the page's direct call, then its select event
    out = h.views.select_step(select(1, r), {}, request("deep"))
    caption, funnel = out["caption"]["value"], out["funnel"]["value"]
    assert caption.startswith("Step 2") and "removed by a filter" in caption  # step index 1, counted from 1
    assert {t.name for t in funnel.data} >= {"raw softmax", "top-k"}
    stale = h.views.select_step(gr.EventData(None, {"step": 1, "run": "other"}), {}, request("deep"))
    assert stale == {}  # another run's click redraws nothing


def test_all_heads_tab_uses_the_engine_maps_scales_and_gqa_groups(h):
    _, r = run(h, UISettings(prompt="Hi there", max_new_tokens=5), "heads")
    session = h.sessions.get("heads")
    session.deep_tab = "attention"
    out = h.views.control("attention", heads_controls("self", "group", "log", 1, 3, True), request("heads"))
    note, grid, heat, summary, query = (out[k]["value"] for k in ("att_note", "att_grid", "att_heat", "att_summary",
                                                                   "att_query"))
    assert len(grid.data) == 4 and "KV group 1" in heat.layout.title.text and "GQA" in note
    assert query == len(r.prompt_ids) - 1 + 4  # the row that chose the last token
    z = np.asarray(heat.data[0].z, dtype=float)
    assert np.isnan(z[:, 0]).all() and np.nanmax(z) <= 0  # first column hidden, log10 weights
    lm = h.models.model_for("tiny-lm", "float32")
    maps = full_attention(lm, r.prompt_ids, r.generated_ids, layers=[1])["self"][0]
    np.testing.assert_allclose(np.asarray(heat.data[0].customdata, dtype=float), maps[2:4].mean(0), atol=1e-6)
    # The head summary covers every layer (not only the one on screen), from the same whole-run maps.
    from playground.viz import attention_entropy

    every = full_attention(lm, r.prompt_ids, r.generated_ids)["self"]
    z = np.asarray(summary.data[0].z, dtype=float)
    assert z.shape == (lm.config.n_layers, lm.config.n_heads)
    np.testing.assert_allclose(z, attention_entropy(every), rtol=1e-5, atol=1e-6)


def press(h, tab: str, action: str, key: str) -> list[str]:
    """A tab's job pressed (as Gradio steps it): the lines under its button."""
    declared = BY_TAB[tab]
    button = next(a for a in declared.actions() if a.name == action)
    return each_step_in_its_own_context(h.experiments.job(declared, button, {}, request(key)))


def test_kv_rerun_without_cache_compares_fresh_timings(h):
    run(h, UISettings(prompt="Hello", max_new_tokens=6), "kv")
    assert press(h, "cache", "rerun", "kv")[-1] == ""  # its result is the cache tab's to draw
    h.sessions.get("kv").deep_tab = "cache"
    drawn = h.views.redraw({}, request("kv"))
    fig, md = drawn["compare"]["value"], drawn["compare_md"]["value"]  # shown (hidden for a run that has none)
    assert {t.name for t in fig.data} >= {"with KV cache", "without KV cache"} and "same tokens" in md
    assert "Generate once first" in press(h, "cache", "rerun", "nobody")[-1]


def test_positional_panel_follows_the_model_scheme(h):
    h.models.load("tiny-lm", "float32", "en", request("pe"))
    h.sessions.get("pe").deep_tab = "positional"
    md, f1, f2, f3, f4, f5, pair = positional(h, 64, 1000, 2, "pe")
    assert "RoPE" in md and f1["visible"] and pair["visible"] and f3["visible"] and f5["visible"]
    assert not f4["visible"] and "Generate once" in md  # the relative property needs a run's q and k
    run(h, UISettings(prompt="Hello", max_new_tokens=4), "pe")
    md, f1, f2, f3, f4, f5, pair = positional(h, 256, 500, 2, "pe")
    assert f4["visible"] and max(f3["value"].data[1].x) == 255  # "positions shown" drives the decay plot
    assert "500" in f3["value"].layout.title.text  # and "compare with base" compares RoPE bases
    h.sessions.get("never-loaded").deep_tab = "positional"
    assert h.views.control("positional", {"pe_length": 64}, request("never-loaded")) == {}  # waits for a model
    h.models.load("t5-random", "float32", "en", request("pe"))
    md, f1, f2, f3, f4, f5, pair = positional(h, 32, 1000, 0, "pe")
    assert "Relative position bias" in md and f1["visible"] and not f2["visible"] and f5["visible"]


# --- branches ----------------------------------------------------------------------------------


def test_a_branch_continues_from_a_step_with_another_token_and_goes_into_the_link(h):
    _, parent = run(h, UISettings(prompt="Hello", max_new_tokens=8), "branch")
    other = next(c.token_id for c in parent.path[3].candidates if c.token_id != parent.path[3].token_id)
    frames = list(h.stream.branch(gr.EventData(None, {"run": parent.token, "step": 3, "token_id": other}),
                                  request("branch")))
    child = h.sessions.get("branch").current
    assert child is not parent and child.branch_of == (parent.number, 3) and child.forced == [other]
    assert [x[1] for x in child.inherited] == parent.generated_ids[:3]
    live, notes, branches = frames[-1]
    assert branches == f"3:{other}" and frames[0][0]["head"]["forced_tokens"][0][1] == other
    assert [b["number"] for b in live["branches"]] == [parent.number, child.number]
    # The branch equals a fresh run whose prompt already holds the prefix and the chosen token.
    lm = h.models.model_for("tiny-lm", "float32")
    from playground.generation import GenerationConfig, generate_all

    direct = generate_all(lm, parent.prompt_ids + parent.generated_ids[:3] + [other], GenerationConfig(max_new_tokens=8))
    assert child.generated_ids == direct.token_ids
    # Copy link names the branch; opening it replays the run and then the branch, by itself.
    query = h.stream.link(request("branch"), *values(UISettings(prompt="Hello", max_new_tokens=8)))
    assert f"branches=3%3A{other}" in query
    open_link(h, "replay", **dict(parse_qsl(query[1:])))
    replayed = h.sessions.get("replay").current
    assert replayed.generated_ids == child.generated_ids and replayed.branch_of is not None
    # A new press of Generate starts clean: the widgets' branches are never replayed by it.
    fresh, plain = run(h, UISettings(prompt="Hello there", max_new_tokens=8, branches=f"3:{other}"), "replay")
    assert plain.branch_of is None and plain.forced == [] and fresh[0][2] == ""
    assert h.stream.link(request("replay"), *values(UISettings(prompt="Hello there", max_new_tokens=8,
                                                                  branches=f"3:{other}"))).count("branches") == 0
    # Typed text works too.
    list(h.stream.branch(gr.EventData(None, {"run": child.token, "step": 1, "text": "abc"}), request("branch")))
    assert h.sessions.get("branch").current.forced == lm.tokenize("abc")


def test_seq2seq_runs_show_cross_attention_and_branch(h):
    frames, r = run(h, UISettings(model="tiny-seq2seq", prompt="March 5, 2021", max_new_tokens=6), "s2s")
    last, att = frames[-1][0], fr.attention(frames[-1][0])
    assert last["kind"] == "seq2seq" and att["kind"] == "cross"
    assert len(att["row"]) == len(r.prompt_ids) and last["cache"]["cross"]["tokens"] == len(r.prompt_ids)
    assert frames[0][0]["head"]["decoder_start"]
    session = h.sessions.get("s2s")
    session.deep_tab = "attention"
    out = h.views.control("attention", heads_controls("cross", "head", "linear", 1, 2, False), request("s2s"))
    heat = out["att_heat"]["value"]
    assert "cross-attention" in heat.layout.title.text and len(heat.layout.xaxis.ticktext) == len(r.prompt_ids)
    list(h.stream.branch(gr.EventData(None, {"run": r.token, "step": 2, "token_id": r.path[2].token_id}),
                         request("s2s")))
    assert session.current.branch_of == (r.number, 2)


# --- language, uploads, lifecycle ---------------------------------------------------------------


def test_the_language_switch_relabels_every_component(app, h):
    from playground.ui.language import relabel, relabelled

    page = app.playground_page
    outputs = relabelled(page)
    zh = relabel(page, h.sessions, None, "zh", request("lang"), h.models.choices("lang", "zh"))
    assert len(zh) == len(outputs)
    models = zh[outputs.index(page.component("model"))]  # the model list's own words too, its value kept
    assert any("默认解码器" in label for label, _ in models["choices"]) and "value" not in models
    labels = [u.get("label") or u.get("value") for u in zh if isinstance(u, dict)]
    assert all(labels) and any("温度" in x for x in labels) and any("束" in x for x in labels)
    every_choice = [str(c) for u in zh if isinstance(u, dict) for c in u.get("choices") or []]
    assert any("逐层预测" in c for c in every_choice)  # the lesson picker's choices, not only its label
    assert not any("Logit lens" in c for c in every_choice)
    scale = zh[outputs.index(page.component("att_scale"))]  # the colour scale's choices: 线性 / 对数, not linear / log
    assert [label for label, _ in scale["choices"]] == ["线性", "对数"]
    # the All heads kind: "decoder self-attention" stayed English in 中文 (issue 36 point 5)
    kind = zh[outputs.index(page.component("att_kind"))]
    assert kind["choices"] == [("解码器自注意力", "self")]
    h.models.load("tiny-seq2seq", "float32", "zh", request("lang-s2s"))
    s2s = relabel(page, h.sessions, h.models.session_model(request("lang-s2s")), "zh",
                  request("lang-s2s"))[outputs.index(page.component("att_kind"))]
    assert [k for _, k in s2s["choices"]] == ["cross", "self", "encoder"]
    assert not any(re.search("[A-Za-z]{4}", label) for label, _ in s2s["choices"]), s2s["choices"]
    assert h.sessions.get("lang").lang == "zh"
    assert h.stream.current_value("zh", request("lang"))["lang"] == "zh"


def test_corrupt_upload_is_one_clear_line_and_the_app_keeps_working(h, tmp_path):
    h.models.load("tiny-lm", "float32", "en", request("up"))
    (tmp_path / "gradio-1").mkdir()  # Gradio keeps each uploaded file in a folder of its own
    bad = tmp_path / "gradio-1" / "model.safetensors"
    bad.write_bytes(b"\xff" * 64)
    before = set(h.catalog.names("up"))
    out = h.models.upload([str(bad)], "float32", "en", request("up"))
    status = out["model_status"]
    assert status.startswith("**Upload refused:**") and "\n" not in status and "Traceback" not in status
    assert out["model"]["value"] == "tiny-lm" and set(out) == {"model", "model_status"}
    assert set(h.catalog.names("up")) == before and not bad.exists()  # the upload and Gradio's copy are gone
    (tmp_path / "gradio-2").mkdir()
    (tmp_path / "gradio-2" / "weights.bin").write_bytes(b"x")
    for files in (None, [str(tmp_path / "gradio-2" / "weights.bin")]):
        status = h.models.upload(files, "float32", "en", request("up"))["model_status"]
        assert status.startswith("**") and ("pickle" in status or "choose" in status)
    frames, _ = run(h, UISettings(prompt="still ok", max_new_tokens=3), "up")
    assert frames[-1][0]["status"]["state"] == "done"


def test_a_valid_upload_is_loaded_and_listed(h, weights):
    from playground.checkpoints.loader import load_model
    from playground.checkpoints.own_format import save_checkpoint

    lm = load_model(weights / "tiny-lm")
    path = save_checkpoint(weights.parent / "own.safetensors", lm.model, lm.config, tokenizer=lm.tokenizer)
    out = h.models.upload([str(path)], "float32", "en", request("upload"))
    dropdown, status, card = out["model"], out["model_status"], out["card"]
    assert dropdown["value"].startswith(UPLOAD_PREFIX) and "Uploaded" in status and "Parameters" in card
    assert h.sessions.get("upload").model == dropdown["value"]
    # Visitors are private to each other: another tab neither lists nor loads it, even from a link.
    assert dropdown["value"] not in h.catalog.names("someone-else")
    other = h.models.load(dropdown["value"], "float32", "en", request("someone-else"))["model_status"]
    assert "private to the visitor who made it" in other and "own.safetensors" not in other
    notes = h.models.page_load(request("someone-else", model=dropdown["value"]))[-1]
    assert "private to the visitor who made it" in notes
    # When the tab closes, its upload and the model loaded from it are gone.
    h.unload(request("upload"))
    assert dropdown["value"] not in h.catalog.names("upload")


def test_closing_a_tab_stops_its_run_and_forgets_it(h):
    gen = h.stream.generate(request("closing"), 0.0, *values(UISettings(prompt="Hello", max_new_tokens=100, pace_ms=20)))
    next(gen)
    token = h.sessions.get("closing").current.token
    assert h.sessions.run_by_token(token) is not None
    h.unload(request("closing"))
    assert list(gen)[-1][0]["status"]["state"] == "stopped"
    assert h.sessions.run_by_token(token) is None  # the run is gone with its tab


def test_only_the_script_api_is_listed(app):
    info = app.get_api_info()
    assert list(info["named_endpoints"]) == ["/generate_text"] and not info.get("unnamed_endpoints")


def test_app_entry_reads_port_from_the_environment(monkeypatch):
    import app as entry

    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    args = entry.parse_args(["--host", "0.0.0.0", "--share"])
    assert args.port == 7999 and args.host == "0.0.0.0" and args.share
    assert entry.parse_args(["--port", "1234"]).port == 1234


CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                 "{% if add_generation_prompt %}<s>assistant: {% endif %}")


@pytest.fixture(scope="module")
def chat_app(tmp_path_factory):
    """A folder checkpoint and an own-format single file, both with a chat template, beside tiny-lm."""
    from transformers import PreTrainedTokenizerFast

    from playground.checkpoints.loader import load_model
    from playground.checkpoints.own_format import save_checkpoint

    root = tmp_path_factory.mktemp("chat-weights")
    save_tiny_decoder(root / "tiny-lm")
    folder = save_tiny_decoder(root / "chat-folder", seed=1)
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(folder)
    lm = load_model(folder)
    save_checkpoint(root / "chat-own.safetensors", lm.model, lm.config, tokenizer=lm.tokenizer)
    return build_app(root, tmp_path_factory.mktemp("chat-uploads")).playground_handlers


@pytest.mark.parametrize("name", ["chat-folder", "chat-own.safetensors"])
def test_a_model_with_a_chat_template_opens_with_chat_on(chat_app, name):
    h = chat_app
    out = h.models.load(name, "float32", "en", request(name))
    chat, card = out["chat"], out["card"]
    assert chat["visible"] is True and chat["value"] is True and "Chat template" in card
    lm = h.models.model_for(name, "float32")
    _, plain = run(h, UISettings(model=name, prompt="Hi", max_new_tokens=3, chat=False), name + "p")
    _, wrapped = run(h, UISettings(model=name, prompt="Hi", max_new_tokens=3, chat=True), name + "w")
    assert plain.prompt_ids == lm.tokenize("Hi")
    assert lm.detokenize(wrapped.prompt_ids) == "<s>user: Hi</s><s>assistant: "
    assert "chat=true" in to_query(wrapped.settings)  # a copied link keeps the toggle
    # The toggle is hidden again for a checkpoint without a template; a stale chat=true is only a note.
    assert h.models.load("tiny-lm", "float32", "en", request(name))["chat"]["visible"] is False
    frames, stale = run(h, UISettings(model="tiny-lm", prompt="Hi", max_new_tokens=2, chat=True), name + "s")
    assert stale.prompt_ids == h.models.model_for("tiny-lm", "float32").tokenize("Hi")
    assert "no chat template" in frames[0][1]


def test_a_link_without_chat_gets_the_models_default_and_runs_by_itself(chat_app):
    h = chat_app
    lm = h.models.model_for("chat-folder", "float32")
    frames = open_link(h, "nochat", model="chat-folder", prompt="Hi", max_new_tokens="3")
    opened = h.sessions.get("nochat").current
    assert frames and frames[-1][0]["status"]["state"] == "done"
    assert lm.detokenize(opened.prompt_ids) == "<s>user: Hi</s><s>assistant: "  # chat on: the model's default
    open_link(h, "chatoff", model="chat-folder", prompt="Hi", max_new_tokens="3", chat="false")
    assert h.sessions.get("chatoff").current.prompt_ids == lm.tokenize("Hi")  # named in the link: kept
    # The link's run happens once: a reload of the same session's run event does nothing more.
    again = list(h.stream.generate_link(request("nochat"), 0.0, *values(opened.settings)))
    assert len(again) == 1 and all(is_skip(v) for v in again[0])
    nothing = open_link(h, "noprompt", model="chat-folder")  # no prompt: nothing runs by itself
    assert len(nothing) == 1 and all(is_skip(v) for v in nothing[0]) and h.sessions.get("noprompt").current is None


def test_the_script_api_runs_as_the_page_does_with_the_links_chat_default_and_notes_in_its_language(chat_app):
    """/generate_text and a press of Generate with the same settings: the same tokens and the same notes.
    A query that does not name `chat` gets the model's default (on for a template), as a link does."""
    h = chat_app
    _, chat_on = run(h, UISettings(model="chat-folder", prompt="Hi", max_new_tokens=6, chat=True), "api-on")
    _, chat_off = run(h, UISettings(model="chat-folder", prompt="Hi", max_new_tokens=6, chat=False), "api-off")
    assert chat_on.generated_ids != chat_off.generated_ids  # the two prompts are told apart by their tokens
    assert h.stream.generate_text("chat-folder", "Hi", "max_new_tokens=6")["token_ids"] == chat_on.generated_ids
    named = h.stream.generate_text("chat-folder", "Hi", "max_new_tokens=6&chat=false")
    assert named["token_ids"] == chat_off.generated_ids
    s = UISettings(model="chat-folder", prompt="Hi", mode="sample", top_k=500, seed=3, max_new_tokens=6, chat=True,
                   lang="zh")
    frames, page = run(h, s, "api-zh")
    api = h.stream.generate_text("chat-folder", "Hi", to_query(s))
    assert api["token_ids"] == page.generated_ids
    assert "超过词表大小" in frames[0][1] and describe.notes_markdown(api["notes"], "zh") == frames[0][1]
    drawn = h.stream.generate_text("chat-folder", "Hi", "mode=sample&max_new_tokens=2&lang=zh")
    assert any("未指定种子" in n for n in drawn["notes"])  # a drawn seed is named, in the query's language


@pytest.mark.slow
def test_the_script_api_answers_on_smollm2_without_naming_chat(smollm2_dir, tmp_path):
    """The real chat model: without `chat` in the query it answers in its template (it returned '' at once)."""
    h = build_app(smollm2_dir.parent, tmp_path).playground_handlers
    out = h.stream.generate_text(smollm2_dir.name, "What is the capital of France?", "max_new_tokens=12")
    assert out["text"] == "The capital of France is Paris." and out["notes"] == []
    assert h.stream.generate_text(smollm2_dir.name, "What is the capital of France?",
                                  "max_new_tokens=12&chat=false")["text"] == ""  # named in the query: kept


def test_registry_shares_one_model_between_many_generations(h):
    errors = []

    def go(i: int) -> None:
        try:
            run(h, UISettings(prompt="Hello", mode="sample", seed=i, max_new_tokens=4), f"thread{i}")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    loads = h.registry.loads  # (the module's other tests load their own models before)
    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and h.registry.loads <= loads + 1  # tiny-lm once at most, for four generations


def test_every_screenshot_linked_from_the_readme_is_in_the_repo():
    readme = Path(__file__).resolve().parents[2] / "README.md"
    links = re.findall(r"\]\((tests/screenshots/[^)]+\.png)\)", readme.read_text())
    assert len(links) >= 9
    missing = [p for p in links if not (readme.parent / p).is_file()]
    assert not missing, f"README links screenshots that are not in the repo: {missing}"


def test_a_sliding_window_model_shows_each_layers_own_mask(tmp_path):
    from tests.hf_tiny import llama_like, save_decoder
    from tests.ui_fixtures import CHARS, SPECIALS, save_char_tokenizer

    folder = tmp_path / "weights" / "windowed"
    save_decoder(folder, "mistral", llama_like(vocab_size=len(SPECIALS) + len(CHARS), num_attention_heads=4,
                                               num_key_value_heads=2, sliding_window=5, eos_token_id=2))
    save_char_tokenizer(folder)
    h = build_app(tmp_path / "weights", tmp_path / "uploads").playground_handlers
    h.models.load("windowed", "float32", "en", request("win"))
    frames, r = run(h, UISettings(model="windowed", prompt="abcdefgh", max_new_tokens=6), "win")
    row = fr.attention(frames[-1][0])["row"]
    assert len(row) == len(r.prompt_ids) + 5 and all(w == 0 for w in row[:-5])  # only the last 5 keys are seen
    assert abs(sum(row[-5:]) - 1) < 1e-3
    h.sessions.get("win").deep_tab = "attention"
    note = h.views.control("attention", heads_controls("self", "head", "linear", 1, 0, False), request("win"))
    note = note["att_note"]["value"]
    assert "sliding-window layer" in note and "last 5 keys" in note
    h.sessions.get("win").deep_tab = "cache"
    kv = h.views.redraw({}, request("win"))["kv"]["value"]
    assert "window 5" in kv and "5 tokens held" in kv  # the cache keeps only the window


def _english_phrases() -> set[str]:
    """Every English phrase the figure builders write themselves whose 中文 differs (longer ones only,
    so token texts of the tiny model cannot match by chance)."""
    import importlib
    import pkgutil

    import playground.viz as viz_pkg

    phrases: set[str] = set()

    def walk(en, zh):
        if isinstance(en, dict):
            for k in en:
                walk(en[k], zh[k])
        elif en != zh:
            for part in re.split(r"\{[^}]*\}|%\{[^}]*\}|<[^>]+>", en):
                words = re.findall(r"[A-Za-z]{3,}", part)
                if len(part.strip()) >= 12 and len(words) >= 2 and not re.search(r"[\u4e00-\u9fff]", part):
                    phrases.add(part.strip())

    for info in pkgutil.iter_modules(viz_pkg.__path__):
        module = importlib.import_module(f"playground.viz.{info.name}")
        words = getattr(module, "_T", None)
        if callable(words):
            walk(words("en"), words("zh"))
    return phrases


def test_every_deep_panel_and_lesson_draws_in_the_visitor_s_language(h):
    import plotly.graph_objects as go

    from playground.app.lessons import LESSONS

    key = "zh-panels"
    h.models.load("tiny-lm", "float32", "zh", request(key))
    _, r = run(h, UISettings(prompt="Hello", mode="sample", temperature=0.7, top_k=3, seed=1, max_new_tokens=4,
                              top_candidates=8, lang="zh"), key)
    session = h.sessions.get(key)
    assert session.lang == "zh"
    drawn: list = []
    for tab in ("inspector", "cache"):
        session.deep_tab = tab
        h.stream.select_step([r.token, 1])
        drawn += h.views.select_step(select(1, r), {}, request(key)).values()
    session.deep_tab = "attention"
    drawn += h.views.control("attention", heads_controls("self", "head", "linear", 0, 0, False), request(key)).values()
    session.deep_tab = "positional"
    drawn += positional(h, 64, 1000, 2, key)
    press(h, "cache", "rerun", key)
    session.deep_tab = "cache"
    drawn += h.views.redraw({}, request(key)).values()
    for lesson in LESSONS:
        drawn += [v for k, v in h.views.pick_lesson(lesson, {}, request(key)).items() if k != "tabs"]
    figures = [v.get("value") if isinstance(v, dict) else v for v in drawn]
    figures = [f for f in figures if isinstance(f, go.Figure)]
    assert len(figures) >= 12
    text = " ".join(f.to_json() for f in figures) + " ".join(v for v in drawn if isinstance(v, str))
    leftover = sorted(p for p in _english_phrases() if p in text)
    assert not leftover, f"English left in the 中文 page: {leftover[:8]}"
    titled = [f.layout.title.text for f in figures if f.layout.title.text]
    assert titled and all(re.search(r"[\u4e00-\u9fff]", title) for title in titled), titled


def each_step_in_its_own_context(frames) -> list:
    """A generator handler stepped as Gradio steps it: each `next()` in a fresh copy of the context."""
    out = []
    while True:
        try:
            out.append(contextvars.copy_context().run(next, frames))
        except StopIteration:
            return out


def test_the_lessons_measurements_stream_their_progress_then_their_result(h):
    h.models.load("tiny-lm", "float32", "en", request("measure"))
    session_run = run(h, UISettings(prompt="Hello", max_new_tokens=6), "measure")[1]
    frames = press(h, "lessons", "time_cache", "measure")
    timing = session_run.results["time_cache"]
    assert frames[0].startswith("Timing run 1 of 12") and frames[-1] == ""  # the KV lesson draws the result
    session = h.sessions.get("measure")
    session.deep_tab, session.lesson = "lessons", "kv"
    assert app_lessons.cache_timing_words(timing, "en") in h.views.redraw({}, request("measure"))["lesson_md"]["value"]
    session.lesson = "sdpa"
    frames = press(h, "lessons", "measure_sdpa", "measure")
    lengths = measurements.sdpa_lengths(h.models.model_for("tiny-lm", "float32", "measure"))
    assert frames[0] == f"Measuring attention at length 1 of {len(lengths)}…" and frames[-1] == ""
    model, data = session.measured["measure_sdpa"]  # kept for the model it measured
    assert model == "tiny-lm" and [r["length"] for r in data["rows"]] == list(lengths)
    assert "Measuring" not in h.views.redraw({}, request("measure"))["lesson_md"]["value"]


def test_a_run_ends_in_one_redraw_of_the_open_view_and_no_event_returns_a_positional_fan_out(app):
    page = app.playground_page
    fns = list(app.fns.values())

    def after(fn) -> list:
        return [f for f in fns if f.trigger_after == fn._id]

    generate = next(f for f in fns if (page.generate._id, "click") in [(b, e) for b, e in f.targets])
    followers = after(generate)
    assert [f.fn.__name__ for f in followers] == ["show", "reading"]  # the run on screen's badge, history and link;
    reading = followers[1]  # at once, unqueued, the open view names the run it is about to read ("Reading run N…")
    assert [f.fn.__name__ for f in after(reading)] == ["redraw"] and reading.queue is False
    redraw = after(reading)[0]  # then one event redraws whatever view is open (the others emptied until opened)
    assert reading.outputs == redraw.outputs
    assert [o._id for o in followers[0].outputs] == [page.component(n)._id for n in ("active_settings", "run_history",
                                                                                    "link")]
    assert redraw.inputs_as_dict and {page.component(n)._id for n in ("caption", "lesson_md", "lab_md", "pe_md")} <= {
        o._id for o in redraw.outputs}
    selected = [f for f in fns if (page.live._id, "select") in list(f.targets)]
    tabs = [f for f in fns if (page.open_view._id, "select") in list(f.targets)]  # the views' tab on screen changed
    assert len(selected) == len(tabs) == 1 and selected[0].outputs == tabs[0].outputs == redraw.outputs
    from playground.ui import experiments, tabs

    assert not any(hasattr(m, n) for m in (experiments, tabs) for n in ("OUTPUTS", "DEEP_OUTPUTS", "PE_OUTPUTS"))


def test_every_press_that_reads_the_step_on_screen_waits_for_the_server_to_know_it(app):
    """A token click tells the server the step on screen by a call of its own, queued in the tab's lane behind that
    click's attention row; a press acting at that step (Start game, "Which layer knows?", every lab's fork and job)
    waits for the call in the page first (tests/browser/test_browser_game.py holds the call back to see it)."""
    from playground.app import tabs as registry

    page = app.playground_page
    buttons = {"game_start": page.component("game_start"), "lens_ask": page.component("lens_ask")}
    buttons.update({a.name: page.component(a.name) for e in registry.TABS for a in e.actions() if a.kind in ("fork", "job")})
    assert len(buttons) > 6
    for name, button in buttons.items():
        (fn,) = [f for f in app.fns.values() if (button._id, "click") in list(f.targets)]
        assert "await window.__pgStepTold" in (fn.js or ""), name


def test_a_redraw_with_nothing_to_change_still_answers_gradio_with_a_dict_of_its_outputs(app):
    page = app.playground_page
    fn = next(f for f in app.fns.values() if (page.att_sink._id, "change") in list(f.targets))
    h = app.playground_handlers
    h.sessions.get("elsewhere").deep_tab = "inspector"  # the All heads controls moved while another tab is open
    out = fn.fn({page.att_sink: True}, request("elsewhere"))
    assert out and all(is_skip(v) for v in out.values()) and set(out) <= set(fn.outputs)  # never an empty dict


def test_app_entry_takes_the_default_model_from_the_flag_or_the_space_variable(monkeypatch):
    import app as entry

    monkeypatch.delenv(entry.DEFAULT_MODEL_VARIABLE, raising=False)
    assert entry.parse_args([]).default_model is None
    monkeypatch.setenv(entry.DEFAULT_MODEL_VARIABLE, " gemma-3-270m ")
    assert entry.parse_args([]).default_model == "gemma-3-270m"
    assert entry.parse_args(["--default-model", "SmolLM2-135M-Instruct"]).default_model == "SmolLM2-135M-Instruct"


def test_every_new_page_opens_on_the_default_model(weights, tmp_path_factory):
    """`build_app(default_model=...)`: a page without a link, and a link that names no model, open on it; a link
    that names a model keeps its own."""
    demo = build_app(weights, tmp_path_factory.mktemp("uploads"), default_model="t5-random")
    h = demo.playground_handlers
    for query in ({}, {"prompt": "hello"}):
        out = h.models.page_load(request("d1", **query))
        assert dict(zip(FIELDS, out[:-1]))["model"]["value"] == "t5-random"
    out = h.models.page_load(request("d2", model="tiny-lm"))
    assert dict(zip(FIELDS, out[:-1]))["model"]["value"] == "tiny-lm"
