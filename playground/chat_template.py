"""Chat templates from checkpoints, rendered in Jinja's sandbox with bounds on time, work and size.

A chat template is a program that came with a stranger's upload. transformers renders it in
`ImmutableSandboxedEnvironment`, which stops attribute tricks but not work: nested `range(100000)`
loops, `'x' * 10**9` or a string doubled in a loop take the server's memory and minutes. We render
with the same environment (trim_blocks, lstrip_blocks, loopcontrols, the `generation` tag, `tojson`,
`raise_exception`, `strftime_now`, transformers' `dict` and `namespace`), so real templates give
exactly transformers' text, plus bounds, each checked before the work it bounds:

- every loop iteration and every call (macros, methods, `loop()` recursion) is a *step*: at most
  `max_steps` per render, and a deadline of `seconds` checked at each step;
- `range()` has at most `max_range` items; `*`, `**`, `+`, `%` and `~` refuse results over
  `max_value_chars` characters (`max_items` items for lists, `max_int_bits` bits for integers);
  filters and string methods that can amplify (`center`, `indent`, `join`, `replace`, `format`,
  `ljust`...) are checked from their arguments;
- everything a render produces (outputs, concatenations, call and filter results) counts against
  `max_work_chars`, and the text written (in macros and `set` blocks too) against `max_output_chars`.

The bounds are added by rewriting the parsed template (loops, outputs and `~` go through guard
functions on the environment, which a template cannot shadow), so no template text is trusted to
cooperate. Any failure is one `ChatTemplateError` line saying what to do.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace
from jinja2.visitor import NodeTransformer

from playground.errors import ChatTemplateError

TURN_OFF = "turn chat off (or fix the checkpoint's chat template)"


@dataclass(frozen=True)
class TemplateLimits:
    """Bounds on one render. Real templates (Llama 3, Qwen, SmolLM, Mistral) use a few hundred steps."""

    max_template_chars: int = 100_000  # the largest real templates are ~20-30 KB
    max_output_chars: int = 1_000_000
    max_value_chars: int = 1_000_000  # any one string (or container, counted as it would print)
    max_work_chars: int = 8_000_000  # all values produced by one render together
    max_items: int = 100_000  # any one list made by `*` / `+`, and range()
    max_steps: int = 200_000  # loop iterations + calls
    max_int_bits: int = 4096
    seconds: float = 1.0


DEFAULT_LIMITS = TemplateLimits()
_GUARD: contextvars.ContextVar[_Guard | None] = contextvars.ContextVar("playground_chat_guard", default=None)
_LONG_NUMBER = re.compile(r"\d{7,}")  # a width or precision of a million or more characters
_STR_WIDTH_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs"}
# Filters that return numbers, single items or containers of references: their input is never printed.
_NON_PRINTING_FILTERS = {
    "length", "count", "first", "last", "default", "d", "attr", "map", "select", "reject", "selectattr",
    "rejectattr", "list", "unique", "sort", "reverse", "batch", "slice", "groupby", "dictsort", "items", "min",
    "max", "random", "abs", "int", "float", "round",
}


def _size(value: Any, limit: int) -> int:
    """About how many characters `value` prints as; stops counting once past `limit` (cheap either way)."""
    total, stack = 0, [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, (list, tuple, set, frozenset, dict)):
            total += 2 + 2 * len(v)
            if total <= limit:
                stack.extend(v.items() if isinstance(v, dict) else v)
        elif isinstance(v, bool) or v is None:
            total += 5
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 1
        else:
            total += 24
    return total


class _Guard:
    """The counters of one render (kept in a ContextVar: renders in several threads do not mix)."""

    def __init__(self, limits: TemplateLimits) -> None:
        self.limits = limits
        self.steps = self.work = self.output = 0
        self.deadline = time.monotonic() + limits.seconds

    def step(self) -> None:
        self.steps += 1
        if self.steps > self.limits.max_steps:
            raise ChatTemplateError(
                f"the chat template did more than {self.limits.max_steps:,} loop iterations and calls; {TURN_OFF}"
            )
        if time.monotonic() > self.deadline:
            raise ChatTemplateError(f"the chat template ran longer than {self.limits.seconds:g} s; {TURN_OFF}")

    def value(self, size: int, what: str) -> None:
        """Refuse a value of `size` characters before it is made; count it as work."""
        if size > self.limits.max_value_chars:
            raise ChatTemplateError(
                f"the chat template builds {what} of more than {self.limits.max_value_chars:,} characters; {TURN_OFF}"
            )
        self.work += size
        if self.work > self.limits.max_work_chars:
            raise ChatTemplateError(
                f"the chat template produced more than {self.limits.max_work_chars:,} characters of values; {TURN_OFF}"
            )

    def produced(self, value: Any, what: str = "a value") -> Any:
        self.value(_size(value, self.limits.max_value_chars), what)
        return value

    def items(self, count: int, what: str) -> None:
        if count > self.limits.max_items:
            raise ChatTemplateError(f"the chat template builds {what} of {count:,} items (at most "
                                    f"{self.limits.max_items:,}); {TURN_OFF}")


def _guard() -> _Guard:
    guard = _GUARD.get()
    if guard is None:  # rendered outside render_chat (e.g. a test calling template.render): default bounds
        guard = _Guard(DEFAULT_LIMITS)
        _GUARD.set(guard)
    return guard


def _check_format(fmt: str, args: tuple, kwargs: dict, guard: _Guard) -> None:
    """A format string may ask for huge widths: literally ('%099999999d') or through an argument ('{:{w}}')."""
    if _LONG_NUMBER.search(fmt):
        raise ChatTemplateError(f"the chat template formats with a width of a million characters or more; {TURN_OFF}")
    values = list(args) + list(kwargs.values())
    for value in values[0] if len(values) == 1 and isinstance(values[0], (tuple, list)) else values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > guard.limits.max_value_chars:
            raise ChatTemplateError(f"the chat template formats with a width over {guard.limits.max_value_chars:,}; {TURN_OFF}")
    guard.value(len(fmt) + sum(_size(v, guard.limits.max_value_chars) for v in values), "a formatted string")


def _check_filter(name: str, args: tuple, kwargs: dict, guard: _Guard) -> tuple:
    """Refuse a filter call whose result would be too large, from its arguments (returns the args to use)."""
    limit = guard.limits.max_value_chars
    value = args[0] if args else None
    if name not in _NON_PRINTING_FILTERS and _size(value, limit) > limit:
        guard.value(limit + 1, f"the input of '{name}'")
    rest = list(args[1:])
    if name == "center":
        width = rest[0] if rest else kwargs.get("width", 80)
        if isinstance(width, int) and width > limit:
            guard.value(width, "a centred string")
    elif name == "indent":
        width = rest[0] if rest else kwargs.get("width", 4)
        pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        guard.value(len(str(value)) + (str(value).count("\n") + 1) * max(pad, 0), "an indented string")
    elif name == "join":
        items = list(value) if value is not None and not isinstance(value, (str, dict)) else value
        sep = rest[0] if rest else kwargs.get("d", "")
        if isinstance(items, list):
            guard.value(_size(items, limit) + len(str(sep)) * len(items), "a joined string")
            args = (items, *args[1:])
    elif name == "replace" and isinstance(value, str) and len(rest) >= 2:
        old, new = str(rest[0]), str(rest[1])
        count = rest[2] if len(rest) > 2 else kwargs.get("count")
        hits = value.count(old) if old else len(value) + 1
        if isinstance(count, int) and count >= 0:
            hits = min(hits, count)
        guard.value(len(value) + hits * max(len(new) - len(old), 0), "a replaced string")
    elif name == "format" and isinstance(value, str):
        _check_format(value, tuple(rest), kwargs, guard)
    elif name == "wordwrap" and isinstance(value, str):
        width = rest[0] if rest else kwargs.get("width", 79)
        wrap = kwargs.get("wrapstring") or (rest[2] if len(rest) > 2 else None) or "\n"
        lines = len(value) // max(width if isinstance(width, int) else 1, 1) + 1
        guard.value(len(value) + lines * len(str(wrap)), "a wrapped string")
    elif name == "tojson":
        indent = rest[1] if len(rest) > 1 else kwargs.get("indent")
        if isinstance(indent, str) and len(indent) > 16 or isinstance(indent, int) and indent > 16:
            raise ChatTemplateError(f"the chat template asks tojson for an indent over 16; {TURN_OFF}")
    elif name in ("batch", "slice"):
        count = rest[0] if rest else kwargs.get("linecount", kwargs.get("slices", 1))
        if isinstance(count, int):
            guard.items(count, f"'{name}' groups")
    elif name == "sum":
        start = rest[1] if len(rest) > 1 else kwargs.get("start", 0)
        if not isinstance(start, (int, float)):
            raise ChatTemplateError(f"the chat template sums lists or strings, which is not allowed here; {TURN_OFF}")
    return args


def _guard_filter(name: str, fn: Any) -> Any:
    @functools.wraps(fn)  # keeps jinja_pass_arg (pass_context / pass_environment) for Jinja
    def guarded(*args: Any, **kwargs: Any) -> Any:
        guard = _guard()
        guard.step()
        # pass_environment / pass_context filters get that first: the value is the next argument
        lead = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0
        checked = _check_filter(name, args[lead:], kwargs, guard)
        result = fn(*args[:lead], *checked, **kwargs)
        return guard.produced(result, f"the result of '{name}'")

    return guarded


class _Bounds(NodeTransformer):
    """Route loops, outputs and `~` through the guard functions (environment attributes: a template
    cannot shadow them with a variable of the same name)."""

    @staticmethod
    def _call(name: str, args: list[nodes.Expr], lineno: int) -> nodes.Call:
        return nodes.Call(nodes.EnvironmentAttribute(name, lineno=lineno), args, [], None, None, lineno=lineno)

    def visit_For(self, node: nodes.For) -> nodes.For:
        self.generic_visit(node)
        node.iter = self._call("pg_loop", [node.iter], node.lineno)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Output:
        self.generic_visit(node)
        node.nodes = [
            self._call("pg_emit", [nodes.Const(n.data, lineno=n.lineno) if isinstance(n, nodes.TemplateData) else n],
                       n.lineno)
            for n in node.nodes
        ]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        self.generic_visit(node)
        return self._call("pg_concat", list(node.nodes), node.lineno)


class _GenerationTag(jinja2.ext.Extension):
    """transformers' `{% generation %}` tag (it marks assistant tokens); renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller: Any) -> str:
        return caller()


