"""A class at the app's core: N visitors' page runs at once through sessions, plans and the shared batch, no Gradio.

    python -m playground.tools.loadtest --core [--model weights/SmolLM2-135M-Instruct] [--visitors 1,8]
                                              [--new-tokens 64] [--device cpu] [--dtype float32] [--no-transformers]
                                              [--compile auto] [--random-weights] [--plain-too] [--breakdown]
                                              [--no-overlap] [--unpaced]

Each visitor is a page's press: a session of its own, the page's settings (its own question, chat on, greedy) and the
page's live captures (`play.start_run`: attention of the live layer, the residual stream, the candidates), its events
from the app's own batch on the one torch thread (`engine_stream.run_events`: what the page's stream reads). First every
visitor runs alone (its solo tokens); then for each N, N visitors press at once (every request in line before the
batch's first step). Printed per visitor: its tokens, first token (request sent → first event), decode tokens/s (tokens
after the first over first → last event) and that rate against the command-line generator's in the same run
(`generate_all` on the first question, nothing recorded: what `python -m playground generate` does), and whether its
tokens equal its solo run. Beside them, transformers `generate()` with a static cache on the same model (compiled by
transformers where it compiles one: on CUDA), at 1 row and at N rows of the same length. On the CPU the crowd must not
get slower: one visitor at least 0.9× the CLI, and with 8 visitors each at least 0.5× the CLI with a first token within
3 s; the last lines say whether it held. The machine's other load moves every number: compare within one run.

`--compile` loads the model with its captured decode step (`app.py --compile`; on CUDA "auto" is CUDA graphs by
hand): before each crowd size is timed, a crowd of that size warms the server (and every row bucket up to its
size is prepared, as a warm server has them), and each visitor's line says how it decoded (captured, the rows of
its step). `--random-weights`: the model folder's config and tokenizer with random weights (a GPU machine the real
weights cannot travel to). `--plain-too`: each crowd again without the page's captures (what they cost).
`--no-overlap`: the captured step synchronous, as on the CPU (on CUDA the device otherwise computes the next call
while the host builds this one's events, `generation.shared_step`): run it both ways to see what overlap gains.
Each visitor's reader is paced as the page's (`play._Pacing`): woken once a frame, it takes the frame's tokens at once
and times them by the run's own clock. `--unpaced`: woken for every step's event instead (what every reader did before
the page paced its stream: a class's readers then take the GIL from the torch thread in turn at every step).
`--breakdown`: where each crowd's scheduler steps went, per step: the captured step's call (waiting for the call in
flight and its output to the host, launching the next, and reading every run's row at once: tokens, probabilities,
candidates), each run's own work after it (its event, token chain, KV statistics, candidates and
copies; also per row), and the rest (admitting, the eager batch's passes, prompts, the readers taking the GIL).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from playground.app import torch_thread
from playground.tools import gpu_bench

QUESTIONS = ["Explain step by step how a bicycle works.", "Describe the water cycle in detail.",
             "Explain how a computer stores numbers.", "Tell me the history of the printing press.",
             "Explain how plants make food from sunlight.", "Describe how a train engine works.",
             "Explain why the seasons change.", "Describe how bread is made, step by step."]
CPU_ALONE, CPU_CROWD, CPU_FIRST = 0.9, 0.5, 3.0  # the CPU targets: ratios to the CLI, first token in seconds


@dataclass
class Visit:
    """One visitor's press: its tokens, when each event came (seconds after the press), how it decoded."""

    tokens: list[int]
    stamps: list[float]
    decoding: dict | None = None

    @property
    def first(self) -> float:
        return self.stamps[0] if self.stamps else float("inf")

    @property
    def rate(self) -> float:
        n = len(self.stamps)
        return (n - 1) / (self.stamps[-1] - self.stamps[0]) if n > 1 and self.stamps[-1] > self.stamps[0] else 0.0


def settings(name: str, i: int, new_tokens: int) -> Any:
    from playground.app.settings import UISettings

    return UISettings(model=name, prompt=QUESTIONS[i % len(QUESTIONS)], chat=True, mode="greedy",
                      max_new_tokens=new_tokens)


def plan(lm: Any, name: str, i: int, new_tokens: int, captures: bool = True) -> Any:
    """Visitor i's run as the page plans it, in a session of its own."""
    from playground.app.play import start_run
    from playground.app.session import Session

    return start_run(Session(key=f"visitor-{i}", lang="en"), lm, settings(name, i, new_tokens), captures=captures)[1]


