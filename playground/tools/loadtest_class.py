"""A class's day against one server (issue 42, item 4): `loadtest --page --class`.

    python -m playground.tools.loadtest --page --class --model SmolLM2-135M-Instruct --other-model tiny-lm \\
        --json soak.json                  # the 60-minute soak: 30 students, 5-minute warm-up, 20 s of thought

    python -m playground.tools.loadtest --page --class --clients 30 --seconds 120 --warmup 30 --think-seconds 5
                                          # a short try on tiny-lm

The server starts as on a Space (`PLAYGROUND_TRUSTED_PROXIES=1`, `loadtest_page.run`). `--clients` students, most
behind the school's one address (`SCHOOL`, a class behind NAT), every `HOME_EVERY`-th from an address of its own
(`X-Forwarded-For`, as the flood's scripts name theirs); each student's tab keeps Gradio's heartbeat connected, as
a browser's does. Each student loops over `CLASS_MIX` (the lab's mix, plus the game, a link with branches and a
long run), waiting about `--think-seconds` between two actions. Beside them a teacher (at the school address)
plays rounds of the class game: a finished run, Start (a room), time for the students to join by the room link
(`?game=<room>`, a fresh tab each) and guess, Reveal, Next, Reveal. The game's events are found by element id in
the page's config, as the other buttons are.

- **game**: a fresh tab opened from the teacher's room link, a guess among the options it shows (a refusal only
  where the teacher moved on in between); no room yet: a plain run instead.
- **link**: the teacher's shared link (`to_query` with `branches=`): a fresh tab replays the run and its
  `BRANCHES` branches (page load, the model's load, the link's run), and the last run must equal its solo replay.
- **long**: a run of `--long-tokens` (one drawn), whose first tokens must equal the tab's solo run (same seed).
- uploads, forks, labs, lessons, storms, a flood: the lab's mix (`loadtest_page.LAB_MIX`).

After `--warmup` seconds of the same class and an idle pause, the checks: the memory the server does not count
(RSS of its process tree less the holdings total) grows at most 10 %; the counted part stays within its budgets
(every `--holdings-every` seconds, `held_breaches`); nothing fails; every run equals its solo run. Printed: a
markdown table for docs/serving.md (the machine's load average, RSS before / peak / after, the counted bytes by
part, pass or fail).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx

from playground.tools.loadtest_page import LAB_MIX, Page, Visitor, arguments, held_total, mib, run, verdict
from playground.tools.server import client_headers
from playground.ui.class_game import GAME_SLOTS

SCHOOL = "198.51.100.7"  # the school's one address (a documentation range): the class behind NAT
HOME_EVERY = 6  # every sixth student works from home: an address of its own
CLASS_MIX = LAB_MIX + ",game,game,link,long"
BRANCHES = 4  # the shared link's branches (each from the run before it)
DEFAULTS = dict(clients=30, seconds=3600.0, warmup=300.0, think_seconds=20.0, holdings_every=60.0, mix=CLASS_MIX,
                lab=False)
# the game events' outputs, by place: read from the page's own list, so a new slot never shifts them (a hard-coded
# 6 read the lens after "game_lens" came, and every game round of the soak failed as "Start opened no room")
GAME_VIEW, GAME_CHOICE, GAME_LINK = (GAME_SLOTS.index(name) for name in ("game_view", "game_choice", "game_link"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--class", dest="klass", action="store_true",
                        help="a class's day: students behind one school address, a teacher's games, links with "
                             "branches, long runs (defaults: " + ", ".join(f"{k} {v}" for k, v in DEFAULTS.items()
                                                                          if k != "mix") + ")")
    parser.add_argument("--long-tokens", default="512,1024", help="with --class: a long run's lengths (one drawn)")


@dataclass
class ClassPage:
    """The class's events, by element id in the page's config (as `Page.read` finds the other buttons)."""

    join: int  # the page-load event that joins a game link's room (`ClassGame.from_link`)
    start: int
    reveal: int
    next: int
    guess: int
    link_load: int  # after the page load: the link's model, then the link's own run (`generate_link`)
    link_run: int

    @classmethod
    def read(cls, url: str) -> ClassPage:
        config = httpx.get(url + "config", timeout=30).json()
        ids = {c["props"].get("elem_id"): c["id"] for c in config["components"] if c.get("props", {}).get("elem_id")}
        deps = [(d.get("id", i), d) for i, d in enumerate(config["dependencies"])]

        def event(elem: str, kind: str) -> int:
            return next(i for i, d in deps if [ids[elem], kind] in [list(t) for t in d["targets"]])

        root = config.get("layout", {}).get("id", 0)
        loads = [(i, d) for i, d in deps if [root, "load"] in [list(t) for t in d["targets"]]]
        join = next(i for i, d in loads if ids["game-view"] in d["outputs"])
        opened = loads[0][0]  # the page load that reads the link (`Page.opened`)
        generate = next(d for i, d in deps if [ids["generate-btn"], "click"] in [list(t) for t in d["targets"]])
        then = [(i, d) for i, d in deps if d.get("trigger_after") is not None]
        link_load = next(i for i, d in then if d["trigger_after"] == opened and ids["model-select"] in d["inputs"]
                         and d.get("queue") is not False)
        link_run = next(i for i, d in then if d["trigger_after"] == link_load and d["inputs"] == generate["inputs"])
        return cls(join, event("game-start-btn", "click"), event("game-reveal-btn", "click"),
                   event("game-next-btn", "click"), event("game-guess-btn", "click"), link_load, link_run)


def _update(out: dict[str, Any], index: int) -> Any:
    """Output `index` of an immediate event: a value, or Gradio's update dict."""
    data = out.get("data") or []
    return data[index] if index < len(data) else None


