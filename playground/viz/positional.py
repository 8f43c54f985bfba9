"""Positional-encoding figures: sinusoidal tables, RoPE frequencies and rotations, learned tables,
T5-style relative biases.

The caller computes the numbers (e.g. `playground.models.positional.sinusoidal_table(...).numpy()`
or `rope_inverse_frequencies(config).numpy()`); these functions only draw them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.viz._common import PROB_SCALE, SIGNED_SCALE, as_array, finish
from playground.viz._language import texts

_T = texts("positional")  # this module's words, from playground/locales/

_LINE_COLOURS = plotly.colors.qualitative.Plotly


def _colour(i: int) -> str:
    return _LINE_COLOURS[i % len(_LINE_COLOURS)]


def default_dims(dim: int) -> list[int]:
    """Even (sine) dimensions spread over the table, fast to slow: 0, D/8, D/4, D/2 (rounded even)."""
    picks = {0} | {2 * ((dim * f) // 2) for f in (1 / 8, 1 / 4, 1 / 2)}
    return sorted(int(d) for d in picks if d < dim)


def _check_dims(dims: Sequence[int], dim: int) -> list[int]:
    dims = [int(d) for d in dims]
    bad = [d for d in dims if not 0 <= d < dim]
    if bad:
        raise ValueError(f"dims {bad} are outside the table's {dim} dimensions (valid: 0..{dim - 1})")
    return dims


def _signed_heatmap(z: np.ndarray, **kwargs) -> go.Heatmap:
    # Symmetric range so 0 is the white middle of the diverging scale.
    bound = float(np.abs(z).max()) or 1.0
    return go.Heatmap(z=z, colorscale=SIGNED_SCALE, zmid=0.0, zmin=-bound, zmax=bound, **kwargs)


# --- sinusoidal ---------------------------------------------------------------------------------


def pe_heatmap(table: np.ndarray, title: str | None = None, lang: str = "en") -> go.Figure:
    """The (P, D) table: positions down, dimensions across; early dims oscillate fastest."""
    t = as_array(table, 2, "table (P, D)")
    fig = go.Figure(
        _signed_heatmap(t, colorbar=dict(title=dict(text=_T(lang)["value"])), hovertemplate=_T(lang)["cell_hover"])
    )
    fig.update_xaxes(title_text=_T(lang)["dimension"], showgrid=False)
    fig.update_yaxes(title_text=_T(lang)["position"], autorange="reversed", showgrid=False)
    return finish(fig, _T(lang)["sinusoidal_title"] if title is None else title, height=460)


def pe_waves(table: np.ndarray, dims: Sequence[int] | None = None, title: str | None = None,
             lang: str = "en") -> go.Figure:
    """Selected dimensions as lines over positions: low dims = short wavelength, high = long."""
    t = as_array(table, 2, "table (P, D)")
    dims = _check_dims(default_dims(t.shape[1]) if dims is None else dims, t.shape[1])
    fig = go.Figure()
    positions = np.arange(t.shape[0])
    for n, d in enumerate(dims):
        fig.add_trace(
            go.Scatter(x=positions, y=t[:, d], mode="lines", name=_T(lang)["dim"].format(d=d),
                       line=dict(color=_colour(n)),
                       hovertemplate=_T(lang)["wave_hover"].format(d=d))
        )
    fig.update_xaxes(title_text=_T(lang)["position"])
    fig.update_yaxes(title_text=_T(lang)["pe_value"])
    return finish(fig, _T(lang)["waves_title"] if title is None else title, height=360)


def pe_similarity(table: np.ndarray, title: str | None = None, lang: str = "en") -> go.Figure:
    """P × P matrix of PE(i)·PE(j): it depends mostly on |i - j|, so the bright band is the diagonal."""
    t = as_array(table, 2, "table (P, D)")
    sim = t @ t.T
    fig = go.Figure(
        go.Heatmap(z=sim, colorscale=PROB_SCALE, colorbar=dict(title=dict(text="PE(i)·PE(j)")),
                   hovertemplate=_T(lang)["similarity_hover"])
    )
    # Square cells: shrink the plot area (constrain="domain") rather than pad the axis with empty range.
    fig.update_xaxes(title_text=_T(lang)["position_j"], showgrid=False, constrain="domain")
    fig.update_yaxes(title_text=_T(lang)["position_i"], autorange="reversed", showgrid=False, scaleanchor="x",
                     constrain="domain")
    return finish(fig, _T(lang)["similarity_title"] if title is None else title, height=520)


def pe_base_comparison(
    table_a: np.ndarray,
    table_b: np.ndarray,
    label_a: str | None = None,
    label_b: str | None = None,
    dims: Sequence[int] | None = None,
    title: str | None = None, lang: str = "en",
) -> go.Figure:
    """The same dimensions under two bases, stacked: a smaller base gives shorter wavelengths,
    so high dimensions that barely move at base 10000 oscillate visibly at base 1000. The labels
    default to "base 10000" and "base 1000"."""
    label_a = _T(lang)["base"].format(b=10000) if label_a is None else label_a
    label_b = _T(lang)["base"].format(b=1000) if label_b is None else label_b
    a = as_array(table_a, 2, "table_a (P, D)")
    b = as_array(table_b, 2, "table_b (P, D)")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"both tables need the same dimension count, got {a.shape[1]} and {b.shape[1]}")
    dims = _check_dims(default_dims(a.shape[1]) if dims is None else dims, a.shape[1])
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, shared_yaxes=True, subplot_titles=(label_a, label_b),
                        vertical_spacing=0.12)
    for row, (t, label) in enumerate(((a, label_a), (b, label_b)), start=1):
        for n, d in enumerate(dims):
            fig.add_trace(
                go.Scatter(x=np.arange(t.shape[0]), y=t[:, d], mode="lines", name=_T(lang)["dim"].format(d=d),
                           legendgroup=f"dim {d}", showlegend=row == 1, line=dict(color=_colour(n)),
                           hovertemplate=_T(lang)["base_hover"].format(label=label, d=d)),
                row=row,
                col=1,
            )
        fig.update_yaxes(title_text=_T(lang)["pe_value"], row=row, col=1)
    fig.update_xaxes(title_text=_T(lang)["position"], row=2, col=1)
    return finish(fig, _T(lang)["base_title"] if title is None else title, height=520)


# --- RoPE ---------------------------------------------------------------------------------------


def rope_frequencies(
    inv_freq: np.ndarray, context_length: int | None = None, title: str | None = None, lang: str = "en"
) -> go.Figure:
    """theta_i (radians per token) and wavelength 2π/theta_i (tokens) per pair, log scale.

    context_length, if given, is drawn on the wavelength plot: pairs above it never complete
    a turn within the context, so they act as slow, almost absolute position signals.
    """
    f = as_array(inv_freq, 1, "inv_freq (d/2,)")
    if np.any(f <= 0):
        raise ValueError("inv_freq must be positive (theta_i = base^(-2i/d))")
    pairs = np.arange(f.shape[0])
    wavelength = 2 * np.pi / f
    fig = make_subplots(rows=1, cols=2, subplot_titles=(_T(lang)["frequency_panel"], _T(lang)["wavelength_panel"]),
                        horizontal_spacing=0.12)
    fig.add_trace(go.Scatter(x=pairs, y=f, mode="lines+markers", name=_T(lang)["frequency"],
                             hovertemplate=_T(lang)["frequency_hover"]), row=1, col=1)
    fig.add_trace(go.Scatter(x=pairs, y=wavelength, mode="lines+markers", name=_T(lang)["wavelength"],
                             hovertemplate=_T(lang)["wavelength_hover"]), row=1, col=2)
    if context_length is not None:
        fig.add_hline(y=context_length, line=dict(dash="dash", color="grey"), row=1, col=2)
        # Annotations on a log axis take log10 coordinates, so place the label by hand.
        fig.add_annotation(x=0, y=float(np.log10(context_length)), xref="x2", yref="y2", xanchor="left",
                           yanchor="bottom", showarrow=False, text=_T(lang)["context"].format(n=context_length),
                           font=dict(color="grey"))
    fig.update_yaxes(type="log", title_text=_T(lang)["rad_axis"], row=1, col=1)
    fig.update_yaxes(type="log", title_text=_T(lang)["tokens"], row=1, col=2)
    fig.update_xaxes(title_text=_T(lang)["pair_axis"])
    return finish(fig, _T(lang)["frequencies_title"] if title is None else title, height=380, showlegend=False)


def rope_rotation(inv_freq: np.ndarray, pair: int, positions: int, title: str | None = None,
                  lang: str = "en") -> go.Figure:
    """Where RoPE turns a unit vector of one dimension pair at positions 0..positions-1.

    Point p sits at angle p·theta_pair on the unit circle, coloured by position: fast pairs spin
    around many times, slow pairs barely move.
    """
    f = as_array(inv_freq, 1, "inv_freq (d/2,)")
    if not 0 <= pair < f.shape[0]:
        raise ValueError(f"pair {pair} is out of range; this head has {f.shape[0]} pairs (0..{f.shape[0] - 1})")
    if positions < 1:
        raise ValueError(f"positions must be at least 1, got {positions}")
    theta = float(f[pair])
    pos = np.arange(positions)
    angle = pos * theta
    circle = np.linspace(0, 2 * np.pi, 181)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=np.cos(circle), y=np.sin(circle), mode="lines", name=_T(lang)["unit_circle"],
                             line=dict(color="lightgrey"), hoverinfo="skip"))
    fig.add_trace(
        go.Scatter(
            x=np.cos(angle), y=np.sin(angle), mode="markers", name=_T(lang)["positions"],
            customdata=np.column_stack([pos, np.degrees(angle) % 360]),
            marker=dict(color=pos, colorscale=PROB_SCALE, size=8, colorbar=dict(title=dict(text=_T(lang)["position"]))),
            hovertemplate=_T(lang)["rotation_hover"],
        )
    )
    fig.update_xaxes(title_text="x₂ᵢ (cos)", range=[-1.2, 1.2], zeroline=True)
    fig.update_yaxes(title_text="x₂ᵢ₊₁ (sin)", range=[-1.2, 1.2], zeroline=True, scaleanchor="x", scaleratio=1)
    if title is None:
        title = _T(lang)["rotation_title"].format(pair=pair, theta=theta, wavelength=2 * np.pi / theta)
    return finish(fig, title, height=460, showlegend=False)


def rope_relative_scores(
    scores: np.ndarray, distances: np.ndarray, title: str | None = None, lang: str = "en"
) -> go.Figure:
    """How a fixed q·k score changes with relative distance under RoPE (long-term decay)."""
    s = as_array(scores, 1, "scores (R,)")
    d = as_array(distances, 1, "distances (R,)")
    if s.shape != d.shape:
        raise ValueError(f"scores {s.shape} and distances {d.shape} must have the same length")
    fig = go.Figure(go.Scatter(x=d, y=s, mode="lines", name=_T(lang)["score"],
                               hovertemplate=_T(lang)["distance_hover"]))
    fig.add_hline(y=0, line=dict(color="grey", width=1))
    fig.update_xaxes(title_text=_T(lang)["relative_distance"])
    fig.update_yaxes(title_text=_T(lang)["qk_score"])
    return finish(fig, _T(lang)["scores_title"] if title is None else title, height=360, showlegend=False)


# --- learned absolute ---------------------------------------------------------------------------


def learned_table_heatmap(table: np.ndarray, title: str | None = None, lang: str = "en") -> go.Figure:
    """The learned (P, D) table on a diverging scale centred at 0."""
    t = as_array(table, 2, "table (P, D)")
    fig = go.Figure(_signed_heatmap(t, colorbar=dict(title=dict(text=_T(lang)["value"])),
                                    hovertemplate=_T(lang)["cell_hover"]))
    fig.update_xaxes(title_text=_T(lang)["dimension"], showgrid=False)
    fig.update_yaxes(title_text=_T(lang)["position"], autorange="reversed", showgrid=False)
    return finish(fig, _T(lang)["learned_title"] if title is None else title, height=460)


def cosine_similarity(table: np.ndarray) -> np.ndarray:
    """P × P cosine similarity between rows; zero rows give 0 rather than NaN."""
    t = as_array(table, 2, "table (P, D)")
    norm = np.linalg.norm(t, axis=1, keepdims=True)
    unit = t / np.where(norm > 0, norm, 1.0)
    return unit @ unit.T


def cosine_similarity_matrix(table: np.ndarray, title: str | None = None, lang: str = "en") -> go.Figure:
    """Which positions the model embeds alike; for GPT-2 a smooth band around the diagonal."""
    sim = cosine_similarity(table)
    fig = go.Figure(go.Heatmap(z=sim, colorscale=SIGNED_SCALE, zmid=0.0, zmin=-1.0, zmax=1.0,
                               colorbar=dict(title=dict(text=_T(lang)["cosine"])), hovertemplate=_T(lang)["cosine_hover"]))
    # Square cells: shrink the plot area (constrain="domain") rather than pad the axis with empty range.
    fig.update_xaxes(title_text=_T(lang)["position_j"], showgrid=False, constrain="domain")
    fig.update_yaxes(title_text=_T(lang)["position_i"], autorange="reversed", showgrid=False, scaleanchor="x",
                     constrain="domain")
    return finish(fig, _T(lang)["cosine_title"] if title is None else title, height=520)


# --- T5 relative bias ---------------------------------------------------------------------------


def relative_bias_plot(bias: np.ndarray, distances: np.ndarray, title: str | None = None,
                       lang: str = "en") -> go.Figure:
    """T5-style learned bias added to attention logits, one line per head. bias: (h, R)"""
    b = as_array(bias, 2, "bias (h, R)")
    d = as_array(distances, 1, "distances (R,)")
    if b.shape[1] != d.shape[0]:
        raise ValueError(f"bias has {b.shape[1]} distances per head but distances has {d.shape[0]}")
    fig = go.Figure()
    for i in range(b.shape[0]):
        fig.add_trace(go.Scatter(x=d, y=b[i], mode="lines", name=_T(lang)["head"].format(i=i),
                                 line=dict(color=_colour(i)),
                                 hovertemplate=_T(lang)["bias_hover"].format(i=i)))
    fig.add_hline(y=0, line=dict(color="grey", width=1))
    fig.update_xaxes(title_text=_T(lang)["key_minus_query"])
    fig.update_yaxes(title_text=_T(lang)["bias_axis"])
    return finish(fig, _T(lang)["bias_title"] if title is None else title, height=380)


def rope_score_curve(inv_freq: np.ndarray, distances: np.ndarray) -> np.ndarray:
    """q·k under RoPE for q = k = all ones, as a function of relative distance m − n.

    Each dimension pair contributes 2·cos(distance·θᵢ), so the curve starts at d (= 2·pairs) and
    decays, with ripples, as distance grows: the long-term decay RoFormer describes. (R,)
    """
    f = as_array(inv_freq, 1, "inv_freq (d/2,)")
    d = as_array(distances, 1, "distances (R,)")
    return 2.0 * np.cos(d[:, None] * f[None, :]).sum(axis=1)
