"""The precision what-if's int8 and int4 weights for real (`models.quantized`): held as codes and scales
with no float copy, multiplied by this CPU's integer kernels, rounded exactly as the simulated variant
rounds them (the embedding's rows bitwise), its products within the bfloat16 rounding of the kernels'
inputs; the result says which ran. The simulated variant stays what it was (the error lesson's).
"""

from __future__ import annotations

import pytest
import torch
import transformers

import playground
from playground import variants
from playground.generation import GenerationConfig, generate_all
from playground.models import quantized
from playground.models.layers import Linear
from playground.models.quantize import matrices, out_in
from playground.models.quantized import QuantizedEmbedding, QuantizedHead, QuantizedLinear
from playground.variants import variant
from tests.hf_tiny import llama_like, save_decoder

transformers.logging.set_verbosity_error()
pytestmark = pytest.mark.skipif(not all(quantized.available(p, torch.device("cpu")) for p in ("int8", "int4")),
                                reason="this torch has no CPU int8 / int4 weight kernels")
SHAPE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, vocab_size=112)


@pytest.fixture(scope="module", params=["tied", "untied"])
def lm(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    save_decoder(directory, "llama", llama_like(**SHAPE, tie_word_embeddings=request.param == "tied"), init_std=0.1)
    return playground.load_model(directory)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_real_integer_weights_hold_codes_only_and_round_as_simulated(lm, precision, one_thread):
    variants.VARIANTS.clear()
    real, simulated = variant(lm, precision, real=True), variant(lm, precision, real=False)
    assert not real.simulated and real.compute == precision and simulated.simulated
    assert "real" in real.to_dict()["description"] and "simulated" in simulated.to_dict()["description"]
    model = real.lm.model
    assert not any(isinstance(m, Linear) for m in model.modules())  # every matrix replaced by its codes
    assert isinstance(model.embed, QuantizedEmbedding) and isinstance(model.tied_head, QuantizedHead)
    held = list(model.parameters()) + list(model.buffers())
    floats = [t for t in held if t.is_floating_point() and t.dim() == 2]
    assert all(t.dtype != torch.float32 or t.shape[0] * t.shape[1] < 64 * 32 for t in floats), \
        [t.shape for t in floats]  # no float32 matrix left (a bf16 scale table at most)
    V, d = lm.config.vocab_size, lm.config.d_model
    scale = torch.empty((), dtype=quantized.activation_dtype()).element_size()  # the kernels' scales

    def product_bytes(out: int, n: int) -> int:  # codes, then scales: per channel, or (scale, zero) per group
        return out * n + out * scale if precision == "int8" else out * n // 2 + (n // 32) * out * 2 * scale

    expected = sum(product_bytes(*out_in(m, t).shape) for m, t in matrices(lm.model).values() if t)
    expected += V * d + (V * 4 if precision == "int8" else V * (d // 32) * 4)  # the embedding's codes, f32 scales
    if precision == "int4" and model.lm_head is None:
        expected += product_bytes(V, d)  # a tied int4 head packs its own copy (an int8 one shares the codes)
    assert real.added_bytes == expected < simulated.added_bytes / 2.5
    ids = torch.tensor([[5, 9, 23, 40, 7]])
    with torch.inference_mode():
        assert torch.equal(model.embed(ids), simulated.lm.model.embed(ids))  # rows dequantized alike
        for name, (module, transposed) in matrices(simulated.lm.model).items():
            if not transposed:
                continue
            w = out_in(module, transposed).float()  # the simulated rounding of this matrix
            got = model.get_submodule(name)
            assert isinstance(got, QuantizedLinear)
            x = torch.randn(3, w.shape[1])
            exact = x @ w.t()
            # bf16 inputs and scales to the kernel, float32 sums: within 2^-7 of Σ|x w| (plus the output rounding)
            bound = (x.abs() @ w.abs().t()) * 2.0**-7 + 1e-6
            bias = 0 if got.bias is None else got.bias
            assert bool(((got(x) - bias - exact).abs() <= bound).all()), name
        a, b = real.lm.logits(ids), simulated.lm.logits(ids)
        assert (a - b).abs().max() < 0.05 * b.abs().max()


def test_a_run_says_which_ran(lm, one_thread, monkeypatch):
    cfg = GenerationConfig(max_new_tokens=6, weight_precision="int8")
    monkeypatch.setattr(quantized, "FASTER_ON_CPU", ())
    variants.VARIANTS.clear()
    assert generate_all(lm, [5, 9, 23], cfg).precision["simulated"] is True  # the default here: simulated
    monkeypatch.setattr(quantized, "FASTER_ON_CPU", ("int8",))
    variants.VARIANTS.clear()
    run = generate_all(lm, [5, 9, 23], cfg)
    assert run.precision["simulated"] is False and "real" in run.precision["description"]
    assert len(run.token_ids) == 6
    variants.VARIANTS.clear()


def test_a_shape_the_int4_kernel_cannot_take_stays_simulated(tmp_path, one_thread):
    save_decoder(tmp_path, "llama", llama_like(**{**SHAPE, "vocab_size": 97}), init_std=0.1)  # 97 % 16 != 0
    lm = playground.load_model(tmp_path)
    assert not variants.uses_native(lm, "int4", real=True) and variants.uses_native(lm, "int8", real=True)
    assert variant(lm, "int4", real=True).simulated