def view_of(out: dict[str, Any]) -> str:
    value = _update(out, GAME_VIEW)
    return str(value.get("value", "") if isinstance(value, dict) else value or "")


def room_of(out: dict[str, Any]) -> str | None:
    """The room a Start opened, from the game link it shows (`?game=<room>`)."""
    link = _update(out, GAME_LINK)
    link = link.get("value") if isinstance(link, dict) else link
    return (parse_qs(urlparse(str(link or "")).query).get("game") or [None])[0]


@contextlib.contextmanager
def heartbeat(url: str, session: str, headers: dict[str, str]) -> Iterator[None]:
    """Gradio's heartbeat connected for `session` while inside, as an open browser tab keeps it (a live tab's state
    is never evicted); it ends at the next beat after (Gradio then runs the tab's unload)."""
    stop = threading.Event()

    def beat() -> None:
        with contextlib.suppress(httpx.HTTPError), httpx.Client(headers=headers, timeout=None) as client:
            with client.stream("GET", url + "gradio_api/heartbeat/" + session) as response:
                for _ in response.iter_raw():
                    if stop.is_set():
                        return

    threading.Thread(target=beat, daemon=True).start()
    try:
        yield
    finally:
        stop.set()


class Board:
    """The room the teacher has open, and a count of the teacher's moves (a guess refused after one is fine)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.room: str | None = None
        self.moves = 0

    def now(self) -> tuple[str | None, int]:
        with self.lock:
            return self.room, self.moves

    def move(self, room: str | None = None) -> None:
        with self.lock:
            self.room = room or self.room
            self.moves += 1


@dataclass(eq=False)
class Student(Visitor):
    """A visitor of the class: its address, its heartbeat, and the class's own actions (`act`)."""

    day: ClassDay | None = field(default=None, repr=False)

    def loop(self, until: float, checkpoint: Path, rng: random.Random, actions: list[str]) -> None:
        with heartbeat(self.page.url, self.session, self.headers()):
            super().loop(until, checkpoint, rng, actions)

    def act(self, client: httpx.Client, action: str, checkpoint: Path, rng: random.Random) -> None:
        if action == "game":
            self.play_game(client, rng)
        elif action == "link":
            self.day.open_link(self)
        elif action == "long":
            self.long_run(client, rng)
        else:
            super().act(client, action, checkpoint, rng)

    def tab(self) -> Visitor:
        """A fresh tab of this student's (a link opened in a new tab): same address, a session of its own."""
        return Visitor(self.page, self.index, self.model, self.other_model, self.max_new_tokens, address=self.address)

    def long_run(self, client: httpx.Client, rng: random.Random) -> None:
        """A long run (same seed as the tab's solo run): its first tokens are that run's."""
        ids = self.generate(client, max_new_tokens=rng.choice(self.day.long_tokens))
        ref = self.reference or []
        if ids is not None and len(ids) >= len(ref) and ids[: len(ref)] != ref:
            self.crosstalk += 1
            self.errors.append(f"visitor {self.index}: a long run's first tokens differ from its solo run")

    def play_game(self, client: httpx.Client, rng: random.Random) -> None:
        """Join the teacher's room by its link in a fresh tab and guess; no room yet: a plain run."""
        room, moves = self.day.board.now()
        if room is None:
            self.check(self.generate(client))
            return
        events, tab = self.day.events, self.tab()
        with httpx.Client(headers=self.headers()) as own:
            tab.predict(own, self.page.opened, [], query=f"?game={room}")  # what the browser calls on load
            joined = tab.predict(own, events.join, [], query=f"?game={room}")
            view = view_of(joined)
            if "pg-game-error" in view or "data-step" not in view:  # a room shows its step; a refusal, one line
                self.errors.append(f"visitor {self.index}: joining the game failed: {view[:160]}")
                return
            choice = _update(joined, GAME_CHOICE)
            options = choice.get("choices") if isinstance(choice, dict) and choice.get("interactive") else None
            if not options:
                return  # revealed already: nothing to guess
            time.sleep(rng.uniform(0.5, 1.5) * self.think / 4)  # reading the options
            out = tab.predict(own, events.guess, [options[rng.randrange(len(options))][1], f"s{self.index}", None,
                                                  "en"], query=f"?game={room}")
        view = view_of(out)
        if "pg-game-error" in view and self.day.board.now()[1] == moves:  # refused while the round still stood
            self.errors.append(f"visitor {self.index}: a guess failed: {view[:160]}")


