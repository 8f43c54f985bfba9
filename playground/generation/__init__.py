"""Generation engine: settings, logits processors, greedy / sampled / beam search, step events.

    import playground
    for event in playground.generate(lm, "Hello", playground.GenerationConfig(max_new_tokens=8)):
        print(event.token_text, event.prob, event.cache["bytes"])

Modules: config (the knobs), plan (settings + prompt -> a validated plan, context fitting), stepper
(one model step at a time; what differs between decoder-only and seq2seq), processors (logits
pipeline), sampling (choosing a token, describing candidates), beam (beam-search bookkeeping),
captures (what a run records), engine (the decoding loops), speculative (speculative decoding: drafts
checked in one pass of the model) and drafters (who proposes them), events (what they stream), languages
(the target-language codes of translation checkpoints), budget (the memory a request needs, checked by
plan before anything is allocated).
"""

from playground.generation.budget import BudgetError, Request, check_full_attention, check_request
from playground.generation.config import GenerationConfig, SettingsError
from playground.generation.engine import generate, generate_all, run_plan, token_path
from playground.generation.events import (
    Candidate,
    GenerationResult,
    Hypothesis,
    StepCapture,
    StepEvent,
    TokenStep,
)
from playground.generation.knobs import KNOBS, MAX_BEAMS, Knob
from playground.generation.languages import language_codes, language_token_id
from playground.generation.plan import ContextFit, fit_to_context, plan
from playground.generation.stepper import full_attention, stepper_class

__all__ = [
    "KNOBS", "MAX_BEAMS", "BudgetError", "Candidate", "ContextFit", "GenerationConfig", "GenerationResult", "Hypothesis", "Knob",
    "Request", "SettingsError", "StepCapture", "StepEvent", "TokenStep", "check_full_attention", "check_request",
    "fit_to_context", "full_attention", "generate", "generate_all", "language_codes", "language_token_id", "plan",
    "run_plan", "stepper_class", "token_path",
]
