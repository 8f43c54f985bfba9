"""A run's tokens as one shared chain, so that every step's event costs O(1) memory, not a copy of the run so far.

    start = Tokens.start(lambda ids: tokenizer.decode(ids))
    one = start.extend(42); two = one.extend(7)        # two shares one's node: no list is copied
    two.ids() == [42, 7]; len(two) == 2; two.text       # the text is decoded when asked, never stored per step

A node holds one token, the node before it and the running beam that chose it (beam search; None otherwise). Greedy
and sampled runs are one chain; a beam search's hypotheses are branches of one tree, so their shared beginnings are
kept once. The ids of a node are rebuilt by walking back to the start (O(n), when asked). Pickled (a ZeroGPU worker
yields events through a pipe) a node travels as flat lists with its own text, and is a chain again on arrival.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

Decode = Callable[[list[int]], str]
STOP_MARGIN = 8  # characters before a stop string's start that a tail decodes beyond it (`text_holds`)


class Tokens:
    """An immutable token sequence: the last node of a chain that starts at a `start()` node (no token)."""

    __slots__ = ("parent", "token_id", "source", "length")  # a run keeps one node per token (per beam): no more

    def __init__(self, parent: Tokens | None, token_id: int, source: int | None = None) -> None:
        self.parent = parent
        self.token_id = token_id
        self.source = source
        self.length = 0 if parent is None else parent.length + 1

    @classmethod
    def start(cls, decode: Decode | None = None) -> Tokens:
        """The empty sequence every node of a run extends; `decode(ids)` gives a sequence's text."""
        return _Start(decode)

    @classmethod
    def of(cls, ids: Sequence[int], sources: Sequence[int | None] = (), text: str | None = None,
           decode: Decode | None = None) -> Tokens:
        """A chain of `ids` (each with its entry of `sources`, if given); `text`: the whole sequence's text, when it
        is known and there is no `decode` (a pickled node)."""
        node = cls.start(decode)
        root = node
        for i, token_id in enumerate(ids):
            node = node.extend(int(token_id), sources[i] if i < len(sources) else None)
        if text is not None:
            root.memo = (node, text)
        return node

    def extend(self, token_id: int, source: int | None = None) -> Tokens:
        return Tokens(self, int(token_id), source)

    def _nodes(self) -> tuple[list[Tokens], _Start]:
        """(this sequence's nodes, first to last; the start node)."""
        nodes: list[Tokens] = []
        node = self
        while node.parent is not None:
            nodes.append(node)
            node = node.parent
        nodes.reverse()
        assert isinstance(node, _Start), "a chain begins at Tokens.start()"
        return nodes, node

    def ids(self) -> list[int]:
        return [n.token_id for n in self._nodes()[0]]

    def sources(self) -> list[int]:
        """The running beam that chose each token (beam search's `beam_path`)."""
        return [n.source for n in self._nodes()[0]]

    @property
    def text(self) -> str:
        """The sequence's text, decoded now (the start node keeps the last one asked for)."""
        nodes, root = self._nodes()
        if root.memo is not None and root.memo[0] is self:
            return root.memo[1]
        text = root.decode([n.token_id for n in nodes]) if root.decode is not None else ""
        root.memo = (self, text)
        return text

    def text_holds(self, needles: Sequence[str]) -> bool:
        """Whether one of `needles` is in this sequence's text, asked at every step of a run that ends on the first
        one (stop strings): only a tail of the chain is decoded (16 tokens, doubled until the text before the last
        token holds the longest needle and a margin), so a run of n tokens costs O(n) decoding, not O(n^2). Exact
        against the whole text for such a run: a needle found now was not there a step before, so it ends in the
        last token's text (or the character the last token completed) and starts within the longest needle and
        the margin before it; a tail decodes like the whole but for its first characters (a stripped leading
        space, a character whose first bytes lie before the tail)."""
        if not needles or self.parent is None:
            return False
        nodes, root = self._nodes()
        if root.decode is None:
            return False
        ids = [n.token_id for n in nodes]
        longest = max(len(n) for n in needles)
        size = 16
        while size < len(ids) and len(root.decode(ids[-size:-1])) < longest + STOP_MARGIN:
            size *= 2
        text = root.decode(ids[-size:])
        return any(n in text for n in needles)

    # --- a read-only sequence of ints -------------------------------------------------------------

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())

    def __getitem__(self, index: Any) -> Any:
        return self.ids()[index]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Tokens):
            return len(self) == len(other) and self.ids() == other.ids()
        if isinstance(other, (list, tuple)):
            return self.ids() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are not hashable either

    def __repr__(self) -> str:
        return f"Tokens({self.ids()})"

    def __reduce__(self) -> tuple[Any, ...]:
        nodes, _ = self._nodes()
        sources = [n.source for n in nodes]
        return Tokens.of, (self.ids(), sources if any(s is not None for s in sources) else [], self.text)


class _Start(Tokens):
    """The start node (no token): it alone holds the decoder and the text last decoded, for the node it was for."""

    __slots__ = ("decode", "memo")

    def __init__(self, decode: Decode | None = None) -> None:
        super().__init__(None, -1, None)
        self.decode = decode
        self.memo: tuple[Tokens, str] | None = None


def generated_start(lm: Any) -> Tokens:
    """The empty chain a run's generated tokens extend; their text skips special tokens (an event's `text`)."""
    # the tokenizer only: a run's chain outlives its pass, and `lm` in the shared batch is a stand-in holding the
    # request's ticket and, through its plan, the model (a finished run kept a model the catalog had let go alive)
    return Tokens.start(lm.text_of(skip_special_tokens=True))