@dataclass
class ClassDay:
    """The students, the teacher's game rounds and the shared link with branches (`loadtest_page.run`'s `day`)."""

    args: argparse.Namespace
    page: Page | None = None
    events: ClassPage | None = None
    board: Board = field(default_factory=Board)
    long_tokens: list[int] = field(default_factory=list)
    link_query: str = ""
    link_reference: list[int] | None = None
    errors: list[str] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def visitors(self, page: Page) -> list[Visitor]:
        a = self.args
        self.page, self.events = page, ClassPage.read(page.url)
        self.long_tokens = [int(n) for n in a.long_tokens.split(",")]
        return [Student(page, i, a.model, a.other_model, a.max_new_tokens, think=a.think_seconds, day=self,
                        address=address_of(i)) for i in range(a.clients)]

    # --- the shared link with branches ------------------------------------------------------------------------

    def link_tab(self, student: Visitor | None = None) -> Visitor:
        """A fresh tab of the link's run (student 0's prompt and seed), at `student`'s address (else the school's)."""
        address = student.address if student is not None else SCHOOL
        return Visitor(self.page, 0, self.args.model, self.args.other_model, self.args.max_new_tokens, address=address)

    def references(self) -> None:
        """The link: student 0's run and `BRANCHES` branches off it; its solo replay, before the class arrives."""
        from playground.app.settings import format_branches, to_query

        tab = self.link_tab()
        with httpx.Client(headers=tab.headers()) as client:
            tab.open(client)
            ids = tab.generate(client) or []
        if len(ids) < 2 * BRANCHES + 4:
            raise SystemExit(f"the link's run is {len(ids)} tokens: too short for {BRANCHES} branches")
        branches = [(2 * k + 2, [ids[2 * k + 5]]) for k in range(BRANCHES)]  # a step, another token of the run
        self.link_query = to_query(tab.settings(branches=format_branches(branches)))
        self.link_reference = self.replay(tab)
        if self.link_reference is None:
            raise SystemExit(f"the link did not replay alone: {tab.errors[:2]}")

    def replay(self, tab: Visitor) -> list[int] | None:
        """Open the link in `tab` (a fresh session): page load, the link's model, its runs; the last run's tokens."""
        with httpx.Client(headers=tab.headers()) as client:
            tab.predict(client, self.page.opened, [], query=self.link_query)
            tab.follow(client, tab.join(client, self.events.link_load, [self.args.model, "float32", "en"]))
            settings = tab.settings()  # the widgets as the link set them (its branches reach the run on their own)
            out = tab.follow(client, tab.join(client, self.events.link_run, [time.time() * 1000, *tab.values()]))
        live = (out.get("output") or [None])[0]
        state = (live.get("status") or {}).get("state") if isinstance(live, dict) else None
        if not out["success"] or state != "done":
            tab.errors.append(f"the link's replay ended {state}: {out.get('error')} ({settings.prompt!r})")
            return None
        return [int(p[1]) for p in out["path"]]

    def open_link(self, student: Visitor) -> None:
        tab = self.link_tab(student)
        ids = self.replay(tab)
        student.errors += [f"visitor {student.index}: {e}" for e in tab.errors]
        if ids is not None and ids != self.link_reference:
            student.crosstalk += 1
            student.errors.append(f"visitor {student.index}: the link's last branch differs from its solo replay")

    # --- the teacher --------------------------------------------------------------------------------------------

    def teach(self, until: float, rng: random.Random) -> None:
        """Game rounds until `until`, from the school's address, in a tab whose heartbeat stays connected."""
        teacher = Visitor(self.page, self.args.clients, self.args.model, self.args.other_model,
                          self.args.max_new_tokens, address=SCHOOL)
        with httpx.Client(headers=teacher.headers()) as client, heartbeat(self.page.url, teacher.session,
                                                                          teacher.headers()):
            teacher.open(client)
            while time.perf_counter() < until:
                self.count("game round")
                try:
                    self.game_round(teacher, client, until, rng)
                except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
                    self.errors.append(f"teacher: {type(exc).__name__}: {exc}")
                pause(rng.uniform(1, 2) * self.args.think_seconds, until)
        self.errors += teacher.errors

    def game_round(self, teacher: Visitor, client: httpx.Client, until: float, rng: random.Random) -> None:
        if teacher.generate(client, mode="greedy") is None:  # the run on screen the game is made of
            return
        started = teacher.predict(client, self.events.start, [0, self.page.url, "en"])
        room = room_of(started)
        if room is None or "pg-game-error" in view_of(started):
            self.errors.append(f"teacher: Start opened no room: {view_of(started)[:160]}")
            return
        self.board.move(room)
        for move in ("reveal", "next", "reveal"):
            pause(rng.uniform(2, 4) * max(self.args.think_seconds, 1.0), until)  # the students guess meanwhile
            self.board.move()
            out = teacher.predict(client, getattr(self.events, move), [None, "en"])
            if "pg-game-error" in view_of(out) or "data-step" not in view_of(out):
                self.errors.append(f"teacher: {move} failed: {view_of(out)[:160]}")

    def count(self, action: str) -> None:
        with self.lock:
            self.actions[action] = self.actions.get(action, 0) + 1


