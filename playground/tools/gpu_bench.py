"""The GPU benchmark: our engine against transformers eager and transformers static cache + torch.compile.

In one process on one GPU, SmolLM2-135M's shape (the real weights when the folder exists, else random
weights of its shape: hidden 576, 30 layers, 9 heads, 3 K/V heads, MLP 1536, vocabulary 49152, tied,
RoPE theta 1e5), greedy, for each dtype and each number of streams (rows decoding together):

- ours, through the app's server (`playground.app.serving.Server`, N visitors at once), with nothing
  recorded and with the page's live capture (one layer's attention, the residual stream for the lens,
  8 candidates per step); at one stream also our engine alone (`playground.generate`);
- transformers `generate()` on an N-row batch, eager (its dynamic cache), and with a static cache, which
  transformers compiles itself on CUDA (`torch.compile`, mode reduce-overhead: CUDA graphs).

Rates are decode tokens/s of all streams together, after the prefill: N·(n − 1) / (time for n tokens −
time for 1), the same on every side, each the best of `repeats` runs after a warm-up (which also holds
transformers' compilation). Used by `python -m playground.tools.bench --device cuda` and
`python -m playground.tools.crowd --device cuda`; `measure` also runs on the CPU (tests, smoke runs).
Needs torch and transformers only: no Gradio, no plotly.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SMOLLM2_SHAPE = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2,
)
STREAMS = (1, 2, 4, 8, 16, 32, 64)
PROMPT_TOKENS = 32
NEW_TOKENS = 64
ENGINES = ("ours", "eager", "compiled")
NO_CUDA = "no CUDA GPU here (torch.cuda.is_available() is False): --device cuda needs one; run on a GPU machine"


def cuda_missing(device: str) -> str | None:
    """The one line to print (exit code 2) when `device` asks for CUDA and none is here; else None."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return f"error: {NO_CUDA}"
    return None


def live_capture(n_layers: int) -> dict[str, Any]:
    """What the page records while a visitor watches (playground.app.play): the live panel's layer
    of attention, the residual stream (logit lens, residual norms) and the candidates."""
    return {"capture_attention": True, "attention_layers": (n_layers - 1,), "capture_residual": True,
            "top_candidates": 8}


def checkpoint(model: str | None, workdir: Path, shape: dict[str, Any] | None = None) -> tuple[Path, str]:
    """(folder, what it is): `model` when it is a folder, else random weights of `shape` (SmolLM2's)
    saved with transformers under `workdir`."""
    if model and Path(model).is_dir():
        return Path(model), Path(model).name
    import transformers

    config = transformers.LlamaConfig(**(shape or SMOLLM2_SHAPE))
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(config)
    folder = workdir / "random-smollm2-shape"
    hf.save_pretrained(folder)
    return folder, "random weights, SmolLM2-135M's shape"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    best = float("inf")
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def decode_rate(run: Callable[[int], Any], streams: int, n: int, repeats: int, device: torch.device) -> float:
    """Decode tokens/s of `streams` streams together: streams·(n − 1) / (t(n) − t(1))."""
    one = _best(lambda: run(1), repeats, device)
    full = _best(lambda: run(n), repeats, device)
    return streams * (n - 1) / max(full - one, 1e-9)


def prompts(vocab: int, streams: int, length: int = PROMPT_TOKENS) -> list[list[int]]:
    """One prompt of token ids per stream, the same length (a batch without padding for transformers)."""
    g = torch.Generator(device="cpu").manual_seed(streams)
    return torch.randint(100, vocab, (streams, length), generator=g, device="cpu").tolist()


class Ours:
    """Our engine: alone (`generate`) and through the app's server with N visitors at once."""

    def __init__(self, folder: Path, device: str, dtype: str) -> None:
        import dataclasses

        from playground.checkpoints.loader import load_model

        lm = load_model(folder, device=device, dtype=dtype, tokenizer=False)
        self.lm = dataclasses.replace(lm, config=dataclasses.replace(lm.config, eos_token_id=None))  # exactly n tokens
        self.device = self.lm.device
        self._server: Any = None

    @property
    def server(self) -> Any:
        """The app's server, stepping on its own driver thread (made on first use: the batch needs greenlet)."""
        if self._server is None:
            from playground.app.serving import Server

            self._server = Server(max_rows=max(STREAMS), per_owner=1, call=lambda fn: fn())
        return self._server

    def config(self, n: int, capture: bool) -> Any:
        from playground.generation import GenerationConfig

        extra = live_capture(self.lm.config.n_layers) if capture else {"top_candidates": 0}
        return GenerationConfig(max_new_tokens=n, **extra)

    def alone(self, ids: list[int], n: int, capture: bool) -> list[int]:
        from playground.generation import generate

        tokens: list[int] = []
        for event in generate(self.lm, ids, self.config(n, capture)):
            tokens = list(event.token_ids)
        return tokens

    def together(self, batch: list[list[int]], n: int, capture: bool) -> list[list[int]]:
        """Every prompt as its own visitor, all submitted at once; each visitor's tokens."""
        from playground.generation.plan import plan

        out: list[list[int]] = [[] for _ in batch]

        def visit(i: int) -> None:
            for event in self.server.events(plan(self.lm, batch[i], self.config(n, capture)), threading.Event(),
                                            owner=i):
                out[i] = list(event.token_ids)

        threads = [threading.Thread(target=visit, args=(i,), daemon=True) for i in range(len(batch))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=1800)
        return out