def follow(p: Any, i: int, start: float, paced: bool = True) -> Visit:
    """Visitor i's run `p` through the app's batch, as the page's stream reads it, its events timed from `start`.

    `paced` (the page's way, `play._Pacing`): the reader is woken once a frame (`frames.frame_seconds` of the runs
    being served) and takes the frame's tokens at once, so each token is timed by the run's own clock from its first
    token's arrival (which the page takes at once). Unpaced, it is woken for every step's event and times each
    event's arrival."""
    from playground.app import frames, serving
    from playground.app.engine_stream import run_events
    from playground.generation.batch import CaughtUp

    visit = Visit([], [])
    last_frame, first = 0.0, None

    def due() -> float:
        return last_frame + frames.frame_seconds(serving.active_requests())

    for event in run_events(p, threading.Event(), owner=f"visitor-{i}", due=due if paced else None):
        if isinstance(event, CaughtUp):
            last_frame = time.monotonic() if time.monotonic() >= due() else last_frame
        elif hasattr(event, "token_id"):  # not a place in line
            now, clock = time.perf_counter() - start, event.timing["elapsed_ms"] / 1000
            if first is None:
                first, last_frame = (now, clock), time.monotonic()  # the page draws its first token at once
            visit.tokens.append(int(event.token_id))
            visit.stamps.append(first[0] + clock - first[1] if paced else now)
    visit.decoding = p.decoding
    return visit


def press(lm: Any, name: str, i: int, new_tokens: int, start: float, captures: bool = True) -> Visit:
    """Visitor i's page press through the app's core, its events timed from `start`."""
    return follow(plan(lm, name, i, new_tokens, captures), i, start)


def crowd(lm: Any, name: str, n: int, new_tokens: int, captures: bool = True, paced: bool = True) -> list[Visit]:
    """`n` visitors pressing at once: every request is in line before the batch's first step, however the threads
    happen to start (a busy machine could otherwise let the first visitor finish before the last one asked)."""
    from playground.app import serving

    plans = [plan(lm, name, i, new_tokens, captures) for i in range(n)]
    visits: list[Visit | None] = [None] * n
    held, gate = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        gate.wait(timeout=60)

    holder = threading.Thread(target=torch_thread.call, args=(hold,), daemon=True)
    holder.start()
    held.wait()
    start = time.perf_counter()

    def go(i: int) -> None:
        visits[i] = follow(plans[i], i, start, paced)

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    while serving.default_server().active() < n and time.perf_counter() - start < 60:
        time.sleep(0.001)
    gate.set()
    for t in threads:
        t.join(timeout=1800)
    return [v or Visit([], []) for v in visits]


def cli_rate(lm: Any, name: str, new_tokens: int, repeats: int = 2) -> float:
    """The command-line generator's decode tokens/s on the first question (nothing recorded), best of `repeats`."""
    from playground.app.play import prompt_tokens
    from playground.generation import GenerationConfig, generate_all

    ids, _ = prompt_tokens(lm, settings(name, 0, new_tokens))
    cfg = GenerationConfig(max_new_tokens=new_tokens, chat=False, top_candidates=0)
    return max(generate_all(lm, ids, cfg).timing["tokens_per_s"] for _ in range(repeats))


def transformers_rate(theirs: Any, lm: Any, rows: int, new_tokens: int, device: str) -> float:
    """transformers' static-cache decode tokens/s at `rows` rows of the benchmark's prompt length."""
    batch = gpu_bench.prompts(lm.config.vocab_size, rows)
    theirs.run(batch, 2)  # warm-up
    repeats = 2 if device == "cuda" else 1  # on CUDA a new length compiles in its first run: time its second
    return gpu_bench.decode_rate(lambda k: theirs.run(batch, k), rows, new_tokens, repeats, torch.device(device))


def warm(lm: Any, name: str, n: int, new_tokens: int, captures: bool) -> None:
    """A warm server for a crowd of `n`: one such crowd, then every row bucket up to `n` of its step shape prepared
    (a crowd arriving at once outgrows a bucket before the next is ready: vLLM captures its sizes at start)."""
    from playground.generation.captured import ROW_BUCKETS, row_bucket, shape_of

    crowd(lm, name, n, new_tokens, captures)
    p = plan(lm, name, 0, new_tokens, captures)
    for rows in ROW_BUCKETS[: ROW_BUCKETS.index(row_bucket(n)) + 1]:
        lm.captured.ahead(shape_of(p, rows))
    lm.captured.settle()


def random_weights(folder: Path, workdir: Path) -> Path:
    """`folder`'s config and tokenizer with random weights, saved by transformers under `workdir`."""
    import shutil

    import transformers

    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(folder)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(workdir)
    for f in folder.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and not (workdir / f.name).exists():
            shutil.copy(f, workdir / f.name)
    return workdir