def address_of(index: int) -> str:
    """Student `index`'s address: the school's, or (every `HOME_EVERY`-th) one of its own."""
    return client_headers(index)["X-Forwarded-For"] if index % HOME_EVERY == HOME_EVERY - 1 else SCHOOL


def pause(seconds: float, until: float) -> None:
    time.sleep(max(0.0, min(seconds, until - time.perf_counter())))


# --- the checks and the table ----------------------------------------------------------------------------------

PARTS = (("models", "model_bytes"), ("precision copies", "copy_bytes"), ("runs' records", "run_bytes"),
         ("runs' recorded arrays", "capture_bytes"), ("Gradio's tab states", "tab_state_bytes"),
         ("captured steps", "step_bytes"), ("prefix blocks", "prefix_bytes"),
         ("live screens kept", "live_value_bytes"), ("running requests' KV pools", "pool_bytes"),
         ("tokenizers' token texts", "token_text_bytes"))
# glibc's account of the whole process (not counted: it says what the rest of RSS is made of)
ALLOCATOR = (("malloc: allocated, not freed", "heap_in_use"), ("malloc: freed, kept by the allocator", "heap_free_kept"),
             ("malloc: mmapped blocks", "heap_mmapped"))


def held_breaches(held: dict[str, int]) -> list[str]:
    """The budgets a holdings line is over: the runs' (records and arrays, `Sessions.enforce_memory`'s server
    budget), Gradio's tab states (`TAB_CAPACITY`) and the captured steps (`MAX_STEPS` a model)."""
    from playground.app.session import SERVER_KEPT_BYTES
    from playground.generation.captured import MAX_STEPS
    from playground.ui import TAB_CAPACITY

    out = []
    runs = held["run_bytes"] + held["capture_bytes"]
    if runs > SERVER_KEPT_BYTES:
        out.append(f"runs keep {mib(runs)}: over the server's {mib(SERVER_KEPT_BYTES)}")
    if held["tab_states"] > TAB_CAPACITY:
        out.append(f"Gradio keeps {held['tab_states']} tabs' state: over {TAB_CAPACITY}")
    if held["steps"] > MAX_STEPS * max(1, held["models"]):
        out.append(f"{held['steps']} captured steps: over {MAX_STEPS} a model")
    return out


