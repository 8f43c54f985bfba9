"""Generation engine: settings, logits processors, greedy / sampled / beam search, step events.

    import playground
    for event in playground.generate(lm, "Hello", playground.GenerationConfig(max_new_tokens=8)):
        print(event.token_text, event.prob, event.cache["bytes"])
"""

from playground.generation.config import Caps, GenerationConfig, SettingsError, clamp_settings
from playground.generation.engine import full_attention, generate, generate_all
from playground.generation.events import Candidate, GenerationResult, Hypothesis, StepEvent

__all__ = [
    "Candidate", "Caps", "GenerationConfig", "GenerationResult", "Hypothesis", "SettingsError", "StepEvent",
    "clamp_settings", "full_attention", "generate", "generate_all",
]
