"""`RunCache`: what the analyses of one recorded run compute once and reuse across step changes.

A run (`GenerationResult`) records per step only what its config asked for (attention rows, the
residual stream). Attention internals (q, k, v as attended, the projected output) come from one
pass over the run's final sequence through the model's own code (`stepper_class(kind).run_whole`),
with a `Recorder` asking for them. Because attention is causal, that pass computes, at the position
of step t's query, exactly what the decode step computed (tested against the live step's weights).

The UI keeps one `RunCache` per run (in the session state) and hands it to every analysis, so
moving the selected step recomputes only that step's small numbers. Memory stays bounded: one
chunk of layers' internals (at most `INTERNALS_BUDGET_BYTES`) and small per-step summaries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from playground.generation import GenerationResult, stepper_class
from playground.interventions import as_interventions
from playground.loaded import LoadedModel
from playground.models.edits import edited
from playground.models.recorder import Recorder

# float32 q, k, v and outputs held at once: every SmolLM2 layer of a 512-token run (~3.4 MB a layer)
INTERNALS_BUDGET_BYTES = 128 * 2**20
Internals = dict[str, dict[str, np.ndarray]]  # kind -> {"q": (h, T, d), "k"/"v": (h_kv, S, d), "output": (T, d_model)}


class RunCache:
    """One run's token sequences, labels, step positions, cached attention internals and lens rows.

    Decoder-only: the decoder stream is prompt + generated. Seq2seq: the source (`prompt_ids`) is
    encoded; the decoder stream is the decoder prefix (start token) + generated. Step t chose
    generated token t; its query is the last token of the stream before it (position
    len(prefix) - 1 + t). Step 0 is the prefill: every prefix position is a query at once.
    """

    def __init__(
        self, lm: LoadedModel, result: GenerationResult, *, budget_bytes: int = INTERNALS_BUDGET_BYTES
    ) -> None:
        if not result.token_ids:
            raise ValueError("the run generated no tokens; generate at least one token first")
        self.lm, self.result = lm, result
        self.budget_bytes = budget_bytes  # internals held at once (one pass records as many layers as fit)
        self.kind = lm.kind
        self.prefix = list(result.decoder_prefix) or (
            list(result.prompt_ids) if lm.kind == "decoder" else stepper_class(lm.kind).decoder_prefix(lm.config, [])
        )
        self.source = list(result.prompt_ids) if lm.kind == "seq2seq" else []
        self.decoder_ids = self.prefix + list(result.token_ids)
        # Tokens a branch forced after the stepper's own start (the plan puts them in the decoder prefix);
        # the whole-sequence pass feeds them as the stepper does.
        start = stepper_class(lm.kind).decoder_prefix(lm.config, list(result.prompt_ids))
        self.forced = self.prefix[len(start):] if self.prefix[: len(start)] == start else []
        self._labels: dict[str, list[str]] = {}
        self._internals: dict[int, Internals] = {}
        self.lens_rows: dict[int, dict[str, Any]] = {}  # step -> logit-lens summary (see logit_lens)

    def check_result(self, result: GenerationResult) -> None:
        if result is not self.result:
            raise ValueError("this RunCache belongs to another run; make one RunCache per GenerationResult")

    # --- steps and positions ---------------------------------------------------------------------

    @property
    def n_steps(self) -> int:
        return len(self.result.token_ids)

    def check_step(self, step: int) -> int:
        step = int(step)
        if not 0 <= step < self.n_steps:
            raise ValueError(f"step {step} is outside this run's steps 0..{self.n_steps - 1}")
        return step

    def query_position(self, step: int) -> int:
        """Position in the decoder stream of the query that chose generated token `step`."""
        return len(self.prefix) - 1 + self.check_step(step)

    def query_positions(self, step: int) -> list[int]:
        """The queries a step computes: the whole prefix at the prefill (step 0), else one."""
        step = self.check_step(step)
        return list(range(len(self.prefix))) if step == 0 else [self.query_position(step)]

    # --- labels ----------------------------------------------------------------------------------

    def labels(self, which: str) -> list[str]:
        """Token texts of the "decoder" stream or the "source" (seq2seq)."""
        if which not in self._labels:
            ids = self.decoder_ids if which == "decoder" else self.source
            self._labels[which] = self.lm.token_texts(ids)
        return self._labels[which]

    # --- attention internals ---------------------------------------------------------------------

    def layer_count(self, kind: str) -> int:
        c = self.lm.config
        return c.n_encoder_layers if kind == "encoder" else c.n_layers

    def _bytes_per_layer(self) -> int:
        c = self.lm.config
        T, S = len(self.decoder_ids), len(self.source)
        total = T * ((c.n_heads + 2 * c.n_kv_heads) * c.head_dim + c.d_model)  # self-attention
        if self.kind == "seq2seq":
            total += T * (c.n_heads * c.head_dim + c.d_model) + 2 * S * c.n_kv_heads * c.head_dim  # cross
            e = c.encoder_config()  # the encoder layer of the same index, with its own head sizes
            total += S * ((e.n_heads + 2 * e.n_kv_heads) * e.head_dim + c.d_model)
        return 4 * total

    @property
    def held_layers(self) -> list[int]:
        """Layers whose internals are held now (a layer outside them costs one more pass)."""
        return sorted(self._internals)

    def internals(self, layer: int) -> Internals:
        """kind -> q, k, v, output of `layer` over the whole final sequence (one pass per chunk)."""
        layer = int(layer)
        if layer not in self._internals:
            top = max(self.layer_count("self"), self.layer_count("encoder"))
            if not 0 <= layer < top:
                raise ValueError(f"layer {layer} is outside this model's layers 0..{top - 1}")
            per_pass = max(1, self.budget_bytes // max(1, self._bytes_per_layer()))
            start = layer // per_pass * per_pass
            self._record(range(start, min(top, start + per_pass)))
        return self._internals[layer]

    @torch.inference_mode()
    def _record(self, layers: range) -> None:
        recorder = Recorder((), internals=layers)
        stepped = self.forced + list(self.result.token_ids)  # after the stepper's own start
        with edited(self.lm.model, as_interventions(getattr(self.result, "interventions", ()))):  # a run's own edits
            stepper_class(self.kind).run_whole(self.lm.model, self.result.prompt_ids, stepped, recorder)
        held: dict[int, Internals] = {}
        for kind, by_layer in recorder.internals.items():
            for layer, tensors in by_layer.items():
                held.setdefault(layer, {})[kind] = {
                    name: t[0].float().cpu().numpy() for name, t in tensors.items()
                }
        self._internals = held
