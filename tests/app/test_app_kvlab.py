"""The KV-cache lab's page half without Gradio: a run forked under a cache policy (window, sinks, an int8
cache), its View's numbers against the engine's own, the live KV panel of the branch, the settings' link
round trip and the lenient pass's notes, in English and 中文."""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import parse_qsl

import numpy as np
import pytest

from playground.analysis.divergence import first_difference
from playground.analysis.kv_policies import sink_mass
from playground.app import describe, history, views
from playground.app.describe import format_bytes
from playground.app.experiments import kv as kvlab
from playground.app.experiments.base import ForkError
from playground.app.experiments.kv import _quoted as quoted
from playground.app.experiments.kv import has_policy as has_kv_policy
from playground.app.notes import error_note, render
from playground.app.play import play_link, start_run
from playground.app.session import Session
from playground.app.settings import UISettings, from_query, generation_kwargs, to_query
from playground.app.settings import plain as plain_of
from playground.app.views import Selection
from playground.app.words import t
from playground.checkpoints.loader import load_model
from playground.generation import GenerationConfig
from playground.generation.engine import drain, generate_all
from tests.app.forks import press
from tests.app.test_app_run import play
from tests.ui_fixtures import save_tiny_decoder, save_tiny_seq2seq

SETTINGS = UISettings(model="a", prompt="Hello there, how are", max_new_tokens=14)
CJK = re.compile(r"[\u4e00-\u9fff]")
VIEW = views.PANELS["kvlab"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return load_model(save_tiny_decoder(tmp_path_factory.mktemp("w") / "a"))


def show(lm, session: Session, view=VIEW) -> dict:
    ctx = views.context_for(view, session, lambda name, dtype, owner: lm)
    return views.show(view, ctx, Selection(step=session.selected_step))


def forked(lm, lang: str = "en", **policy) -> tuple[Session, object, object]:
    session = Session(model="a", lang=lang)
    first = play(session, lm, dataclasses.replace(SETTINGS, lang=lang))
    args = {"window": 0, "sink": 0, "heavy": 0, "dtype": "", "rope": "", **policy}
    fork = press(session, lm, "kv", "kvlab_fork", kv_window=args["window"], kv_sink=args["sink"],
                 kv_heavy=args["heavy"], kv_dtype=args["dtype"], rope_scaling=args["rope"])
    return session, first, fork


def policy_words(settings, lang: str) -> str:
    return " · ".join(render(words, lang) for words in kvlab.badge(settings))


def engine(lm, run) -> object:
    """The engine's own run of the same request (nothing recorded)."""
    cfg = GenerationConfig(**generation_kwargs(run.settings))
    return generate_all(lm, list(run.prompt_ids), cfg)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_window_with_sinks_forks_the_run_and_the_lab_shows_its_bytes_divergence_and_sinks(lm, lang):
    session, plain, fork = forked(lm, lang, window=6, sink=2)
    assert fork.settings.kv_window == 6 and fork.settings.kv_sink == 2 and fork.branch_of is None
    ref_plain, ref_fork = engine(lm, plain), engine(lm, fork)
    assert [s.token_id for s in plain.path] == ref_plain.token_ids  # each run is the engine's, token for token
    assert [s.token_id for s in fork.path] == ref_fork.token_ids
    slots = show(lm, session)
    assert all(slots[k].visible for k in ("kvlab_bytes", "kvlab_div", "kvlab_sink"))
    md = slots["kvlab_md"].value
    held, full = ref_fork.cache["bytes"], ref_plain.cache["bytes"]
    assert held < full and ref_fork.cache["kept_positions"] == 8
    policy = policy_words(fork.settings, lang)
    assert md.startswith(t("kvlab_saved", lang, n=fork.number, policy=policy, held=format_bytes(held),
                           plain=format_bytes(full), saved=format_bytes(full - held), share=(full - held) / full, kept=8))
    first = first_difference(ref_plain.token_ids, ref_fork.token_ids)
    assert first is not None  # a window of 6 on a 9-token prompt forgets the prompt: the text parts
    assert t("kvlab_parted", lang, n=plain.number, step=first + 1, token=quoted(fork.path[first].token_text),
             plain_token=quoted(plain.path[first].token_text)) in md
    assert bool(CJK.search(md)) == (lang == "zh")
    # the figure's lines are the runs' own bytes per step; the plain line is what the plain run held
    bytes_fig = slots["kvlab_bytes"].value
    assert bytes_fig.data[1].y[-1] * 1024 == held and bytes_fig.data[0].y[-1] * 1024 == full
    assert [round(y * 1024) for y in bytes_fig.data[0].y] == kvlab.bytes_series(plain)["held"]
    # the divergence is along the plain run's tokens, its first difference the engine's
    div = slots["kvlab_div"].value
    assert len(div.data[0].y) == len(plain.path) and max(div.data[0].y) > 0
    sink = np.asarray(slots["kvlab_sink"].value.data[0].z)
    cfg = GenerationConfig(max_new_tokens=min(kvlab.SINK_STEPS, len(fork.path)))
    np.testing.assert_allclose(sink, sink_mass(lm, list(fork.prompt_ids), cfg), atol=1e-6)
    assert sink.shape == (lm.config.n_layers, lm.config.n_heads)
    # the live screen lists the branch with its policy in words
    rows = history.branch_rows(session, fork, lang)
    assert [r["edit"] for r in rows] == ["", policy]
    assert fork.origin == plain.number and history.badge(fork, lang) == policy


def test_a_window_as_long_as_the_run_is_the_plain_run(lm):
    session, plain, fork = forked(lm, window=4096)
    assert [s.token_id for s in fork.path] == [s.token_id for s in plain.path]
    slots = show(lm, session)
    md = slots["kvlab_md"].value
    assert t("kvlab_same_text", "en", n=plain.number) in md
    assert max(slots["kvlab_div"].value.data[0].y) == 0.0  # bitwise: not a nat apart at any step


def test_an_int8_cache_holds_fewer_bytes_and_the_live_kv_panel_says_what_it_holds(lm):
    session, plain, fork = forked(lm, "zh", dtype="int8")
    ref = engine(lm, fork)
    slots = show(lm, session)
    assert "int8" in slots["kvlab_md"].value and ref.cache["bytes"] < engine(lm, plain).cache["bytes"]
    kv = show(lm, session, views.PANELS["cache"])["kv"].value
    assert t("cache_policy", "zh", policy=policy_words(fork.settings, "zh"), kept=ref.cache["kept_positions"],
             tokens=ref.cache["tokens"], held=format_bytes(ref.cache["bytes"]),
             plain=format_bytes(ref.cache["plain_bytes"])) in kv
    assert describe.policy_words(ref.cache["policy"], "zh") == policy_words(fork.settings, "zh")


def test_a_plain_run_shows_its_sinks_and_a_policy_run_alone_says_what_to_compare_with(lm):
    session = Session(model="a")
    play(session, lm, SETTINGS)
    slots = show(lm, session)
    assert slots["kvlab_md"].value == t("kvlab_plain", "en", n=1)
    assert slots["kvlab_sink"].visible and slots["kvlab_bytes"].visible is False
    alone = Session(model="a")
    play(alone, lm, dataclasses.replace(SETTINGS, kv_window=8))
    md = show(lm, alone)["kvlab_md"].value
    assert t("kvlab_no_plain", "en") in md and show(lm, alone)["kvlab_div"].visible is False


def test_a_fork_needs_one_policy(lm):
    session = Session(model="a")
    play(session, lm, SETTINGS)
    with pytest.raises(ForkError, match="Choose a policy"):
        press(session, lm, "kv", "kvlab_fork", kv_window=0, kv_sink=4)
    with pytest.raises(ForkError) as refused:
        press(session, lm, "kv", "kvlab_fork", kv_window=8, kv_dtype="int4")
    assert "不能同时" in render(error_note(refused.value), "zh")


def test_the_link_replays_the_plain_run_then_the_policy_run_and_the_lab_reads_the_same(lm):
    source, first, fork = forked(lm, window=6, sink=2, heavy=1)
    query = source.link_query()
    params = dict(parse_qsl(query.lstrip("?")))
    assert {k: params[k] for k in ("kv_window", "kv_sink", "kv_heavy")} == {"kv_window": "6", "kv_sink": "2",
                                                                             "kv_heavy": "1"}
    settings, notes = from_query(params)
    assert notes == [] and has_kv_policy(settings)
    assert (settings.kv_window, settings.kv_sink, settings.kv_heavy, settings.kv_dtype) == (6, 2, 1, "")
    assert not has_kv_policy(plain_of(settings))
    session = Session(model="a")
    session.opened_from(params, notes, settings)
    runs = [out.run for out in play_link(session, lambda *a: lm, settings, pace=False) if out.run.finish_reason]
    assert [has_kv_policy(r.settings) for r in runs] == [False, True] and runs[1].origin == runs[0].number
    assert [[s.token_id for s in r.path] for r in runs] == [[s.token_id for s in r.path] for r in (first, fork)]
    assert show(lm, session)["kvlab_md"].value == show(lm, source)["kvlab_md"].value
    assert from_query(dict(parse_qsl(to_query(dataclasses.replace(settings, kv_window=0, kv_sink=0, kv_heavy=0,
                                                                  kv_dtype="int4")).lstrip("?"))))[0].kv_dtype == "int4"
    assert "kv_" not in to_query(SETTINGS)  # the plain cache writes nothing: old links stay as they were


@pytest.mark.parametrize("params, key", [
    ({"kv_dtype": "int3"}, "link_ignored"), ({"kv_window": "-1"}, "link_ignored"),
    ({"kv_window": "2.5"}, "link_ignored"), ({"kv_sink": "100000"}, "link_ignored"),
])
def test_a_link_with_an_unusable_kv_value_opens_with_a_note(params, key):
    settings, notes = from_query({"model": "a", **params})
    assert [n.key for n in notes] == [key] and not has_kv_policy(settings)
    assert settings.kv_sink == 0 and CJK.search(render(notes[0], "zh"))


@pytest.mark.parametrize("policy, key", [
    ({"kv_sink": 4}, "kv_needs_window"), ({"kv_window": 8, "kv_dtype": "int8"}, "kv_dtype_window"),
])
def test_combinations_the_engine_refuses_run_leniently_with_a_note(lm, policy, key):
    session = Session(model="a")
    run, p = start_run(session, lm, dataclasses.replace(SETTINGS, **policy))
    assert key in [n.key for n in run.notes]
    p.cfg.validate()  # what runs is a config the engine takes
    assert (run.cfg.kv_sink, run.cfg.kv_dtype) == (0, None)


def test_a_seq2seq_model_runs_the_plain_cache_with_a_note(tmp_path):
    s2s = load_model(save_tiny_seq2seq(tmp_path / "s.safetensors"))
    run, _ = start_run(Session(model="s"), s2s, UISettings(model="s", prompt="Hello", max_new_tokens=4, kv_window=4))
    assert "kv_decoder_only" in [n.key for n in run.notes] and run.cfg.kv_window is None


def test_the_default_settings_ask_for_the_plain_cache():
    kw = generation_kwargs(UISettings(prompt="x"))
    assert not {"kv_window", "kv_sink", "kv_heavy", "kv_dtype"} & set(kw)
    assert not GenerationConfig(**kw).kv_policy


@pytest.mark.parametrize("policy", [{"window": 6, "sink": 2}, {"dtype": "int8"}])
def test_the_live_kv_panel_fills_the_formula_with_what_the_branch_holds(lm, policy):
    from playground.app import frames

    _, _, fork = forked(lm, **policy)
    cache = fork.events[-1].cache
    tokens, used = fork.compact[-1][4]
    assert tokens == cache["kept_positions"] and used == cache["bytes"]
    c = frames._cache_summary(cache)
    formula = 2 * c["layers"] * c["batch"] * c["kv_heads"] * tokens * c["head_dim"] * c["element_size"]
    assert formula == pytest.approx(used, rel=0.01)  # 2·N_layers·B·h_kv·T·d_head·s, as the live panel writes it


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_rope_scaling_forks_the_run_with_its_own_table_and_its_perplexity(lm, lang):
    from playground.app.experiments.kv import perplexity

    session, plain, fork = forked(lm, lang, rope="ntk:2")
    assert fork.cfg.rope_scaling == {"type": "ntk", "factor": 2.0}
    ref = engine(lm, fork)
    assert ref.token_ids == [s.token_id for s in fork.path]
    slots = show(lm, session)
    md = slots["kvlab_md"].value
    assert "RoPE ntk × 2" in md and policy_words(fork.settings, lang) == "RoPE ntk × 2"
    div = drain(kvlab.measure_slices(lm, fork, plain))["div"]
    assert t("kvlab_ppl", lang, plain=perplexity(div["original_prob"]), policy=perplexity(div["prob"])) in md
    assert perplexity(div["original_prob"]) != perplexity(div["prob"])  # another table: other numbers
    params = dict(parse_qsl(session.link_query().lstrip("?")))
    assert params["rope_scaling"] == "ntk:2" and from_query(params)[0].rope_scaling == "ntk:2"
    assert has_kv_policy(from_query(params)[0]) and not has_kv_policy(plain_of(from_query(params)[0]))


@pytest.mark.parametrize("value", ["ntk", "ntk:0.5", "magic:2", "yarn:1e9"])
def test_an_unusable_rope_scaling_in_a_link_is_a_note(value):
    settings, notes = from_query({"model": "a", "rope_scaling": value})
    assert settings.rope_scaling == "" and [n.key for n in notes] == ["link_ignored"]