class _TemplateDict:
    """transformers' `dict` global: no attribute access to the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(Namespace):
    """transformers' `namespace`: no underscore-prefixed attributes."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Jinja's own signature trick
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}."
            )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
    # transformers' tojson: no HTML escaping, indent/separators/sort_keys exposed
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:  # noqa: A002 - transformers' name
    return datetime.now().strftime(format)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' chat-template environment with the bounds of the module docstring."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, limits: TemplateLimits = DEFAULT_LIMITS) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols])
        self.limits = limits
        self.filters["tojson"] = _tojson
        self.filters = {name: _guard_filter(name, fn) for name, fn in self.filters.items()}
        self.globals.update(
            raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_TemplateDict(),
            namespace=_TemplateNamespace, range=self._range, lipsum=self._lipsum,
        )

    # --- the guard functions the rewritten template calls
    def pg_loop(self, iterable: Any) -> Any:
        guard = _guard()
        for item in iterable:
            guard.step()
            yield item

    def pg_emit(self, value: Any) -> str:
        guard = _guard()
        size = _size(value, guard.limits.max_value_chars)
        guard.value(size, "an output")
        text = str(value)
        guard.output += len(text)
        if guard.output > guard.limits.max_output_chars:
            raise ChatTemplateError(
                f"the chat template writes more than {guard.limits.max_output_chars:,} characters; shorten the "
                f"prompt or {TURN_OFF}"
            )
        return text

    def pg_concat(self, *parts: Any) -> str:
        guard = _guard()
        guard.value(sum(_size(p, guard.limits.max_value_chars) for p in parts), "a string")
        return "".join(map(str, parts))

    def _range(self, *args: Any) -> range:
        guard = _guard()
        rng = range(*args)
        guard.items(len(rng), "a range")
        return rng

    def _lipsum(self, n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:  # noqa: A002
        from jinja2.utils import generate_lorem_ipsum

        if not all(isinstance(v, int) for v in (n, min, max)) or n > 20 or max > 200:
            raise ChatTemplateError(f"the chat template asks lipsum for too much text; {TURN_OFF}")
        return generate_lorem_ipsum(n=n, html=html, min=min, max=max)

    # --- the sandbox's hooks
    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        guard = _guard()
        guard.step()
        if isinstance(__obj, LoopContext) and args:  # `loop(children)` of a recursive loop
            args = (__self.pg_loop(args[0]), *args[1:])
        owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str):
            limit = guard.limits.max_value_chars
            if name in _STR_WIDTH_METHODS and any(isinstance(a, int) and a > limit for a in args):
                guard.value(max(a for a in args if isinstance(a, int)), f"a string from {name}()")
            elif name in ("format", "format_map"):
                _check_format(owner, args, kwargs, guard)
            elif name == "join" and args:
                items = list(args[0])
                guard.value(_size(items, limit) + len(owner) * len(items), "a joined string")
                args = (items,)
            elif name == "replace" and len(args) >= 2:
                _check_filter("replace", (owner, *args), {}, guard)
        result = super().call(__context, __obj, *args, **kwargs)
        return guard.produced(result, f"the result of {name or 'a call'}()")

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        guard = _guard()
        limits = guard.limits
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right))
        if operator == "*":
            if ints:
                if left.bit_length() + right.bit_length() > limits.max_int_bits:
                    raise ChatTemplateError(f"the chat template multiplies integers past {limits.max_int_bits} bits; {TURN_OFF}")
            else:
                seq, times = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(times, int) and isinstance(seq, str):
                    guard.value(len(seq) * max(times, 0), "a repeated string")
                elif isinstance(times, int) and isinstance(seq, (list, tuple)):
                    guard.items(len(seq) * max(times, 0), "a repeated list")
        elif operator == "**" and ints and right > 0 and abs(left) > 1:
            if left.bit_length() * right > limits.max_int_bits:
                raise ChatTemplateError(f"the chat template raises integers past {limits.max_int_bits} bits; {TURN_OFF}")
        elif operator == "+":
            if isinstance(left, str) and isinstance(right, str):
                guard.value(len(left) + len(right), "a string")
            elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                guard.items(len(left) + len(right), "a list")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, right if isinstance(right, tuple) else (right,), {}, guard)
        return guard.produced(super().call_binop(context, operator, left, right))

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        return _Bounds().visit(super()._parse(source, name, filename))


