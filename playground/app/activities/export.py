"""A run to take home: the run on screen as JSON and as CSV, with the link that reopens it. No Gradio, no model work.

    record = run_record(run, settings, link)   # a dict: settings, prompt, every step with its candidates
    to_json(record), to_csv(record)             # the two files' text

Steps are counted as every screen counts them (`Run.step_number`: step 1 is the first new token; a branch's
inherited and hand-placed tokens come first). Each candidate carries its probability after every sampler stage
the run applied ("raw" is the model's own softmax), in the order the sampler applies them. The link reproduces
the run: the seed it used, its branches, its lab edits (`Session.run_settings`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from typing import Any

from playground.app import frames
from playground.app.run import Run
from playground.app.settings import UISettings, to_query
from playground.app.tab import Action, Out, Row, Tab, Words
from playground.hosting import shared_link
from playground.steps import step_number

FORMAT = "transformer-playground-run"
VERSION = 1
# A spreadsheet runs a cell that starts with one of these as a formula: such a token is written with a leading
# apostrophe (the spreadsheets' own "this is text" mark), so a model's output never runs in a teacher's Excel.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PAGE = re.compile(r"https?://[^\s?#\"'<>]{1,300}")  # the page's own address, as its script reports it


def link_for(settings: UISettings, page: str) -> str:
    """The address that reopens a run of `settings`: inside a Space the Space's huggingface.co address, else the
    page's own address (`page`, from the browser) with the settings as its query; the query alone when the page's
    address is not a plain http(s) address."""
    return address_for(to_query(settings), page)


def address_for(query: str, page: str) -> str:
    """The address of the app with `query` (a "?..." string): the Space's, else the page's own, else the query."""
    link = shared_link(query)
    if link.startswith("https://"):
        return link
    page = str(page or "").split("?")[0].split("#")[0]
    return (page if _PAGE.fullmatch(page) else "") + link


def run_record(run: Run, settings: UISettings, link: str) -> dict[str, Any]:
    """The run as one JSON-ready dict. `settings`: the settings that reproduce it (`Session.run_settings`);
    `link`: the address that reopens it (the page's own, with those settings in its query)."""
    stages = frames.stage_names(run.events)
    steps: list[dict[str, Any]] = []
    for text, token_id, prob in run.inherited:  # a branch's tokens before its branch point, as its parent chose them
        steps.append(_step(len(steps), text, int(token_id), float(prob), "inherited", None, stages))
    for text, token_id in zip(run.forced_texts, run.forced):  # placed by hand at the branch point
        steps.append(_step(len(steps), text, int(token_id), None, "forced", None, stages))
    for step in run.path:
        steps.append(_step(len(steps), step.token_text, step.token_id, step.prob, "generated", step.candidates, stages))
    last = run.events[-1] if run.events else None
    return {
        "format": FORMAT, "version": VERSION, "link": link,
        "model": settings.model, "kind": run.kind, "mode": run.mode, "run": run.number,
        "settings": dataclasses.asdict(settings),
        "prompt": settings.prompt,
        "prompt_tokens": [{"token": text, "id": int(i)} for text, i in zip(run.prompt_texts, run.prompt_ids)],
        "stages": stages,
        "steps": steps,
        "text": last.text if last is not None else "",
        "finish_reason": run.finish_reason,
    }


def _step(index: int, text: str, token_id: int, prob: float | None, source: str, candidates: Any,
          stages: list[str]) -> dict[str, Any]:
    return {
        "step": step_number(index), "token": text, "id": token_id,
        "prob": None if prob is None else float(prob), "source": source,
        "candidates": [{"token": c.text, "id": int(c.token_id), "chosen": bool(c.chosen), "logit": float(c.logit),
                        "probs": {s: float(c.stages.get(s, 0.0)) for s in stages}, "removed_by": c.removed_by}
                       for c in candidates or []],
    }


def to_json(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, indent=1, allow_nan=False)


def to_csv(record: dict[str, Any]) -> str:
    """One row per candidate of every step (a step without candidates: one row for its token). The link, the
    model and the prompt come first as "#" lines; a byte-order mark lets spreadsheets read Chinese as UTF-8."""
    out = io.StringIO()
    out.write("\ufeff")
    settings = record["settings"]
    knobs = ", ".join(f"{k}={settings[k]}" for k in ("mode", "temperature", "top_k", "top_p", "repetition_penalty",
                                                     "num_beams", "max_new_tokens", "seed", "chat"))
    for line in (f"# Transformer Playground run {record['run']} (this file's link reopens it)",
                 f"# link: {record['link']}", f"# model: {record['model']} · {knobs}",
                 f"# prompt: {json.dumps(record['prompt'], ensure_ascii=False)}"):
        out.write(" ".join(line.split()) + "\r\n")  # one line each, whatever the prompt holds
    writer = csv.writer(out, lineterminator="\r\n")
    stages = record["stages"]
    writer.writerow(["step", "source", "token", "token_id", "token_prob", "rank", "candidate", "candidate_id",
                     "chosen", "removed_by", "logit", *(f"p_{s}" for s in stages)])
    for step in record["steps"]:
        head = [step["step"], step["source"], cell(step["token"]), step["id"], _number(step["prob"])]
        if not step["candidates"]:
            writer.writerow(head + [""] * (6 + len(stages)))
            continue
        for rank, c in enumerate(step["candidates"], start=1):
            writer.writerow(head + [rank, cell(c["token"]), c["id"], int(c["chosen"]), c["removed_by"] or "",
                                    _number(c["logit"]), *(_number(c["probs"][s]) for s in stages)])
    return out.getvalue()


def cell(text: str) -> str:
    """A token as a spreadsheet cell: as it is, or with the apostrophe that keeps a formula-like start text."""
    return "'" + text if text.startswith(FORMULA_START) else text


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def file_name(record: dict[str, Any], suffix: str) -> str:
    """e.g. "tiny-lm-run-3.json": the model's name in plain characters."""
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", str(record["model"]).split("/")[-1]).strip("-.") or "model"
    return f"{model[:60]}-run-{int(record['run'])}.{suffix}"


# The tool's part of the Class tools page (its events: `playground.ui.teacher`): the server writes the file's text,
# the browser saves it.
TAB = Tab(tab="export", elem_id="export-run", section="teacher", order=90, view=None, layout=(
    Words("export_title_md", ("export_title",)),
    Words("export_intro_md", ("export_intro",), classes=("pg-hint",)),
    Row((Action("export_json", "press", "export_json", "export-json-btn", min_width=120, primary=False),
         Action("export_csv", "press", "export_csv", "export-csv-btn", min_width=120, primary=False)),
        equal_height=True),
    Out("export_md", "markdown", "export-md"),
    Out("export_file", "data", "export-file"),  # {"name", "type", "text"} for the browser
    Out("page_address", "data", "page-address")))  # the page's own address, from its script
