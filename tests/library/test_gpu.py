"""On a CUDA GPU: parity with transformers, every analysis and lab edit, the server with several visitors.

Marked `gpu`: skipped wherever `torch.cuda.is_available()` is False (CI has no GPU; tests/conftest.py).
Needs torch, transformers and safetensors (no Gradio, no plotly: the GPU machine has neither); the server
test also needs greenlet (the batch's scheduler).
Run there with `python -m pytest tests/library/test_gpu.py tests/library/test_device_memory.py -m gpu -q`.
"""

from __future__ import annotations

import threading

import pytest
import torch

import playground
from playground.generation import GenerationConfig, generate_all
from playground.generation.plan import plan
from tests.device_cases import analysis_data, drop_timings, lab_data, load, same
from tests.hf_tiny import (
    bart_like,
    gemma3_like,
    gpt2_like,
    llama_like,
    m2m_like,
    neox_like,
    save_decoder,
    save_seq2seq,
    save_small_llama,
    t5_like,
)

pytestmark = pytest.mark.gpu
CUDA = "cuda"
DECODERS = {
    "llama-gqa": ("llama", llama_like(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True)),
    "gpt2": ("gpt2", gpt2_like()),
    "qwen2": ("qwen2", llama_like(num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen3": ("qwen3", llama_like(hidden_size=36, head_dim=10, num_attention_heads=6, num_key_value_heads=2)),
    "mistral-window": ("mistral", llama_like(num_attention_heads=4, num_key_value_heads=2, sliding_window=5)),
    "gemma3-sliding": ("gemma3_text", gemma3_like()),
    "gpt_neox-partial-rotary": ("gpt_neox", neox_like(hidden_size=36, rotary_pct=0.5)),
}
SEQ2SEQ = {"t5": ("t5", t5_like()), "bart": ("bart", bart_like()), "m2m_100": ("m2m_100", m2m_like())}
PROMPT = [5, 9, 23, 40, 7, 11, 3]


@pytest.fixture(scope="module", params=sorted(DECODERS) + sorted(SEQ2SEQ))
def family(request, tmp_path_factory):
    """(name, transformers' model on the GPU, the checkpoint folder)."""
    name = request.param
    directory = tmp_path_factory.mktemp(name)
    if name in DECODERS:
        family, kwargs = DECODERS[name]
        reference = save_decoder(directory, family, kwargs, init_std=0.1)
    else:
        family, kwargs = SEQ2SEQ[name]
        reference = save_seq2seq(directory, family, kwargs, init_std=0.1)
    return name, reference.to(CUDA).eval(), directory


def _ids(vocab: int, shape: tuple[int, int], seed: int) -> torch.Tensor:
    return torch.randint(3, vocab, shape, generator=torch.Generator().manual_seed(seed))


def test_float32_logits_match_transformers_on_the_gpu(family):
    name, reference, directory = family
    ours = playground.load_model(directory, device=CUDA)
    assert ours.device.type == "cuda" and ours.model.embed.weight.is_cuda
    ids = _ids(ours.config.vocab_size, (2, 13), 1).to(CUDA)
    with torch.no_grad():
        if ours.kind == "seq2seq":
            tgt = _ids(ours.config.vocab_size, (2, 6), 2).to(CUDA)
            expected, got = reference(input_ids=ids, decoder_input_ids=tgt).logits, ours.logits(ids, tgt)
        else:
            expected, got = reference(ids).logits, ours.logits(ids)
    assert got.is_cuda and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_greedy_and_beam_tokens_on_the_gpu_equal_the_cpus(family):
    _, _, directory = family
    gpu, cpu = playground.load_model(directory, device=CUDA), playground.load_model(directory)
    for cfg in (GenerationConfig(max_new_tokens=16), GenerationConfig(max_new_tokens=12, num_beams=4)):
        on_gpu, on_cpu = generate_all(gpu, PROMPT, cfg), generate_all(cpu, PROMPT, cfg)
        assert on_gpu.token_ids == on_cpu.token_ids
        assert on_gpu.cache["bytes"] == on_cpu.cache["bytes"]


def test_bfloat16_picks_float32s_top_token_where_float32_is_clear(family):
    """bf16 rounds every weight to 8 bits of mantissa: its top token must be float32's wherever float32's
    lead over its runner-up is clear, a fifth of the logits' spread (tiny T5's logits are ten times flatter)."""
    _, _, directory = family
    f32, bf16 = playground.load_model(directory, device=CUDA), playground.load_model(directory, device=CUDA,
                                                                                    dtype="bfloat16")
    ids = _ids(f32.config.vocab_size, (4, 16), 3).to(CUDA)
    with torch.no_grad():
        if f32.kind == "seq2seq":
            tgt = _ids(f32.config.vocab_size, (4, 8), 4).to(CUDA)
            exact, rounded = f32.logits(ids, tgt), bf16.logits(ids, tgt)
        else:
            exact, rounded = f32.logits(ids), bf16.logits(ids)
    assert bf16.model.embed.weight.dtype == torch.bfloat16
    top2 = exact.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 0.2 * exact.std()
    assert clear.sum() >= 8, "too few clear positions to compare"
    assert torch.equal(rounded.float().argmax(-1)[clear], exact.argmax(-1)[clear])
    for cfg in (GenerationConfig(max_new_tokens=8, capture_attention=True, capture_residual=True),
                GenerationConfig(max_new_tokens=8, num_beams=2)):
        result = generate_all(bf16, PROMPT, cfg)  # runs end to end, every capture, a cache of 2-byte elements
        assert result.token_ids and result.cache["element_size"] == 2


# --- every analysis and lab edit -----------------------------------------------------------------------------

ORDERINGS = ("order",)  # head rankings can swap where two drops tie within the GPU's rounding


def _comparable(data):
    if isinstance(data, dict):
        return {k: _comparable(v) for k, v in data.items() if k not in ORDERINGS}
    if isinstance(data, list):
        return [_comparable(v) for v in data]
    return data


@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_every_analysis_and_lab_edit_on_the_gpu_in_float32_matches_the_cpu(name):
    cpu, gpu = load(name), load(name, device=CUDA)
    for compute, tokens in ((analysis_data, "tokens"), (lab_data, "plain")):
        expected, got = drop_timings(compute(cpu)), drop_timings(compute(gpu))
        assert got[tokens] == expected[tokens]
        same(_comparable(got), _comparable(expected), f"{name} {compute.__name__}", rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["tiny-lm", "tiny-seq2seq"])
def test_every_analysis_and_lab_edit_runs_on_the_gpu_in_half_precision(name, dtype):
    gpu = load(name, dtype, device=CUDA)
    data = analysis_data(gpu)
    lab = lab_data(gpu)
    assert len(data["tokens"]) == 6 and len(lab["edited"]) == 6
    assert all(torch.isfinite(torch.as_tensor(lab["why plain"]["heads"])).flatten())


def test_the_sdpa_lesson_times_the_gpu_and_measures_its_memory():
    from playground.analysis import sdpa_vs_explicit

    lm = load("tiny-lm", device=CUDA)
    data = sdpa_vs_explicit(lm, (256, 1024), repeats=2)
    assert data["device"] == "cuda:0" and data["memory_method"] == "measured_cuda"
    small, large = data["rows"]
    assert large["explicit_peak_bytes"] >= large["score_bytes"]  # it holds the (h, T, T) scores
    assert large["sdpa_peak_bytes"] < large["explicit_peak_bytes"]
    assert large["max_abs_diff"] < 1e-4


# --- the server with several visitors ------------------------------------------------------------------------


@pytest.mark.parametrize("visitors", [1, 4, 8])
def test_visitors_on_the_gpu_server_each_get_their_solo_tokens(visitors, tmp_path):
    from playground.app.serving import Server  # the batch needs greenlet: carry it where it is missing

    directory = tmp_path / "llama"
    save_small_llama(directory)
    lm = playground.load_model(directory, device=CUDA)
    plans = [plan(lm, [5 + i, 9, 23, 40 + i], GenerationConfig(max_new_tokens=12 + i, num_beams=1 + (i % 3 == 2)))
             for i in range(visitors)]
    alone = [generate_all(lm, p.prompt_ids, p.cfg) for p in plans]
    server = Server(max_rows=8, call=lambda fn: fn())  # steps on the server's own driver thread: no Gradio
    got: dict[int, list] = {}

    def visit(i: int) -> None:
        got[i] = [e for e in server.events(plans[i], threading.Event()) if hasattr(e, "token_ids")]

    threads = [threading.Thread(target=visit, args=(i,)) for i in range(visitors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for i, solo in enumerate(alone):
        assert got[i][-1].token_ids == solo.token_ids, f"visitor {i}"
        if plans[i].cfg.num_beams == 1:
            probs = [e.prob for e in got[i]]
            assert probs == pytest.approx([s.prob for s in solo.path], rel=1e-4)