class StepTimes:
    """`--breakdown`: the scheduler's steps timed while a crowd runs (its methods wrapped, put back by `close`)."""

    def __init__(self) -> None:
        from playground.generation import batch, shared_step

        self.steps = self.rows = 0
        self.total = self.call = self.read = self.after = 0.0
        self.in_call = False
        step, resume, advance = batch.Scheduler.step, batch.Scheduler._resume, shared_step.SharedStep.advance
        read_rows = shared_step.read_rows
        self._put_back = [(batch.Scheduler, "step", step), (batch.Scheduler, "_resume", resume),
                          (shared_step.SharedStep, "advance", advance), (shared_step, "read_rows", read_rows)]
        times = self

        def timed_step(scheduler: Any) -> None:
            began = time.perf_counter()
            step(scheduler)
            times.total += time.perf_counter() - began
            times.steps += 1

        def timed_resume(scheduler: Any, ticket: Any, value: Any = None) -> None:
            began = time.perf_counter()
            resume(scheduler, ticket, value)
            if isinstance(value, shared_step.RowTold):  # a seated run reading its row of the step call just made
                times.after += time.perf_counter() - began
                times.rows += 1

        def timed_advance(group: Any) -> Any:
            began, times.in_call = time.perf_counter(), True
            try:
                return advance(group)
            finally:
                times.call += time.perf_counter() - began
                times.in_call = False

        def timed_read(*args: Any) -> Any:  # a step call's rows (a prefill's first token reads its row too: not counted)
            began = time.perf_counter()
            try:
                return read_rows(*args)
            finally:
                if times.in_call:
                    times.read += time.perf_counter() - began

        batch.Scheduler.step, batch.Scheduler._resume = timed_step, timed_resume
        shared_step.SharedStep.advance, shared_step.read_rows = timed_advance, timed_read

    def close(self) -> None:
        for owner, name, original in self._put_back:
            setattr(owner, name, original)

    def line(self) -> str:
        if not self.steps:
            return "breakdown: no scheduler step"
        per = lambda seconds: f"{1000 * seconds / self.steps:.2f} ms"  # noqa: E731
        row = f" ({1e6 * self.after / self.rows:.1f} µs a row)" if self.rows else ""
        return (f"breakdown, per scheduler step ({self.steps} steps, {self.rows / self.steps:.1f} rows a step call): "
                f"{per(self.total)} in all; the captured step's call {per(self.call)} (of which its rows read for every "
                f"run at once {per(self.read)}); each run's own work after it "
                f"{per(self.after)}{row}; the rest {per(self.total - self.call - self.after)}")


def steady(visits: list[Visit]) -> str:
    """The crowd's decode rate while every visitor was decoding (from the last first token to the first last token):
    what transformers' rate at as many rows measures (no prefill, no one joining or leaving)."""
    lo = max(v.first for v in visits)
    hi = min((v.stamps[-1] for v in visits if v.stamps), default=lo)
    tokens = sum(sum(lo < t <= hi for t in v.stamps) for v in visits)
    if hi <= lo or not tokens:
        return "no span with every visitor decoding"
    return f"while all {len(visits)} decoded: {tokens / (hi - lo):.1f} tokens/s"


