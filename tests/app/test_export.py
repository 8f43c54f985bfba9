"""A run to take home: JSON and CSV of the run on screen, its steps counted as the page counts them, each
candidate through the sampler stages, and a link that reproduces the run."""

from __future__ import annotations

import csv
import io
import json
from urllib.parse import parse_qsl, urlparse

import pytest

from playground.app.activities.export import cell, file_name, link_for, run_record, to_csv, to_json
from playground.app.play import play
from playground.app.session import Session
from playground.app.settings import UISettings, from_query


def finished(session: Session, lm, settings: UISettings, parent=None):
    *_, last = play(session, lambda name, dtype, owner: lm, settings, parent=parent, pace=False)
    assert last.run.finish_reason in ("length", "eos")
    return last.run


@pytest.fixture
def sampled(lm):
    session = Session(key="teacher")
    run = finished(session, lm, UISettings(model="tiny-lm", prompt="Hello", mode="sample", temperature=1.3, top_k=12,
                                           max_new_tokens=7, top_candidates=6))
    return session, run


def test_the_record_holds_every_step_its_candidates_through_the_stages_and_a_link_that_replays_it(lm, sampled):
    session, run = sampled
    settings = session.run_settings(run)
    record = json.loads(to_json(run_record(run, settings, link_for(settings, "http://127.0.0.1:7860/"))))
    assert record["stages"] == ["raw", "temperature", "top_k"]
    assert [s["step"] for s in record["steps"]] == [run.step_number(i) for i in range(len(run.path))] == list(range(1, 8))
    assert [s["id"] for s in record["steps"]] == run.generated_ids
    assert [s["token"] for s in record["steps"]] == [p.token_text for p in run.path]
    for entry, step in zip(record["steps"], run.path):
        assert entry["prob"] == pytest.approx(step.prob, abs=0)
        assert len(entry["candidates"]) == 6 and sum(c["chosen"] for c in entry["candidates"]) == 1
        chosen = next(c for c in entry["candidates"] if c["chosen"])
        assert chosen["id"] == step.token_id and chosen["probs"]["top_k"] == pytest.approx(step.prob, rel=1e-6)
        assert all(set(c["probs"]) == {"raw", "temperature", "top_k"} for c in entry["candidates"])
    assert record["prompt"] == "Hello" and [t["id"] for t in record["prompt_tokens"]] == run.prompt_ids
    link = urlparse(record["link"])
    assert (link.scheme, link.netloc, link.path) == ("http", "127.0.0.1:7860", "/")
    reopened, notes = from_query(dict(parse_qsl(link.query)), UISettings())
    assert not notes and reopened.seed == run.cfg.seed is not None  # the seed it drew is in the link
    again = finished(Session(key="student"), lm, reopened)  # the link's run: the same tokens
    assert again.generated_ids == run.generated_ids


def test_a_branch_counts_its_inherited_and_forced_tokens_first(lm, sampled):
    session, run = sampled
    branch = finished(session, lm, run.settings, parent=(run, 3, [lm.tokenize("z")[0]]))
    record = run_record(branch, session.run_settings(branch), "?x")
    assert [s["source"] for s in record["steps"][:4]] == ["inherited"] * 3 + ["forced"]
    assert [s["step"] for s in record["steps"]] == list(range(1, 1 + len(record["steps"])))
    assert record["steps"][4]["step"] == branch.step_number(0) == 5
    assert record["steps"][3]["prob"] is None and record["steps"][3]["candidates"] == []
    assert "branches=3%3A" in link_for(session.run_settings(branch), "http://h/")


def test_the_csv_is_one_row_per_candidate_and_spreadsheets_never_run_a_token(lm, sampled):
    session, run = sampled
    record = run_record(run, session.run_settings(run), "http://h/?model=tiny-lm")
    text = to_csv(record)
    assert text.startswith("\ufeff# Transformer Playground run") and "# link: http://h/?model=tiny-lm" in text
    rows = list(csv.reader(io.StringIO("\n".join(line for line in text.lstrip("\ufeff").splitlines()
                                                 if not line.startswith("#")))))
    header, body = rows[0], rows[1:]
    assert header[-3:] == ["p_raw", "p_temperature", "p_top_k"]
    assert len(body) == 7 * 6 and {int(r[0]) for r in body} == set(range(1, 8))
    assert [r[2] for r in body if r[8] == "1"] == [cell(p.token_text) for p in run.path]
    assert cell("=HYPERLINK(1)") == "'=HYPERLINK(1)" and cell("-") == "'-" and cell(" Paris") == " Paris"
    hostile = dict(record, prompt='a\n# link: evil\n"=1"', steps=[dict(record["steps"][0], token="=cmd|' /C calc'!A0")])
    lines = to_csv(hostile).splitlines()
    assert sum(line.startswith("# link") for line in lines) == 1  # the prompt stays on its own line
    assert any(line.startswith("1,generated,'=cmd") for line in lines)
    assert file_name(record, "csv") == "tiny-lm-run-1.csv"
    assert file_name(dict(record, model="upload:../../x y"), "json") == "x-y-run-1.json"


def test_the_link_is_the_pages_own_address_or_the_spaces(monkeypatch):
    settings = UISettings(model="tiny-lm", prompt="Hi")
    assert link_for(settings, "https://school.example/play/?old=1#x").startswith("https://school.example/play/?model=")
    assert link_for(settings, "javascript:alert(1)").startswith("?model=")  # anything but http(s): the query alone
    monkeypatch.setenv("SPACE_ID", "teacher/playground")
    assert link_for(settings, "https://x.hf.space/").startswith("https://huggingface.co/spaces/teacher/playground?model=")
