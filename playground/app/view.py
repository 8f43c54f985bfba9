"""What every view of a run is: a name, what it needs, a pure `compute` and a `draw`, and its caption.

A View turns the visitor's run and selection into plain data (`compute`, model work: call it on the torch
thread) and that data into what the page shows (`draw`: figures, Markdown and the state of the view's own
controls, keyed by the page's component names as `Slot`s). The page has one generic renderer that turns
any view's slots into widget updates. No Gradio here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

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
    """What the visitor picked for the open view: the step (None: the newest), then the open tab's controls its
    view reads, by widget name, each read as its widget declares (`playground.app.tab.Widget.read`; a view reads
    what it lacks as its own defaults: `playground.app.tab.read`)."""

    step: int | None = None
    values: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_controls(cls, values: Mapping[str, Any], step: int | None = None, *, moved: bool = False,
                      controls: Iterable[Any] = ()) -> Selection:
        """The selection from the page's control values by component name: `controls` are the open tab's widgets
        its view reads (a raw one only when the page sent it); `moved`: one of them was moved (a control that counts
        only then, the query row, else follows the step)."""
        return cls(step=step, values={w.name: w.read(values, moved) for w in controls
                                      if w.reads is not None or w.name in values})

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
    measured: Mapping[str, Any] = field(default_factory=dict)  # the visitor's jobs on this model, by action name
    key: str = "anonymous"  # the visitor (the owner of the model work)
    drafters: tuple[str, ...] = ()  # the visitor's loaded models that can draft for the run's (when a view needs them)
    live_layer: int = -1  # the layer the live attention panel shows (-1: the last)


@dataclass(frozen=True)
class Waiting:
    """A view that cannot be drawn yet, and the words that say why."""

    words: str


# What a view may need (`View.needs`): the selection parts it reads, and what must exist first.
NEEDS = frozenset({"model", "run", "finished", "step", "layer", "head", "query", "edits", "lesson", "controls",
                   "drafters"})


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