@functools.lru_cache(maxsize=32)
def _compile(source: str, limits: TemplateLimits) -> jinja2.Template:
    return BoundedEnvironment(limits).from_string(source)


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "message", None) or error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def render_chat(
    template: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool = True,
    variables: dict[str, Any] | None = None,
    limits: TemplateLimits = DEFAULT_LIMITS,
) -> str:
    """Render `template` as transformers' apply_chat_template(tokenize=False) does (messages, tools=None,
    documents=None, add_generation_prompt, the tokenizer's special tokens as `variables`), within
    `limits`; any failure is one ChatTemplateError line."""
    if not isinstance(template, str):
        raise ChatTemplateError(f"the chat template is a {type(template).__name__}, not text; {TURN_OFF}")
    if len(template) > limits.max_template_chars:
        raise ChatTemplateError(
            f"the chat template is {len(template):,} characters (at most {limits.max_template_chars:,} here); {TURN_OFF}"
        )
    token = _GUARD.set(_Guard(limits))
    try:
        compiled = _compile(template, limits)
        _GUARD.get().deadline = time.monotonic() + limits.seconds  # compiling does not count against the render
        chunks = []
        for chunk in compiled.generate(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=add_generation_prompt, **(variables or {})):
            chunks.append(chunk)
        return "".join(chunks)
    except ChatTemplateError:
        raise
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ChatTemplateError(
            f"the chat template does not parse (line {error.lineno}: {_first_line(error)}); {TURN_OFF}"
        ) from None
    except jinja2.exceptions.SecurityError as error:
        raise ChatTemplateError(
            f"the chat template tried something the sandbox forbids ({_first_line(error)}); {TURN_OFF}"
        ) from None
    except jinja2.exceptions.TemplateError as error:  # raise_exception() in the template, undefined calls...
        raise ChatTemplateError(f"the chat template refused this conversation: {_first_line(error)}") from None
    except RecursionError:
        raise ChatTemplateError(f"the chat template recursed too deeply; {TURN_OFF}") from None
    except MemoryError:
        raise ChatTemplateError(f"the chat template ran out of memory; {TURN_OFF}") from None
    except Exception as error:  # noqa: BLE001 - a template can raise anything its operations raise
        raise ChatTemplateError(
            f"the chat template failed ({type(error).__name__}: {_first_line(error)}); {TURN_OFF}"
        ) from None
    finally:
        _GUARD.reset(token)