class Theirs:
    """transformers `generate()` on a batch: eager (dynamic cache) or static cache, compiled on CUDA."""

    def __init__(self, folder: Path, device: str, dtype: str, *, compiled: bool) -> None:
        import transformers

        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device)
        self.model.eval()
        self.device = torch.device(device)
        self.compiled = compiled
        if compiled:  # a graph per (rows, cache length): 2 lengths × 7 row counts, past dynamo's default of 8
            import torch._dynamo.config as dynamo

            for name in ("recompile_limit", "cache_size_limit"):
                if hasattr(dynamo, name):
                    setattr(dynamo, name, max(getattr(dynamo, name), 256))

    @torch.inference_mode()
    def run(self, batch: list[list[int]], n: int) -> torch.Tensor:
        ids = torch.tensor(batch, device=self.device)
        extra: dict[str, Any] = {"cache_implementation": "static"} if self.compiled else {}
        return self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                   do_sample=False, pad_token_id=0, eos_token_id=None, **extra)


@dataclass
class Row:
    dtype: str
    streams: int
    capture: bool
    rates: dict[str, float] = field(default_factory=dict)  # engine -> tokens/s of all streams together
    equal_to_solo: int | None = None  # streams whose tokens equal their solo run (ours through the server)


def measure(
    folder: Path, *, device: str = "cuda", dtypes: Sequence[str] = ("float32", "bfloat16"),
    streams: Sequence[int] = STREAMS, new_tokens: int = NEW_TOKENS, repeats: int = 2,
    engines: Sequence[str] = ENGINES, log: Callable[[str], None] = print,
) -> list[Row]:
    """Every (dtype, streams, capture) row, every engine in `engines` ("ours", "eager", "compiled")."""
    rows: list[Row] = []
    for dtype in dtypes:
        ours = Ours(folder, device, dtype) if "ours" in engines else None
        theirs = {name: Theirs(folder, device, dtype, compiled=name == "compiled")
                  for name in ("eager", "compiled") if name in engines}
        for s in streams:
            for row in _rows(ours, theirs, dtype, s, new_tokens, repeats, torch.device(device)):
                rows.append(row)
                log(format_row(row, rows))
        ours = theirs = None  # free this dtype's models before the next
        if torch.device(device).type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _rows(ours: Ours | None, theirs: dict[str, Theirs], dtype: str, s: int, n: int, repeats: int,
          dev: torch.device) -> list[Row]:
    """Nothing recorded and the page's live capture, at `s` streams."""
    vocab = ours.lm.config.vocab_size if ours else next(iter(theirs.values())).model.config.vocab_size
    batch = prompts(vocab, s)
    solo = [ours.alone(ids, n, False) for ids in batch] if ours else []
    for engine in theirs.values():  # warm-up: kernels picked, transformers' graphs compiled for s rows, both lengths
        engine.run(batch, n)
        engine.run(batch, 1)
    out = []
    for capture in (False, True):
        row = Row(dtype, s, capture)
        if ours is not None:
            got = ours.together(batch, n, capture)  # warm-up, and the equality check
            row.equal_to_solo = sum(g == want for g, want in zip(got, solo))
            row.rates["ours"] = decode_rate(lambda k, c=capture: ours.together(batch, k, c), s, n, repeats, dev)
            if s == 1:
                row.rates["ours alone"] = decode_rate(lambda k, c=capture: ours.alone(batch[0], k, c), 1, n, repeats,
                                                      dev)
        if not capture:  # transformers records nothing the page shows
            for name, engine in theirs.items():
                row.rates[name] = decode_rate(lambda k, e=engine: e.run(batch, k), s, n, repeats, dev)
        out.append(row)
    return out


def _baseline(row: Row, rows: list[Row]) -> Row:
    """The row without capture of the same dtype and streams (transformers' rates live there)."""
    return next((r for r in rows if r.dtype == row.dtype and r.streams == row.streams and not r.capture), row)


def format_row(row: Row, rows: list[Row]) -> str:
    base = _baseline(row, rows)
    ours = row.rates.get("ours")
    cells = [f"{row.dtype:8s}", f"{row.streams:3d} streams", "live capture " if row.capture else "nothing kept "]
    for name in ("ours alone", "ours", "eager", "compiled"):
        rate = row.rates.get(name, base.rates.get(name) if name in ("eager", "compiled") else None)
        if rate is not None:
            cells.append(f"{name} {rate:9.1f}")
    for name in ("eager", "compiled"):
        theirs = base.rates.get(name)
        if ours and theirs:
            cells.append(f"ours/{name} {ours / theirs:5.2f}x")
    if row.equal_to_solo is not None:
        cells.append(f"equal to solo {row.equal_to_solo}/{row.streams}")
    return " | ".join(cells)