def decoded(v: Visit) -> str:
    d = v.decoding or {}
    return f"captured, {d.get('rows')} rows" if d.get("captured") else f"eager ({d.get('reason', '')})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", default="weights/SmolLM2-135M-Instruct", help="a checkpoint folder")
    parser.add_argument("--visitors", default="1,8", help="the crowd sizes, comma-separated")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-transformers", action="store_true", help="leave out transformers' static cache")
    parser.add_argument("--compile", default=None, choices=["auto", "inductor", "cudagraph", "eager"],
                        help="decode through the captured step (app.py --compile)")
    parser.add_argument("--random-weights", action="store_true", help="the folder's config and tokenizer, random weights")
    parser.add_argument("--plain-too", action="store_true", help="each crowd again without the page's captures")
    parser.add_argument("--unpaced", action="store_true",
                        help="each visitor's reader woken for every step's event, not once a frame as the page's")
    parser.add_argument("--no-overlap", action="store_true",
                        help="the captured step synchronous (on CUDA: no call launched while the host builds events)")
    parser.add_argument("--breakdown", action="store_true", help="where each crowd's scheduler steps went")
    args = parser.parse_args(argv)
    if (code := gpu_bench.fail_without_cuda(args.device)) is not None:
        return code
    from playground.checkpoints.loader import load_model

    folder = Path(args.model)
    if not folder.is_dir():
        print(f"error: no checkpoint folder at {args.model}", file=sys.stderr)
        return 2
    # Every torch op of the benchmark runs on the app's torch thread, as the app runs them: libgomp keeps a
    # worker pool per thread that ever ran a parallel op, and a second pool (this main thread's) slows every small
    # op of the other (measured here: the page at 0.86× the CLI with two pools, 0.90–0.96× with one).
    name = folder.name
    if args.random_weights:
        import tempfile

        folder = torch_thread.call(random_weights, folder, Path(tempfile.mkdtemp()) / name)
    sizes = [int(x) for x in args.visitors.split(",")]
    from playground.app import serving

    serving.configure(max_rows=max(serving.MAX_ROWS, *sizes))  # app.py --max-rows: every visitor decodes at once
    lm = torch_thread.call(load_model, folder, device=args.device, dtype=args.dtype, compile=args.compile or False)
    if args.no_overlap and lm.captured is not None:
        lm.captured.overlap = False
    from playground.errors import PlaygroundError

    try:
        cli = torch_thread.call(cli_rate, lm, name, args.new_tokens)
    except PlaygroundError as error:  # e.g. more new tokens than the model's context holds after a question
        print(f"error: {error}", file=sys.stderr)
        return 2
    overlap = "" if lm.captured is None else (
        "; the captured step a call ahead of the host" if lm.captured.overlap else "; the captured step synchronous")
    print(f"{name}; {gpu_bench.device_name(args.device)}, {args.dtype}; greedy, chat on, the page's live captures, "
          f"{args.new_tokens} new tokens{overlap}; the CLI alone: {cli:.1f} tokens/s", flush=True)
    solo = [press(lm, name, i, args.new_tokens, time.perf_counter()).tokens for i in range(max(sizes))]
    theirs = None
    if not args.no_transformers:
        theirs = torch_thread.call(gpu_bench.Theirs, folder, args.device, args.dtype, compiled=True)
    held: list[str] = []
    unequal = 0  # visitors whose tokens in a crowd differ from their solo run
    for n, captures in [(n, c) for n in sizes for c in ((True, False) if args.plain_too else (True,))]:
        if args.compile:
            warm(lm, name, n, args.new_tokens, captures)
        times = StepTimes() if args.breakdown else None
        try:
            visits = crowd(lm, name, n, args.new_tokens, captures, not args.unpaced)
        finally:
            if times is not None:
                times.close()
        print(f"\n{n} visitor{'s' if n > 1 else ''} at once{'' if captures else ', nothing captured'}\n\n"
              "| visitor | tokens | first token | decode tokens/s | against the CLI | equal to alone | decoded |\n"
              "|---|---|---|---|---|---|---|")
        for i, v in enumerate(visits):
            unequal += v.tokens != solo[i]
            print(f"| {i} | {len(v.tokens)} | {v.first:.2f} s | {v.rate:.1f} | {v.rate / cli:.2f}× | "
                  f"{'yes' if v.tokens == solo[i] else 'NO'} | {decoded(v)} |")
        span = max((v.stamps[-1] for v in visits if v.stamps), default=0.0)
        total = sum(len(v.tokens) for v in visits)
        rates = sorted(v.rate for v in visits)
        line = (f"all together: {total} tokens in {span:.1f} s, {total / max(span, 1e-9):.1f} tokens/s; each visitor's "
                f"decode rate summed: {sum(rates):.1f} tokens/s (slowest {rates[0]:.1f}); {steady(visits)}")
        if theirs is not None and captures:
            rate = torch_thread.call(transformers_rate, theirs, lm, n, args.new_tokens, args.device)
            line += f"; transformers static cache, {n} rows of {gpu_bench.PROMPT_TOKENS} tokens: {rate:.1f} tokens/s"
        print(line + ("" if times is None else "\n" + times.line()), flush=True)
        if args.device == "cpu" and captures:
            worst = min(v.rate for v in visits) / cli
            first = max(v.first for v in visits)
            if n == 1:
                held.append(f"1 visitor: {worst:.2f}× the CLI (target ≥ {CPU_ALONE}): "
                            f"{'held' if worst >= CPU_ALONE else 'NOT held'}")
            else:
                ok = worst >= CPU_CROWD and first <= CPU_FIRST
                held.append(f"{n} visitors: the slowest {worst:.2f}× the CLI (target ≥ {CPU_CROWD}), the last first "
                            f"token {first:.2f} s (target ≤ {CPU_FIRST:.0f} s): {'held' if ok else 'NOT held'}")
        del visits
    if held:
        print("\n" + "\n".join(held))
    return 0 if unequal == 0 else 1  # a visitor's tokens that depend on the crowd: a failure


if __name__ == "__main__":
    sys.exit(main())
