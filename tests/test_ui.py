"""The app without a browser: real Gradio objects and handlers on a tiny random checkpoint."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import gradio as gr
import numpy as np
import pytest

from playground.errors import PlaygroundError
from playground.ui import build_app
from playground.ui.catalog import UPLOAD_PREFIX, Catalog
from playground.ui.handlers import new_session
from playground.ui.registry import ModelRegistry
from playground.ui.settings import FIELDS, UISettings, from_query, from_widgets, generation_kwargs, to_query
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
    return [getattr(settings, f) for f in FIELDS]


def run(h, settings: UISettings, session_hash: str = "s1"):
    frames = list(h.generate(gr.Request(session_hash=session_hash), *values(settings), new_session()))
    return frames, frames[-1][-1]["run"]


# --- settings and links -------------------------------------------------------------------------


def test_every_setting_round_trips_through_the_query_string():
    s = UISettings(model="tiny-lm", dtype="bfloat16", prompt="a b&c=d ü", chat=True, mode="sample",
                   temperature=0.7, top_k=12, top_p=0.85, repetition_penalty=1.3, num_beams=5, length_penalty=0.5,
                   early_stopping=True, max_new_tokens=77, seed=1234, top_candidates=6, attention=False, pace_ms=40)
    parsed, notes = from_query(dict(__import__("urllib.parse").parse.parse_qsl(to_query(s)[1:])))
    assert parsed == s and notes == []
    none_seed, _ = from_query({"seed": "none"})
    assert none_seed.seed is None and "seed=none" in to_query(none_seed)


def test_bad_link_values_are_ignored_with_a_note():
    s, notes = from_query({"temperature": "hot", "top_p": "7", "mode": "telepathy", "evil": "1", "seed": "1.5"})
    assert s == UISettings()
    text = " ".join(notes)
    for word in ("temperature", "top_p", "mode", "unknown link parameter 'evil'", "seed"):
        assert word in text
    long, notes = from_query({"prompt": "x" * 10_000})
    assert len(long.prompt) == 4000 and "cut" in notes[0]


def test_widget_values_are_coerced_to_the_settings_types():
    raw = dict(zip(FIELDS, values(UISettings())))
    raw.update(top_k=12.0, seed=7.0, max_new_tokens=20.0)
    s = from_widgets(raw)
    assert s.top_k == 12 and isinstance(s.top_k, int) and s.seed == 7
    assert from_widgets({**raw, "seed": None}).seed is None


def test_modes_map_to_generation_configs():
    greedy = generation_kwargs(UISettings(mode="greedy", temperature=1.5, num_beams=4))
    assert greedy["temperature"] == 0 and greedy["num_beams"] == 1
    sample = generation_kwargs(UISettings(mode="sample", temperature=1.5, top_k=3, seed=9))
    assert sample["temperature"] == 1.5 and sample["top_k"] == 3 and sample["seed"] == 9 and sample["num_beams"] == 1
    beam = generation_kwargs(UISettings(mode="beam", num_beams=4, length_penalty=0.7, early_stopping=True))
    assert beam["num_beams"] == 4 and beam["temperature"] == 0 and beam["early_stopping"] is True


# --- catalog and path safety --------------------------------------------------------------------


def test_catalog_lists_defaults_first_and_resolves_only_inside_its_folders(weights, tmp_path):
    (weights / "aaa-other").mkdir(exist_ok=True)
    (weights / "aaa-other" / "model.safetensors").write_bytes(b"x")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(b"x")
    link = weights / "escape"
    if not link.exists():
        link.symlink_to(outside)
    try:
        cat = Catalog(weights, tmp_path / "uploads")
        assert cat.names()[0] == "tiny-lm" and cat.default_name() == "tiny-lm"
        assert cat.resolve("tiny-lm") == (weights / "tiny-lm").resolve()
        for bad in ("../secret", "/etc/passwd", "tiny-lm/../../secret", "escape", "", "a\\b", "x/y/z",
                    UPLOAD_PREFIX + "../../etc", UPLOAD_PREFIX + "0" * 32):
            with pytest.raises(PlaygroundError):
                cat.resolve(bad)
    finally:
        link.unlink()
        (weights / "aaa-other" / "model.safetensors").unlink()
        (weights / "aaa-other").rmdir()


def test_uploads_are_copied_into_their_own_folder_and_checked(tmp_path):
    cat = Catalog(tmp_path / "w", tmp_path / "uploads")
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"0" * 100)
    (src / "config.json").write_text("{}")
    a = cat.save_upload([src / "model.safetensors", src / "config.json"], max_bytes=10_000)
    b = cat.save_upload([src / "model.safetensors"], max_bytes=10_000)
    assert a != b and a in cat.names() and b in cat.names()
    assert sorted(p.name for p in cat.resolve(a).iterdir()) == ["config.json", "model.safetensors"]
    (src / "model.bin").write_bytes(b"x")
    (src / "run.py").write_text("print(1)")
    with pytest.raises(PlaygroundError, match="pickle"):
        cat.save_upload([src / "model.bin"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="not accepted"):
        cat.save_upload([src / "model.safetensors", src / "run.py"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="no .safetensors"):
        cat.save_upload([src / "config.json"], max_bytes=10_000)
    with pytest.raises(PlaygroundError, match="limit"):
        cat.save_upload([src / "model.safetensors"], max_bytes=10)
    cat.discard_upload(b)
    assert b not in cat.names()


# --- registry -----------------------------------------------------------------------------------


def test_registry_shares_one_copy_across_threads_and_evicts_lru(weights):
    reg = ModelRegistry(capacity=2)
    got = []
    threads = [threading.Thread(target=lambda: got.append(reg.get(weights / "tiny-lm"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reg.loads == 1 and all(m is got[0] for m in got)
    assert not any(p.requires_grad for p in got[0].model.parameters())
    other = reg.get(weights / "tiny-lm", "bfloat16")
    assert other is not got[0] and reg.loads == 2
    reg.get(weights / "tiny-lm", "float16")
    assert len(reg.loaded_keys()) == 2 and reg.key(weights / "tiny-lm", "float32") not in reg.loaded_keys()


# --- handlers -----------------------------------------------------------------------------------


def test_page_load_restores_settings_from_the_url(h):
    request = gr.Request(query_params={"model": "tiny-lm", "prompt": "abc", "mode": "beam", "num_beams": "4",
                                       "top_p": "2", "model_x": "1"})
    out = h.on_page_load(request)
    got = dict(zip(FIELDS, out[:-1]))
    assert got["prompt"] == "abc" and got["mode"] == "beam" and got["num_beams"] == 4
    assert got["model"]["value"] == "tiny-lm"
    assert "top_p" in out[-1] and "model_x" in out[-1]
    missing = h.on_page_load(gr.Request(query_params={"model": "../../etc"}))
    assert "not available" in missing[-1] and dict(zip(FIELDS, missing[:-1]))["model"]["value"] == "tiny-lm"


def test_copy_link_encodes_the_widgets(h):
    s = UISettings(prompt="hi", mode="sample", seed=5, temperature=0.5)
    q = h.make_link(*values(s))
    assert from_query(dict(__import__("urllib.parse").parse.parse_qsl(q[1:])))[0] == s


def is_skip(value) -> bool:
    return isinstance(value, dict) and value.get("__type__") == "update" and len(value) == 1


def test_load_shows_a_model_card_and_refuses_bad_names(h):
    dropdown, card, status, session, prompt, chat, kind = h.load("tiny-lm", "float32", new_session())
    assert "Parameters" in card and "GQA" in card and "RoPE" in card
    assert session["model"] == "tiny-lm" and "Loaded" in status
    assert chat["visible"] is False and kind["value"] == "self"
    # A bad name: one line in the status (no gr.Error badge), the previous model stays in use.
    dropdown, card, status, *rest = h.load("../../etc", "float32", session)
    assert "Could not load" in status and "\n" not in status and "Still using **tiny-lm**" in status
    assert re.search("outside|not a checkpoint|no checkpoint", status)
    assert dropdown["value"] == "tiny-lm" and is_skip(card) and all(is_skip(v) for v in rest)
    assert "Could not load" in h.load("../../etc", "float32", new_session())[2]


def test_generation_streams_frames_and_fills_every_panel(h):
    s = UISettings(prompt="Hello", max_new_tokens=12, seed=3)
    frames, run_ = run(h, s)
    assert len(frames) >= 2
    output, status, notes, timing, kv, growth, step, funnel, tree, table, caption, session = frames[-1]
    assert output.count('class="tok"') == 12 and "Done" in status
    assert "2 · N_layers" in kv and "prefill" in timing
    assert isinstance(growth, gr.Plot) or growth.data  # a plotly figure
    assert step["maximum"] == 11 and "Step 11" in caption
    assert session["run"]["attention"]["self"].shape[:2] == (2, 4)
    # Intermediate frames carry no session and skip the heavy inspector figures.
    assert frames[0][-1] is not session


def test_seeded_sampling_reproduces_and_api_matches_the_stream(h):
    s = UISettings(prompt="Hello", mode="sample", temperature=1.0, top_k=20, top_p=0.9, seed=11, max_new_tokens=10)
    _, a = run(h, s)
    _, b = run(h, s, "s2")
    assert a["records"][-1]["token_ids"] == b["records"][-1]["token_ids"]
    api = h.generate_text("tiny-lm", "Hello", to_query(s))
    assert api["token_ids"] == a["records"][-1]["token_ids"]


def test_inspector_shows_stages_and_removed_candidates(h):
    s = UISettings(prompt="Hello", mode="sample", temperature=0.7, top_k=3, seed=1, max_new_tokens=4,
                   top_candidates=8)
    _, r = run(h, s)
    funnel, tree, table, caption, html = h.inspect(1, {"run": r})
    names = {t.name for t in funnel.data}
    assert "raw softmax" in names and len(names) >= 2
    assert "removed by a filter" in caption
    assert 'outline: 2px solid' in html


def test_beam_search_shows_beams(h):
    _, r = run(h, UISettings(prompt="Hello", mode="beam", num_beams=3, max_new_tokens=5))
    funnel, tree, table, caption, _ = h.inspect(4, {"run": r})
    assert len(r["records"][-1]["beams"]) >= 1
    assert any(t.type == "scatter" and t.mode == "markers+text" for t in tree.data)
    assert table.data[0].type == "table"


def test_settings_are_clamped_with_visible_notes(h):
    frames, r = run(h, UISettings(prompt="Hello", mode="sample", top_k=500, max_new_tokens=1024, seed=0))
    notes = frames[-1][2]
    assert "top" in notes.lower() and "Note:" in notes
    with pytest.raises(gr.Error, match="prompt is empty"):
        run(h, UISettings(prompt="   "))


def test_stop_ends_the_generation_within_one_step(h):
    s = UISettings(prompt="Hello", max_new_tokens=200, pace_ms=50)
    gen = h.generate(gr.Request(session_hash="stopper"), *values(s), new_session())
    first = next(gen)
    assert "Generating" in first[1]
    msg = h.stop(gr.Request(session_hash="stopper"))
    assert msg.startswith("**Stopped**")
    rest = list(gen)
    records = rest[-1][-1]["run"]["records"]
    assert records[-1]["finish_reason"] == "stopped" and len(records) <= 3
    assert h.stop(gr.Request(session_hash="stopper")) == "Nothing is running."


def test_attention_panel_views_and_gqa_grouping(h):
    _, r = run(h, UISettings(prompt="Hi there", max_new_tokens=5))
    session = {"run": r}
    grid, heat, row, summary, note, layer, head, query = h.attention(session, "self", 1, 3, "mean per KV group", 9)
    assert len(grid.data) == 4 and "KV group 1" in heat.layout.title.text
    assert "generated token" in row.layout.title.text and "GQA" in note
    assert summary.data[0].z.shape == (2, 4) or np.asarray(summary.data[0].z).shape == (2, 4)
    mean = h.attention(session, "self", 0, 0, "max of heads", 0)[1]
    assert "max over heads" in mean.layout.title.text
    empty = h.attention(new_session(), "self", 0, 0, "single head", 0)
    assert "Generate" in empty[4]


def test_kv_rerun_without_cache_compares_timings(h):
    _, r = run(h, UISettings(prompt="Hello", max_new_tokens=6))
    fig, md = h.rerun_without_cache({"run": r})
    assert {t.name for t in fig.data} >= {"with KV cache", "without KV cache"} and "same tokens" in md
    with pytest.raises(gr.Error, match="Generate once first"):
        h.rerun_without_cache(new_session())


def test_positional_panel_follows_the_model_scheme(h):
    md, f1, f2, f3, f4, pair = h.positional("tiny-lm", "float32", 64, 1000, 2)
    assert "RoPE" in md and f1["visible"] and pair["visible"]
    assert "pair 2" in f2["value"].layout.title.text
    assert h.positional_for_session({"model": "tiny-lm", "dtype": "float32"}, 64, 1000, 2)[0] == md
    assert all(is_skip(v) for v in h.positional_for_session(new_session(), 64, 1000, 2))


def test_corrupt_upload_is_one_clear_error_and_the_app_keeps_working(h, tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\xff" * 64)
    before = set(h.catalog.names())
    session = {**new_session(), "model": "tiny-lm"}
    dropdown, card, status, *rest = h.upload([str(bad)], "float32", session)  # no exception: a status line
    assert status.startswith("**Upload refused:**") and "\n" not in status and "Traceback" not in status
    assert "model.safetensors" in status or "header" in status
    assert dropdown["value"] == "tiny-lm" and is_skip(card) and all(is_skip(v) for v in rest)
    assert set(h.catalog.names()) == before  # the broken upload was removed
    for files in (None, [str(tmp_path / "weights.bin")]):
        (tmp_path / "weights.bin").write_bytes(b"x")
        status = h.upload(files, "float32", session)[2]
        assert status.startswith("**") and ("pickle" in status or "choose" in status)
    frames, _ = run(h, UISettings(prompt="still ok", max_new_tokens=3))
    assert "Done" in frames[-1][1]


def test_a_valid_upload_is_loaded_and_listed(h, weights):
    from playground.checkpoints.loader import load_model
    from playground.checkpoints.own_format import save_checkpoint

    lm = load_model(weights / "tiny-lm")
    path = save_checkpoint(weights.parent / "own.safetensors", lm.model, lm.config, tokenizer=lm.tokenizer)
    dropdown, card, status, session, *_ = h.upload([str(path)], "float32", new_session())
    assert dropdown["value"].startswith(UPLOAD_PREFIX) and "Uploaded" in status and "Parameters" in card
    assert session["model"] == dropdown["value"]
    assert h.load(dropdown["value"], "float32", new_session())[3]["model"] == dropdown["value"]


def test_app_entry_reads_port_from_the_environment(monkeypatch):
    import app as entry

    monkeypatch.setenv("GRADIO_SERVER_PORT", "7999")
    args = entry.parse_args(["--host", "0.0.0.0", "--share"])
    assert args.port == 7999 and args.host == "0.0.0.0" and args.share
    assert entry.parse_args(["--port", "1234"]).port == 1234


def test_app_exposes_a_named_generation_api(app):
    names = [getattr(fn, "api_name", None) for fn in app.fns.values()]
    assert "generate_text" in names


def test_seq2seq_generation_shows_encoder_decoder_and_cross_attention(h):
    _, card, status, session, prompt, chat, kind = h.load("tiny-seq2seq", "float32", new_session())
    assert "encoder-decoder" in card and "Source text" in prompt["label"]
    assert [v for _, v in kind["choices"]] == ["cross", "self", "encoder"] and kind["value"] == "cross"
    frames, r = run(h, UISettings(model="tiny-seq2seq", prompt="March 5, 2021", max_new_tokens=6))
    assert "Cross-attention cache" in frames[-1][4] or "cross" in str(r["records"][-1]["cache"])
    maps = r["attention"]
    L, heads, T, S = maps["cross"].shape
    assert S == len(r["prompt_ids"]) and maps["encoder"].shape[2:] == (S, S) and maps["self"].shape[2:] == (T, T)
    grid, heat, row, summary, note, *_ = h.attention({"run": r}, "cross", 1, 2, "single head", None)
    assert "cross-attention" in heat.layout.title.text and len(heat.layout.xaxis.ticktext) == S
    n = len(r["records"][-1]["token_ids"])  # by default the row that chose the last generated token
    assert f"while choosing generated token {n - 1}" in row.layout.title.text
    row_end = h.attention({"run": r}, "cross", 0, 0, "single head", T - 1)[2]
    assert "chose nothing" in row_end.layout.title.text if T > n else True
    md, *figs, pair = h.positional("tiny-seq2seq", "float32", 64, 1000, 0)
    assert "Sinusoidal" in md and all(f["visible"] for f in figs)
    assert "base 1000" in figs[3]["value"].layout.annotations[1].text


def test_t5_relative_bias_panel(h):
    md, f1, f2, f3, f4, pair = h.positional("t5-random", "float32", 32, 1000, 0)
    assert "Relative position bias" in md and f1["visible"] and not f2["visible"]
    assert len(f1["value"].data) == 4  # one line per head


def test_beam_view_lists_real_hypotheses_only(h):
    from playground.ui.views import beam_steps

    _, r = run(h, UISettings(prompt="Hello", mode="beam", num_beams=3, max_new_tokens=5))
    steps = beam_steps(r["records"])
    assert len(steps) == 5 and all(len(beams) >= 1 for beams in steps)
    # scores are log-probabilities, never the placeholders of beam slots that ended
    assert all(-1e3 < b["score"] <= 0 for beams in steps for b in beams)
    assert all(len(beams) == 3 for beams in steps[:-1])


def test_load_test_reads_server_memory_from_proc():
    from playground.loadtest import _rss_bytes, _vmrss_bytes

    own = _vmrss_bytes(os.getpid())
    assert own > 10 * 2**20 and _rss_bytes(os.getpid()) >= own  # this process (plus any children)
    assert _rss_bytes(2**22 + 12345) == 0  # no such process: 0, not an exception


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
def test_chat_toggle_wraps_the_prompt_in_the_chat_template(chat_app, name):
    h = chat_app
    _, card, status, session, prompt, chat, kind = h.load(name, "float32", new_session())
    assert chat["visible"] is True and "| Chat template | yes |" in card
    lm = h.model_for(name, "float32")
    plain = run(h, UISettings(model=name, prompt="Hi", max_new_tokens=3, chat=False))[1]
    wrapped = run(h, UISettings(model=name, prompt="Hi", max_new_tokens=3, chat=True))[1]
    assert plain["prompt_ids"] == lm.tokenize("Hi")
    assert lm.detokenize(wrapped["prompt_ids"]) == "<s>user: Hi</s><s>assistant: "
    assert "chat=true" in wrapped["query"]  # a copied link keeps the toggle
    assert not wrapped["notes"]
    # The toggle is hidden again for a checkpoint without a template, and a stale chat=1 is only a note.
    assert h.load("tiny-lm", "float32", session)[5]["visible"] is False
    stale = run(h, UISettings(model="tiny-lm", prompt="Hi", max_new_tokens=2, chat=True))[1]
    assert stale["prompt_ids"] == h.model_for("tiny-lm", "float32").tokenize("Hi")
    assert any("no chat template" in n for n in stale["notes"])


def test_every_screenshot_linked_from_the_readme_is_in_the_repo():
    readme = Path(__file__).resolve().parents[1] / "README.md"
    links = re.findall(r"\]\((tests/screenshots/[^)]+\.png)\)", readme.read_text())
    assert len(links) >= 9
    missing = [p for p in links if not (readme.parent / p).is_file()]
    assert not missing, f"README links screenshots that are not in the repo: {missing}"
