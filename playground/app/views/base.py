"""What every view of a run is: a name, what it needs, a pure `compute` and a `draw`, and its caption.

A View turns the visitor's run and selection into plain data (`compute`, model work: call it on the torch
thread) and that data into what the page shows (`draw`: figures, Markdown and the state of the view's own
controls, keyed by the page's component names as `Slot`s). The page has one generic renderer that turns
any view's slots into widget updates. No Gradio here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from playground.app.lessons import Inputs
from playground.app.run import Run

KEEP: Any = type("Keep", (), {"__repr__": lambda self: "KEEP"})()  # a slot's value left as the page has it


@dataclass(frozen=True)
class Slot:
    """One component's new state; fields left at their default stay as the page has them."""

    value: Any = KEEP
    visible: bool | None = None
    maximum: float | None = None
    choices: list[tuple[str, str]] | None = None

    @property
    def changes(self) -> dict[str, Any]:
        """The fields this slot sets (the renderer's update)."""
        out = {} if self.value is KEEP else {"value": self.value}
        out.update({k: v for k, v in (("visible", self.visible), ("maximum", self.maximum),
                                       ("choices", self.choices)) if v is not None})
        return out


def shown(value: Any) -> Slot:
    """A figure (or text) that is shown."""
    return Slot(value, visible=True)


HIDDEN = Slot(visible=False)
Drawn = dict[str, Slot]


@dataclass(frozen=True)
class Selection:
    """What the visitor picked for the open view: the step (None: the newest), then each view's controls."""

    step: int | None = None
    kind: str = "self"  # all heads: attention kind, large view, colour scale, layer, head, query row, sink
    view: str = "head"
    scale: str = "linear"
    layer: int = 0
    head: int = 0
    query: int | None = None  # None: the row of the selected step
    sink: bool = False
    inputs: Inputs = field(default_factory=Inputs)  # the lesson's controls
    pe_length: int = 64
    pe_base: float = 1000.0
    pe_pair: int = 0
    versus: bool = False  # lab: why this token and not the runner-up
    side: str = "shown"  # lab: "shown" (the run on screen) or "original" (the run an edited run forked from)

    @classmethod
    def from_controls(cls, values: Mapping[str, Any], step: int | None = None, *, query: bool = False) -> Selection:
        """The selection from the page's control values by component name (missing ones keep their default);
        `query`: the query row control counts (it was moved), else the row follows the step."""
        d = cls()

        def whole(name: str, default: int) -> int:
            try:
                return int(float(values.get(name, default) or 0))
            except (TypeError, ValueError):
                return default

        def text(name: str, default: str) -> str:
            value = values.get(name, default)
            return value if isinstance(value, str) else default

        try:
            base = float(values.get("pe_base") or d.pe_base)
        except (TypeError, ValueError):
            base = d.pe_base
        inputs = Inputs(whole("lesson_layer", 0), whole("lesson_head", 0), text("lesson_kind", "self"),
                        text("lesson_preset", ""), text("lesson_attention", ""), text("lesson_dtype", ""),
                        whole("lesson_batch", 1) or 1, whole("lesson_tokens", 0))
        return cls(step=step, kind=text("att_kind", d.kind), view=text("att_view", d.view),
                   scale=text("att_scale", d.scale), layer=whole("att_layer", 0), head=whole("att_head", 0),
                   query=whole("att_query", 0) if query and values.get("att_query") is not None else None,
                   sink=bool(values.get("att_sink", False)), inputs=inputs,
                   pe_length=whole("pe_length", d.pe_length) or d.pe_length, pe_base=base,
                   pe_pair=whole("pe_pair", 0), versus=bool(values.get("lab_versus", False)),
                   side="original" if values.get("lab_run") == "original" else "shown")

    def at(self, step: int | None) -> Selection:
        return replace(self, step=step)


@dataclass(frozen=True)
class Context:
    """What a view computes from: the model (of the run when there is one, else the visitor's), the run on
    screen, the visitor's other runs (an edited run's original), their language and measurements."""

    lm: Any = None
    run: Run | None = None
    lang: str = "en"
    runs: tuple[Run, ...] = ()
    model: str | None = None  # the visitor's model name (the positional tab reads the model, not the run)
    sdpa: dict[str, Any] | None = None  # the visitor's SDPA measurement of this model, when taken
    key: str = "anonymous"  # the visitor (the owner of the model work)


@dataclass(frozen=True)
class Waiting:
    """A view that cannot be drawn yet, and the words that say why."""

    words: str


# What a view may need (`View.needs`): the selection parts it reads, and what must exist first.
NEEDS = frozenset({"model", "run", "finished", "step", "layer", "head", "query", "edits", "lesson", "controls"})


@dataclass(frozen=True)
class View:
    """One view of the run. `compute(ctx, selection)` -> data (plain: numbers, arrays, dicts; model work);
    `draw(data, lang)` -> slots; `caption(data, lang)` -> the view's Markdown (into `caption_slot`);
    `idle(lang, words)` -> slots while `needs` are not met (`words`: why)."""

    name: str
    tab: str  # the deep-views tab it is drawn in
    needs: frozenset[str]
    slots: tuple[str, ...]  # the page components `draw` may fill, the caption's first
    compute: Callable[[Context, Selection], Any]
    draw: Callable[[Any, str], Drawn]
    caption: Callable[[Any, str], str]
    idle: Callable[[str, str], Drawn]
    waits: str = "nothing_yet"  # the words while there is no run (or no model)
    busy: str = "nothing_yet"  # the words while the run streams (views that need it finished)

    def __post_init__(self) -> None:
        unknown = self.needs - NEEDS
        if unknown:
            raise ValueError(f"view {self.name!r} needs unknown parts {sorted(unknown)}; known: {sorted(NEEDS)}")

    @property
    def caption_slot(self) -> str:
        return self.slots[0]

    @property
    def follows_step(self) -> bool:
        return "step" in self.needs