def uncounted(r: dict[str, Any], when: str) -> int:
    return r[f"rss_{when}"] - held_total(r.get(f"held_{when}"))


def class_verdict(r: dict[str, Any]) -> list[str]:
    """The page's targets (`loadtest_page.verdict`: errors, cross-talk, the uncounted memory within 110 %, first
    frames) and the counted part within its budgets at every holdings line."""
    missed = verdict(r)
    lines = [r.get("held_before"), *(h for _, h in r.get("held_during", [])), r.get("held_after")]
    if not r.get("held_before") or not r.get("held_after"):
        missed.append("FAIL: the server did not say what it keeps (no holdings line)")
    for held in filter(None, lines):
        missed += [f"FAIL: {b}" for b in held_breaches(held)]
    return list(dict.fromkeys(missed))


def class_table(r: dict[str, Any], failed: list[str]) -> str:
    """Markdown for docs/serving.md: the day in one row, then the counted part by part."""
    during = [h for _, h in r.get("held_during", [])]
    before, after = r.get("held_before") or {}, r.get("held_after") or {}
    rest_before, rest_after = uncounted(r, "before"), uncounted(r, "after")
    growth = 100 * (rest_after / rest_before - 1) if rest_before else float("nan")
    errors = len(r["errors"]) - r["crosstalk"]
    rows = [
        "| students (addresses) | minutes | actions | errors | cross-talk | load avg before / peak / after "
        "| RSS before / peak / after | not counted before → after | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {r['clients']} ({r['addresses']}) | {r['seconds'] / 60:.0f} | {sum(r['actions'].values())} | {errors} | "
        f"{r['crosstalk']} | {r['load_before']:.1f} / {r['load_peak']:.1f} / {r['load_after']:.1f} | "
        f"{mib(r['rss_before'])} / {mib(r['rss_peak'])} / {mib(r['rss_after'])} | {mib(rest_before)} → "
        f"{mib(rest_after)} ({growth:+.1f} %) | {'FAIL' if failed else 'PASS'} |",
        "",
        "| counted part | before | peak | after |",
        "|---|---|---|---|",
    ]
    for name, key in PARTS + ALLOCATOR:
        peak = max([h.get(key, 0) for h in during + [before, after] if h] or [0])
        rows.append(f"| {name} | {mib(before.get(key, 0))} | {mib(peak)} | {mib(after.get(key, 0))} |")
    rows += ["", f"Actions: {', '.join(f'{k} {n}' for k, n in sorted(r['actions'].items()))}. "
             f"Before: the idle server after {r['warmup_seconds']:.0f} s of the same class; after: "
             f"{r.get('idle_seconds', 12):.0f} s after the class left. Load: the machine's 1-minute average."]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """`loadtest --page --class ...` (and `python -m playground.tools.loadtest_class ...`): the page load test's
    flags with the class's own defaults, each still set by its flag."""
    parser = arguments()
    add_arguments(parser)
    parser.set_defaults(**DEFAULTS)
    return soak(parser.parse_args(sys.argv[1:] if argv is None else argv))


def soak(args: argparse.Namespace) -> int:
    """The class's day with `args` (`loadtest_page.main`'s, the class's defaults in)."""
    day = ClassDay(args)
    results = run(args, day)
    results["addresses"] = len({address_of(i) for i in range(args.clients)})
    failed = class_verdict(results)
    print(class_table(results, failed))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print("\n".join(results["errors"][:20]))
    print("\n".join(failed) if failed else "PASS: every target met")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
