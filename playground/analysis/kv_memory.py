"""The KV-cache memory formula and a what-if calculator around it.

    KV mem (bytes) = 2 · N · B · h_kv · T · d_h · s

2 for K and V; N layers, B sequences, h_kv key/value heads (MHA: every query head; GQA: groups;
MQA: 1), T cached tokens, d_h the head size, s bytes per element (fp32 4, fp16/bf16 2, fp8 1,
int4 0.5). The classic worked examples are in decimal gigabytes (1 GB = 10⁹ bytes):
  LLaMA 3 8B as MHA: N=32, h=32, d_h=128, B=1, T=8192, s=2 → 4.3 GB;
  LLaMA 3 70B, GQA-8: N=80, h_kv=8, d_h=128, B=1, T=8192, s=2 → 2.7 GB.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from playground.loaded import LoadedModel

DTYPE_BYTES: dict[str, float] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int4": 0.5}
TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
ATTENTION_KINDS = ("MHA", "GQA", "MQA")
MAX_TOKENS = 131_072  # 128k, the longest context the calculator offers
MAX_BATCH = 1024
GB = 10**9  # the worked examples' unit
GIB = 2**30

WORKED_EXAMPLES: dict[str, dict[str, Any]] = {
    "LLaMA 3 8B as MHA, 8k tokens": dict(layers=32, query_heads=32, kv_heads=32, head_dim=128, tokens=8192, batch=1,
                                         dtype="fp16", expected_gb=4.3),
    "LLaMA 3 70B, GQA-8, 8k tokens": dict(layers=80, query_heads=64, kv_heads=8, head_dim=128, tokens=8192, batch=1,
                                            dtype="fp16", expected_gb=2.7),
}


def kv_memory(layers: int, batch: int, kv_heads: int, tokens: int, head_dim: int, bytes_per_element: float) -> int:
    """2 · N · B · h_kv · T · d_h · s bytes, exactly (int4's s = 0.5 is exact too: the count is even)."""
    for name, value in (("layers", layers), ("batch", batch), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    if not isinstance(tokens, (int, np.integer)) or isinstance(tokens, bool) or tokens < 0:
        raise ValueError(f"tokens must be a whole number >= 0, got {tokens!r}")
    s = Fraction(bytes_per_element)
    if s <= 0:
        raise ValueError(f"bytes_per_element must be positive, got {bytes_per_element!r}")
    total = 2 * int(layers) * int(batch) * int(kv_heads) * int(tokens) * int(head_dim) * s
    return int(total) if total.denominator == 1 else int(-(-total.numerator // total.denominator))


def model_preset(lm: LoadedModel) -> dict[str, Any]:
    """The loaded model's own numbers (its dtype, its context) as a calculator preset."""
    c = lm.config
    dtype = TORCH_DTYPES.get(str(lm.dtype).removeprefix("torch."), "fp32")
    return dict(layers=c.n_layers, query_heads=c.n_heads, kv_heads=c.n_kv_heads, head_dim=c.head_dim,
                tokens=c.max_positions, batch=1, dtype=dtype, expected_gb=None)


def presets(lm: LoadedModel | None = None) -> dict[str, dict[str, Any]]:
    """Name -> preset: the loaded model first (when given), then the two worked examples."""
    out: dict[str, dict[str, Any]] = {}
    if lm is not None:
        out[f"this model ({lm.config.family}, {lm.parameter_count / 1e6:.1f}M parameters)"] = model_preset(lm)
    out.update(WORKED_EXAMPLES)
    return out


def kv_heads_for(attention: str, query_heads: int, gqa_kv_heads: int) -> int:
    """h_kv for MHA (every query head), GQA (the given group count) or MQA (one)."""
    if attention == "MHA":
        return query_heads
    if attention == "MQA":
        return 1
    if attention != "GQA":
        raise ValueError(f"attention {attention!r}: use one of {', '.join(ATTENTION_KINDS)}")
    if gqa_kv_heads < 1 or query_heads % gqa_kv_heads:
        raise ValueError(f"GQA needs a KV-head count that divides the {query_heads} query heads, got {gqa_kv_heads}")
    return gqa_kv_heads


def kv_what_if(
    preset: dict[str, Any],
    *,
    attention: str | None = None,
    kv_heads: int | None = None,
    dtype: str | None = None,
    batch: int | None = None,
    tokens: int | None = None,
    live: dict[str, Any] | None = None,
    points: int = 64,
) -> dict[str, Any]:
    """The calculator's numbers: the preset with any knob changed, and curves over T up to 128k.

    attention: "MHA" / "GQA" / "MQA" (default: as the preset); kv_heads: GQA's KV-head count;
    dtype: fp32, fp16, bf16, fp8, int4; batch 1..1024; tokens 0..131072.
    live: a run's KV-cache stats dict (`event.cache`), marked on the chart with its real bytes.

    Returns bytes (int), gb (10⁹), gib (2³⁰), the settings used (layers, batch, kv_heads,
    query_heads, tokens, head_dim, dtype, bytes_per_element, attention), variants {MHA, GQA, MQA:
    bytes at these settings}, gqa_kv_heads, curve {tokens (points,), MHA / GQA / MQA bytes (points,)}, live
    ({tokens, bytes, formula_bytes} or None), expected_gb (the worked example's rounded number, or None).
    """
    q = int(preset["query_heads"])
    preset_kind = "MHA" if preset["kv_heads"] == q else ("MQA" if preset["kv_heads"] == 1 else "GQA")
    attention = attention or preset_kind
    gqa = int(kv_heads if kv_heads is not None else (preset["kv_heads"] if preset_kind == "GQA" else max(1, q // 4)))
    if kv_heads is None and q % gqa:  # the default group count: the nearest divisor of the query heads
        gqa = next(g for g in range(gqa, 0, -1) if q % g == 0)
    gqa = kv_heads_for("GQA", q, gqa)  # validated whichever kind is drawn: the GQA curve uses it
    h_kv = kv_heads_for(attention, q, gqa)
    dtype = dtype or preset["dtype"]
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    s = DTYPE_BYTES[dtype]
    B = int(batch if batch is not None else preset["batch"])
    T = int(tokens if tokens is not None else preset["tokens"])
    if not 1 <= B <= MAX_BATCH or not 0 <= T <= MAX_TOKENS:
        raise ValueError(f"batch must be 1..{MAX_BATCH} and tokens 0..{MAX_TOKENS}")
    N, d = int(preset["layers"]), int(preset["head_dim"])
    total = kv_memory(N, B, h_kv, T, d, s)
    grid = np.unique(np.round(np.geomspace(1, MAX_TOKENS, points)).astype(np.int64))
    heads = {"MHA": q, "GQA": gqa, "MQA": 1}
    curve = {"tokens": grid}
    for k, hk in heads.items():
        curve[k] = np.array([kv_memory(N, B, hk, int(t), d, s) for t in grid])
    live_mark = None
    if live:
        formula = kv_memory(int(live["layers"]), int(live["batch"]), int(live["kv_heads"]), int(live["tokens"]),
                            int(live["head_dim"]), int(live["element_size"]))
        live_mark = {"tokens": int(live["tokens"]), "bytes": int(live["bytes"]), "formula_bytes": formula}
    return {
        "bytes": total, "gb": total / GB, "gib": total / GIB, "layers": N, "batch": B, "kv_heads": h_kv,
        "query_heads": q, "gqa_kv_heads": gqa, "tokens": T, "head_dim": d, "dtype": dtype, "bytes_per_element": s,
        "attention": attention, "variants": {k: kv_memory(N, B, hk, T, d, s) for k, hk in heads.items()},
        "curve": curve, "live": live_mark, "expected_gb": preset.get("expected_gb"),
    }