def markdown(rows: list[Row], what: str, card: str) -> str:
    """The README's GPU table: tokens/s of all streams together and our ratios, and the card it ran on."""
    lines = ["| dtype | streams | recorded | ours | transformers eager | transformers static + compiled | "
             "ours / compiled | equal to solo |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        base = _baseline(row, rows)
        eager, compiled = base.rates.get("eager"), base.rates.get("compiled")
        ours = row.rates.get("ours")
        ratio = f"{ours / compiled:.2f}×" if ours and compiled else "–"
        lines.append(f"| {row.dtype} | {row.streams} | {'live capture' if row.capture else 'nothing'} | "
                     f"{ours or 0:.0f} | {eager or 0:.0f} | {compiled or 0:.0f} | {ratio} | "
                     f"{row.equal_to_solo}/{row.streams} |")
    lines += ["", f"<sub>{what}, {card}, torch {torch.__version__}; tokens/s of all streams together after the "
                  "prefill, best of the run's repeats</sub>"]
    return "\n".join(lines)


def device_name(device: str) -> str:
    dev = torch.device(device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"


def run(model: str | None, device: str, dtypes: Sequence[str], streams: Sequence[int], new_tokens: int,
        repeats: int) -> tuple[list[Row], str]:
    """The whole benchmark; (rows, the README table). Prints each row as it is measured."""
    with tempfile.TemporaryDirectory() as tmp:
        folder, what = checkpoint(model, Path(tmp))
        card = device_name(device)
        print(f"{what}; {card}; greedy, {PROMPT_TOKENS}-token prompts, {new_tokens} new tokens; "
              f"streams {', '.join(map(str, streams))}", flush=True)
        rows = measure(folder, device=device, dtypes=dtypes, streams=streams, new_tokens=new_tokens, repeats=repeats,
                       log=lambda line: print(line, flush=True))
    return rows, markdown(rows, what, card)


def crowd_rows(model: str | None, device: str, dtype: str, visitors: Sequence[int], new_tokens: int) -> list[str]:
    """The crowd tool on a GPU, in-process: N visitors at once through the server, each one's view
    (decode tokens/s, first token) and all together, beside transformers compiled at N rows."""
    lines: list[str] = []
    dev = torch.device(device)
    with tempfile.TemporaryDirectory() as tmp:
        folder, what = checkpoint(model, Path(tmp))
        ours, theirs = Ours(folder, device, dtype), Theirs(folder, device, dtype, compiled=True)
        lines.append(f"{what}; {device_name(device)}, {dtype}; greedy, the page's live capture, {new_tokens} new tokens")
        lines += ["| visitors | each visitor: median tokens/s, min | first token p50 / max | aggregate tokens/s | "
                  "transformers compiled, same rows (decode) | ours / compiled | equal to solo |", "|---|---|---|---|---|---|---|"]
        print("\n".join(lines), flush=True)
        for n in visitors:
            lines.append(_crowd_row(ours, theirs, n, new_tokens, dev))
            print(lines[-1], flush=True)
    return lines


def _crowd_row(ours: Ours, theirs: Theirs, n: int, new_tokens: int, dev: torch.device) -> str:
    from playground.generation.plan import plan

    batch = prompts(ours.lm.config.vocab_size, n)
    solo = [ours.alone(ids, new_tokens, True) for ids in batch]
    ours.together(batch, 4, True)  # warm-up
    theirs.run(batch, new_tokens)  # warm-up and compilation for n rows, both lengths
    theirs.run(batch, 1)
    stamps: list[list[float]] = [[] for _ in batch]  # seconds from the press to each event
    tokens: list[list[int]] = [[] for _ in batch]

    def visit(i: int, start: float) -> None:
        for event in ours.server.events(plan(ours.lm, batch[i], ours.config(new_tokens, True)), threading.Event(),
                                        owner=i):
            stamps[i].append(time.perf_counter() - start)
            tokens[i] = list(event.token_ids)

    _sync(dev)
    start = time.perf_counter()
    threads = [threading.Thread(target=visit, args=(i, start), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=1800)
    span = max(s[-1] for s in stamps if s)
    each = [(len(s) - 1) / (s[-1] - s[0]) for s in stamps if len(s) > 1 and s[-1] > s[0]]
    firsts = sorted(s[0] for s in stamps if s)
    aggregate = sum(len(t) for t in tokens) / span
    compiled = decode_rate(lambda k: theirs.run(batch, k), n, new_tokens, 2, dev)
    equal = sum(t == want for t, want in zip(tokens, solo))
    return (f"| {n} | {statistics.median(each):.1f}, min {min(each):.1f} | {firsts[len(firsts) // 2]:.3f} / "
            f"{firsts[-1]:.3f} s | {aggregate:.0f} | {compiled:.0f} | {aggregate / compiled:.2f}× | {equal}/{n} |")


def fail_without_cuda(device: str) -> int | None:
    """Print the one line and give exit code 2 when CUDA is asked for and missing."""
    line = cuda_missing(device)
    if line is None:
        return None
    print(line, file=sys.stderr)
    return 2
