"""`torch.export.export` takes the captured decode step of every decoder family at every row bucket.

The path ZeroGPU supports (ahead-of-time: `spaces.aoti_capture` -> `torch.export.export` ->
`spaces.aoti_compile`) starts here: an export fails loudly on a graph break or a data-dependent shape.
Each step carries everything a shape can hold (sampling rows beside greedy ones, candidates, a layer's
attention row, the residual stream, an ablated head and a steered block); its rows start from prompts of
different lengths (sliding windows wrap in some). The exported program, run from the same state, tells
exactly what the module tells and leaves the same buffers (cache rows, positions, tokens, seen ids).
"""

from __future__ import annotations

import pytest
import torch

from playground.generation import sampler
from playground.generation.captured import ROW_BUCKETS, DecodeStep, StepShape
from playground.interventions import Ablate, Steer
from playground.models.static import Capture, edit_keys
from tests.library.test_captured import FAMILIES, load


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            made[name] = load(tmp_path_factory, name)
        return made[name]

    return get


def _step(lm, rows: int) -> tuple[DecodeStep, torch.Tensor]:
    c, V = lm.config, lm.config.vocab_size
    edits = (Ablate(0, head=c.n_heads - 1), Steer(c.n_layers - 1, vector=[0.1] * c.d_model, scale=1.0))
    shape = StepShape(rows=rows, length=64, sampling=True, candidates=4, capture=Capture((c.n_layers - 1,), True),
                      edits=edit_keys(edits))
    step = DecodeStep(lm.model, shape).eval()
    gen = torch.Generator().manual_seed(rows)
    noise = torch.ones(rows, V)
    for r in range(rows):
        prompt = torch.randint(3, V - 3, (3 + r % 7,), generator=gen).tolist()
        sample = r % 2 == 1
        knobs = sampler.RowKnobs(sample=sample, temperature=0.9 if sample else None, top_k=10 if sample else None,
                                 penalty=1.1)
        row, cache = step.start(prompt, 60, knobs, edits if r % 3 == 0 else ())
        logits = lm.model(torch.tensor([prompt]), cache, last_only=True)[:, -1].float()
        if sample:
            noise[row].exponential_(1, generator=gen)
        step.first(row, logits, noise[row : row + 1])
    for r in range(1, rows, 2):
        noise[r].exponential_(1, generator=gen)
    return step, noise


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_exports_its_step_at_every_row_bucket(models, one_thread, name):
    lm = models(name)
    for rows in ROW_BUCKETS:
        with torch.no_grad():
            step, noise = _step(lm, rows)
            before = {k: v.clone() for k, v in step.named_buffers()}
            program = torch.export.export(step, (noise,))
            want = step(noise)
            after = {k: v.clone() for k, v in step.named_buffers()}
            for k, v in step.named_buffers():
                v.copy_(before[k])
            exported = program.module()
            got = exported(noise)
            assert got.shape == (rows, step.layout.width)
            assert torch.equal(got, want), (name, rows)
            buffers = dict(exported.named_buffers())
            assert all(torch.equal(buffers[k], after[k]) for k in after if k in buffers), (name, rows)
            assert {"tokens", "positions", "seen"} <= buffers.keys()
