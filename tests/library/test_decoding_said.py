"""Every run says how it decoded: `decoding = {"captured", "rows", "backend", "reason"}` on the result, in the CLI's
JSON and in `/generate_text`'s answer (issue "one step serves the class", item 5). `rows` is the most rows of any pass
the run was in: its own beams alone, every request's rows when it shared the scheduler's pass."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.batch import Scheduler
from playground.generation.plan import plan
from tests.hf_tiny import save_small_llama

KEYS = {"captured", "rows", "backend", "reason"}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("llama")
    save_small_llama(directory)
    return directory


@pytest.fixture(scope="module")
def lm(checkpoint):
    return playground.load_model(checkpoint)


def test_a_run_of_a_model_loaded_without_compile_says_it_decoded_eagerly_and_why(lm):
    result = generate_all(lm, [5, 6, 7], GenerationConfig(max_new_tokens=3))
    assert result.decoding == {"captured": False, "rows": 1, "backend": "eager",
                               "reason": "the model was loaded without compile=True"}
    beams = generate_all(lm, [5, 6, 7], GenerationConfig(max_new_tokens=3, num_beams=3))
    assert beams.decoding["rows"] == 3 and beams.decoding["captured"] is False


def test_requests_sharing_the_schedulers_passes_say_how_many_rows_they_shared(lm, one_thread):
    scheduler = Scheduler(lm, max_rows=16, max_prefills=4)
    plans = [plan(lm, [5, 6 + i], GenerationConfig(max_new_tokens=4)) for i in range(3)]
    beams = plan(lm, [9, 9], GenerationConfig(max_new_tokens=4, num_beams=2))
    tickets = [scheduler.submit(p) for p in [*plans, beams]]
    while scheduler.busy():
        scheduler.step()
    assert all(t.drain()[-1].finished for t in tickets)
    for p in [*plans, beams]:  # 3 single rows and 2 beams, in one pass from the first step on
        assert p.decoding == {"captured": False, "rows": 5, "backend": "eager",
                              "reason": "the model was loaded without compile=True"}


def test_a_request_alone_in_the_scheduler_says_one_row(lm, one_thread):
    scheduler = Scheduler(lm)
    p = plan(lm, [5, 6, 7], GenerationConfig(max_new_tokens=3))
    ticket = scheduler.submit(p)
    while scheduler.busy():
        scheduler.step()
    ticket.drain()
    assert p.decoding["rows"] == 1 and set(p.decoding) >= KEYS


def test_the_cli_json_carries_decoding(checkpoint):
    out = subprocess.run([sys.executable, "-m", "playground", "generate", "--model", str(checkpoint),
                          "--input-ids", "5,6,7", "--max-new-tokens", "3", "--json"],
                         capture_output=True, text=True, check=True)
    decoding = json.loads(out.stdout)["decoding"]
    assert decoding == {"captured": False, "rows": 1, "backend": "eager",
                        "reason": "the model was loaded without compile=True"}


def test_the_cli_with_compile_says_captured_with_its_backend(checkpoint):
    out = subprocess.run([sys.executable, "-m", "playground", "generate", "--model", str(checkpoint),
                          "--input-ids", "5,6,7", "--max-new-tokens", "3", "--compile", "eager", "--json"],
                         capture_output=True, text=True, check=True)
    decoding = json.loads(out.stdout)["decoding"]
    assert decoding["captured"] is True and decoding["backend"] == "eager"
    assert decoding["rows"] == 1 and decoding["reason"] == ""


def test_the_step_takes_only_what_it_knows_and_anything_else_decodes_eagerly_and_says_why(checkpoint, lm):
    """The captured step's allow list: a setting or an edit it does not take decodes eagerly, says which, and gives
    the eager loop's own tokens (before, an edit of a kind the step did not know raised KeyError)."""
    import dataclasses

    from playground.generation import captured
    from playground.interventions import Steer

    @dataclasses.dataclass(frozen=True)
    class Nudge(Steer):  # an edit of a new kind: the hooks apply it (it is a Steer), the step's buffers do not know it
        pass

    compiled = playground.load_model(checkpoint, compile="eager")
    vector = tuple(0.05 * ((i % 7) - 3) for i in range(compiled.config.d_model))
    cases = [(GenerationConfig(max_new_tokens=4, forced_bos_token_id=9),
              "the captured step does not take forced_bos_token_id: eager"),
             (GenerationConfig(max_new_tokens=4, interventions=(Nudge(layer=0, vector=vector),)),
              "the captured step does not take the edit Nudge: eager")]
    for cfg, reason in cases:
        got = generate_all(compiled, [5, 6, 7], cfg)
        assert got.decoding == {"captured": False, "rows": 1, "backend": "eager", "reason": reason}
        assert got.sequences[0].token_ids == generate_all(lm, [5, 6, 7], cfg).sequences[0].token_ids
    plain = generate_all(compiled, [5, 6, 7], GenerationConfig(max_new_tokens=4, interventions=(
        Steer(layer=0, vector=vector),)))
    assert plain.decoding["captured"] is True  # a kind it knows: per-row values of the step
    assert set(captured.TAKES).isdisjoint(captured.EAGER_BECAUSE)
