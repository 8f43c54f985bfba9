"""Event handlers: thin adapters between Gradio widgets, the engine and the figure builders.

Every handler takes widget values and the session's state dict and returns widget values; the
maths lives in `playground.generation`, `playground.viz` and `playground.ui.arrays`. Errors a
person can fix become one line: in the status under the model picker for loads and uploads, one
`gr.Error` message elsewhere; anything else is logged with its traceback on the server and shown as
one line, and the app keeps serving.
"""

from __future__ import annotations

import functools
import html
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from typing import Any

import gradio as gr
import numpy as np

from playground import viz
from playground.checkpoints.limits import Limits
from playground.errors import PlaygroundError
from playground.generation import full_attention, stepper_class
from playground.ui import arrays, views
from playground.ui.catalog import HUB_PREFIX, Catalog
from playground.ui.registry import ModelRegistry
from playground.ui.settings import FIELDS, UISettings, from_query, from_widgets, generation_kwargs, to_query

log = logging.getLogger("playground.ui")

FRAME_SECONDS = 0.1  # stream at most ~10 UI updates per second, however fast tokens arrive
ATTENTION_KINDS = {"decoder": ["self"], "seq2seq": ["cross", "self", "encoder"]}
ATTENTION_KIND_LABELS = {"self": "decoder self-attention", "cross": "cross-attention (decoder → source)",
                         "encoder": "encoder self-attention"}
VIEWS = ["single head", "mean of heads", "max of heads", "mean per KV group"]
EXAMPLES = {"decoder": "The Python interpreter", "seq2seq": "March 5, 2021"}


def one_line(exc: Exception, where: str = "") -> str:
    """The message a person sees for an exception: its first line; unexpected ones are logged in full."""
    if isinstance(exc, gr.Error):
        return str(exc.message).splitlines()[0] if exc.message else "error"
    if isinstance(exc, (PlaygroundError, ValueError)):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log.error("unexpected error%s", f" in {where}" if where else "", exc_info=exc)
    return (f"Something went wrong ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}). "
            "The app is still running; try again or pick another model.")


def friendly(fn: Callable) -> Callable:
    """Turn exceptions into one readable gr.Error; log unexpected ones with their traceback."""

    def convert(exc: Exception) -> gr.Error:
        if isinstance(exc, gr.Error):
            return exc
        return gr.Error(one_line(exc, fn.__name__), print_exception=False)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen_wrapper(*args, **kwargs):
            try:
                yield from fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the UI must keep serving
                raise convert(exc) from None
        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise convert(exc) from None
    return wrapper


def new_session() -> dict[str, Any]:
    return {"model": None, "dtype": "float32", "run": None}


class Handlers:
    """Handlers bound to one app's catalog and model registry (no module-level state)."""

    def __init__(self, catalog: Catalog, registry: ModelRegistry, limits: Limits | None = None) -> None:
        self.catalog = catalog
        self.registry = registry
        self.limits = limits or Limits.default()
        self._stops: dict[str, threading.Event] = {}
        self._live: dict[str, int] = {}  # session -> tokens streamed so far (for the Stop message)
        self._lock = threading.Lock()

    # --- models ----------------------------------------------------------------------------------

    def model_for(self, name: str, dtype: str):
        return self.registry.get(self.catalog.resolve(name), dtype)

    def dropdown_update(self, value: str | None = None) -> dict:
        choices = [(e.label, e.name) for e in self.catalog.entries()]
        return gr.update(choices=choices, value=value if value is not None else self.catalog.default_name())

    # Loading never raises into Gradio: a failure is one line in the status under the model picker
    # (no "Error" badges on the components), the previous model stays selected and in use.
    # Outputs, in order: model dropdown, card, status, session, prompt, chat toggle, attention kind.

    def load(self, name: str, dtype: str, session: dict, progress=gr.Progress()):
        """Load (or fetch the shared copy of) a model; show its card and adapt the inputs to its kind."""
        progress(0.1, desc=f"loading {name}")
        try:
            lm = self.model_for(name, dtype)
        except Exception as exc:  # noqa: BLE001 - the message goes to the status line
            return self._load_failed(f"Could not load **{name or 'a model'}**", exc, session)
        progress(1.0, desc="ready")
        return self._loaded(lm, name, dtype, session, gr.skip())

    def upload(self, files: list[str] | str | None, dtype: str, session: dict):
        """Copy an upload into its own folder and load it; on failure delete it and say why."""
        if not files:
            return self._load_failed("Nothing uploaded", PlaygroundError(
                "choose a .safetensors file (or a checkpoint folder's files)"), session)
        files = [files] if isinstance(files, str) else list(files)
        try:
            name = self.catalog.save_upload(files, self.limits.max_file_bytes)
        except Exception as exc:  # noqa: BLE001
            return self._load_failed("Upload refused", exc, session)
        try:
            lm = self.model_for(name, dtype)
        except Exception as exc:  # noqa: BLE001
            self.catalog.discard_upload(name)
            return self._load_failed("Upload refused", exc, session)
        return self._loaded(lm, name, dtype, session, self.dropdown_update(name), verb="Uploaded and loaded")

    def load_hub(self, repo_id: str, dtype: str, session: dict, progress=gr.Progress()):
        """Download a Hub repo's safetensors checkpoint (online only) and load it like any other."""
        from playground.checkpoints.hub import download_checkpoint, validate_repo_id

        try:
            rid = validate_repo_id(repo_id)
            progress(0.1, desc=f"downloading {rid}")
            download_checkpoint(rid, self.catalog.hub_dir, max_bytes=self.limits.max_file_bytes)
            name = HUB_PREFIX + rid
            lm = self.model_for(name, dtype)
        except Exception as exc:  # noqa: BLE001
            return self._load_failed("Hub download failed", exc, session)
        return self._loaded(lm, name, dtype, session, self.dropdown_update(name), verb="Downloaded and loaded")

    def _loaded(self, lm, name: str, dtype: str, session: dict, dropdown, verb: str = "Loaded") -> tuple:
        session = {**(session or new_session()), "model": name, "dtype": dtype, "run": None}
        kind = lm.kind
        kinds = ATTENTION_KINDS[kind]
        is_seq2seq = kind == "seq2seq"
        status = f"**{verb}** **{name}** ({'encoder-decoder' if is_seq2seq else 'decoder-only'}, {dtype})."
        return (
            dropdown,
            views.model_card(lm.info(), name),
            status,
            session,
            gr.update(label="Source text (the encoder reads this)" if is_seq2seq else "Prompt",
                      placeholder=EXAMPLES[kind]),
            gr.update(visible=lm.chat_template_available, value=False if not lm.chat_template_available else None),
            gr.update(choices=[(ATTENTION_KIND_LABELS[k], k) for k in kinds], value=kinds[0]),
        )

    def _load_failed(self, what: str, exc: Exception, session: dict) -> tuple:
        """Status line with the reason; the dropdown goes back to the model still in use."""
        previous = (session or {}).get("model")
        keep = f" Still using **{previous}**." if previous else ""
        status = f"**{what}:** {html.escape(one_line(exc, 'load').rstrip('.'))}.{keep}"
        dropdown = self.dropdown_update(previous) if previous else gr.skip()
        return (dropdown, gr.skip(), status, gr.skip(), gr.skip(), gr.skip(), gr.skip())

    # --- query parameters and links -------------------------------------------------------------

    def settings_from_request(self, request: gr.Request | None) -> tuple[UISettings, list[str]]:
        params = dict(request.query_params) if request is not None else {}
        base = UISettings(model=self.catalog.default_name() or "")
        settings, notes = from_query(params, base)
        if settings.model not in self.catalog.names():
            notes.append(f"model '{settings.model}' from the link is not available here; using {base.model}")
            settings.model = base.model
        if not settings.prompt:
            settings.prompt = EXAMPLES["seq2seq" if "seq2seq" in settings.model else "decoder"]
        return settings, notes

    def on_page_load(self, request: gr.Request):
        """Fill every widget from the URL's query parameters (defaults otherwise)."""
        settings, notes = self.settings_from_request(request)
        values = [getattr(settings, f) for f in FIELDS]
        values[FIELDS.index("model")] = self.dropdown_update(settings.model)
        return (*values, views.notes_markdown(notes))

    @staticmethod
    def make_link(*values) -> str:
        return to_query(from_widgets(dict(zip(FIELDS, values))))

    # --- generation ------------------------------------------------------------------------------

    def _prepare(self, settings: UISettings):
        from playground.generation import GenerationConfig
        from playground.ui.limits import clamp_settings

        if not settings.prompt.strip():
            raise PlaygroundError("the prompt is empty; type some text to continue (or a date to translate)")
        lm = self.model_for(settings.model, settings.dtype)
        prompt_ids = lm.tokenize(settings.prompt, chat=settings.chat and lm.chat_template_available)
        cfg, notes = clamp_settings(GenerationConfig(**generation_kwargs(settings)), lm, len(prompt_ids))
        if settings.chat and not lm.chat_template_available:
            notes = [*notes, "this checkpoint has no chat template; the prompt was used as plain text"]
        return lm, prompt_ids, cfg, list(notes)

    def _register_stop(self, request: gr.Request | None) -> tuple[str, threading.Event]:
        key = getattr(request, "session_hash", None) or f"anon-{id(request)}"
        stop = threading.Event()
        with self._lock:
            old = self._stops.get(key)
            if old is not None:
                old.set()  # a new run from the same tab ends the previous one
            self._stops[key] = stop
            self._live[key] = 0
        return key, stop

    def _release_stop(self, key: str, stop: threading.Event) -> None:
        with self._lock:
            if self._stops.get(key) is stop:
                del self._stops[key]
                self._live.pop(key, None)

    @friendly
    def generate(self, request: gr.Request, *args) -> Iterator[tuple]:
        """Stream a generation: tokens, status, KV cache and inspector, at most ~10 updates/s.

        args: the settings widgets' values in FIELDS order, then the session state. `request` comes
        first because Gradio injects it by position (it identifies the tab for Stop).
        """
        from playground.generation import generate

        *values, session = args
        settings = from_widgets(dict(zip(FIELDS, values)))
        lm, prompt_ids, cfg, notes = self._prepare(settings)
        key, stop = self._register_stop(request)
        knobs = asdict(cfg)
        prompt_tokens = list(zip(prompt_ids, lm.token_texts(prompt_ids))) if lm.kind == "decoder" else []
        beam = cfg.num_beams > 1
        run = {"model": settings.model, "dtype": settings.dtype, "kind": lm.kind, "prompt_ids": prompt_ids,
               "prompt_tokens": prompt_tokens, "knobs": knobs, "records": [], "attention": None,
               "labels": None, "query": to_query(settings), "notes": notes}
        notes_md = views.notes_markdown(notes)
        stream = generate(lm, prompt_ids if lm.kind == "decoder" else settings.prompt, cfg, stop=stop)
        last_paint = 0.0
        pace = settings.pace_ms / 1000.0
        try:
            for event in stream:
                rec = views.record(event)
                run["records"].append(rec)
                with self._lock:
                    self._live[key] = len(run["records"])
                now = time.monotonic()
                if rec["finished"] or now - last_paint >= FRAME_SECONDS or pace:
                    last_paint = now
                    yield self._frame(run, session, notes_md, beam, final=False)
                if pace and not rec["finished"] and stop.wait(pace):
                    pass  # Stop pressed during the pause: the engine ends at its next step
        finally:
            stream.close()
            self._release_stop(key, stop)
        if not run["records"]:
            raise PlaygroundError("the model produced no tokens; raise max new tokens or change the prompt")
        last = run["records"][-1]
        if not last["finished"]:  # the engine ends without a final event when stopped
            last["finished"], last["finish_reason"] = True, "stopped"
        self._attach_attention(lm, run, settings.attention)
        session = {**(session or new_session()), "model": settings.model, "dtype": settings.dtype, "run": run}
        yield self._frame(run, session, notes_md, beam, final=True)

    def _frame(self, run: dict, session: dict, notes_md: str, beam: bool, final: bool) -> tuple:
        records = run["records"]
        last = records[-1]
        if beam:
            output = '<div class="token-stream beam-text">' + html.escape(last["text"]) + "</div>"
        else:
            output = viz.tokens_html(views.token_items(run["prompt_tokens"], records),
                                     selected=last["step"] if final else None)
        n = len(records)
        reason = last["finish_reason"]
        if final or last["finished"]:
            why = {"eos": "the model emitted end-of-sequence", "length": "max new tokens reached",
                   "stopped": "stopped by you",
                   "stop_string": "a stop string appeared"}.get(reason, str(reason))
            status = (f"**Stopped** after {n} tokens (you pressed Stop)." if reason == "stopped"
                      else f"**Done**: {n} tokens ({why}).")
        else:
            status = f"**Generating…** {n} tokens so far."
        timing = views.timing_markdown(last["timing"], n)
        kv_md, growth = self.cache_outputs(records)
        step_slider = gr.update(maximum=max(1, n - 1), value=n - 1, interactive=final)  # a slider needs min < max
        inspector = self.inspector_outputs(run, n - 1) if final else (gr.skip(),) * 4
        return (output, status, notes_md, timing, kv_md, growth, step_slider, *inspector,
                session if final else gr.skip())

    # --- step inspector --------------------------------------------------------------------------

    def inspector_outputs(self, run: dict | None, step: int):
        """(candidates funnel, beam tree, beam table, caption) for one step of the session's run."""
        if not run or not run["records"]:
            return (viz.candidate_funnel([]), viz.beam_tree([]), viz.beam_table([]),
                    "Generate something first; then pick a step here or click a token.")
        records = run["records"]
        step = int(min(max(0, step), len(records) - 1))
        rec = records[step]
        funnel = viz.candidate_funnel(views.candidate_items(rec, run["knobs"]),
                                      title=f"Step {step}: candidates through the sampling pipeline")
        beams = views.beam_steps(records[: step + 1])
        caption = views.step_caption(rec)
        removed = [c for c in rec["candidates"] if c["removed_by"]]
        if removed:
            caption += f" · {len(removed)} of the top {len(rec['candidates'])} removed by a filter (grey)"
        return funnel, viz.beam_tree(beams), viz.beam_table(beams), caption

    @friendly
    def inspect(self, step: float, session: dict):
        run = (session or {}).get("run")
        step = int(step or 0)
        stream_html = gr.skip()
        if run and run["knobs"].get("num_beams", 1) <= 1:
            stream_html = viz.tokens_html(views.token_items(run["prompt_tokens"], run["records"]), selected=step)
        return (*self.inspector_outputs(run, step), stream_html)

    @staticmethod
    def clicked_step(value: str, maximum: float | None = None):
        """A click on a token (forwarded by page JS as 'step:N') selects that step."""
        try:
            return int(str(value).split(":")[1])
        except (IndexError, ValueError):
            return gr.skip()

    # --- KV cache --------------------------------------------------------------------------------

    @staticmethod
    def cache_outputs(records: list[dict]):
        cache = records[-1]["cache"] if records else {}
        if not cache:
            return "No KV-cache statistics yet.", viz.cache_growth([], [], [], [])
        lines = [
            f"**Tokens cached:** {cache.get('tokens')} of {cache.get('max_tokens', '?')} allocated · "
            f"**used** {viz.format_bytes(cache.get('bytes', 0))} vs **allocated** "
            f"{viz.format_bytes(cache.get('allocated_bytes', 0))}"
            + (f" · **MHA equivalent** {viz.format_bytes(cache['mha_equivalent_bytes'])}"
               if "mha_equivalent_bytes" in cache else ""),
            "",
            viz.kv_formula(cache) if "element_size" in cache else "",
        ]
        per_layer = cache.get("per_layer") or []
        if per_layer:
            shape = per_layer[0].get("k_shape")
            lines += ["", f"**Per layer:** K and V each of shape (B, h_kv, T, d_head) = {tuple(shape)} "
                          f"× {len(per_layer)} layers"]
        cross = cache.get("cross_attention")
        if cross:
            lines += ["", f"**Cross-attention cache** (computed once from the encoder output): "
                          f"{cross.get('layers')} layers · {cross.get('kv_heads')} heads · {cross.get('tokens')} "
                          f"source tokens · {cross.get('head_dim')} dims → {viz.format_bytes(cross.get('bytes', 0))}"]
        steps, used, allocated, mha = views.growth_series(records)
        return "\n".join(lines), viz.cache_growth(steps, used, allocated, mha)

    @friendly
    def rerun_without_cache(self, session: dict):
        """Same request again with and without the cache, back to back; both timings side by side.

        Both are measured afresh: the live run's timings include the streaming view's pacing and
        painting, which would make the comparison unfair."""
        from playground.generation import GenerationConfig, generate_all

        run = (session or {}).get("run")
        if not run:
            raise gr.Error("Generate once first; this reruns that same request without the KV cache.")
        lm = self.model_for(run["model"], run["dtype"])
        prompt = run["prompt_ids"] if lm.kind == "decoder" else lm.detokenize(run["prompt_ids"], skip_special_tokens=True)
        knobs = {**run["knobs"], "capture_attention": False}
        # One token first, so that neither measured run pays for waking the idle thread pool.
        generate_all(lm, prompt, GenerationConfig(**{**knobs, "max_new_tokens": 1}))
        cached = generate_all(lm, prompt, GenerationConfig(**{**knobs, "use_cache": True}))
        without = generate_all(lm, prompt, GenerationConfig(**{**knobs, "use_cache": False}))
        same = list(without.token_ids) == list(cached.token_ids)
        fig = viz.timing_comparison(dict(cached.timing), dict(without.timing))
        verdict = "the same tokens" if same else "different tokens (sampling is only reproducible with a seed)"
        md = (f"Both runs measured just now, back to back. Without the cache every step recomputes keys and "
              f"values for the whole prefix. Both runs produced {verdict}.")
        return fig, md

    # --- attention -------------------------------------------------------------------------------

    def _attach_attention(self, lm, run: dict, wanted: bool) -> None:
        if not wanted:
            run["attention_note"] = "Attention capture is off (turn on “record attention” and generate again)."
            return
        generated = run["records"][-1]["token_ids"]
        total = len(run["prompt_ids"]) + len(generated)
        budget = arrays.attention_budget_tokens(lm)
        if total > min(budget, lm.config.max_positions):
            run["attention_note"] = (f"Attention maps are kept for sequences up to {min(budget, lm.config.max_positions)}"
                                     f" tokens; this one has {total}. Use a shorter prompt or fewer new tokens.")
            return
        run["attention"] = full_attention(lm, run["prompt_ids"], generated)
        src = lm.token_texts(run["prompt_ids"])
        if lm.kind == "seq2seq":
            dec = lm.token_texts(stepper_class(lm.kind).decoder_prefix(lm.config, run["prompt_ids"]) + generated)
            run["labels"] = {"encoder": (src, src), "self": (dec, dec), "cross": (dec, src)}
            run["first_generated_query"] = {"encoder": 0, "self": 0, "cross": 0}
        else:
            toks = lm.token_texts(run["prompt_ids"] + generated)
            run["labels"] = {"self": (toks, toks)}
            run["first_generated_query"] = {"self": max(0, len(run["prompt_ids"]) - 1)}
        run["kv_groups"] = lm.config.n_heads // lm.config.n_kv_heads
        run["attention_note"] = ""

    @friendly
    def attention(self, session: dict, kind: str, layer: float, head: float, view: str, query: float):
        """Heads grid, one head (or an aggregate) large, one query's row, and the per-head summary."""
        run = (session or {}).get("run")
        blank = viz.attention_heatmap(np.zeros((1, 1)), title="Generate something to see attention")
        if not run or run.get("attention") is None:
            note = (run or {}).get("attention_note") or "Generate something first; attention maps appear here."
            return blank, blank, blank, blank, note, gr.skip(), gr.skip(), gr.skip()
        maps = run["attention"]
        kind = kind if kind in maps else next(iter(maps))
        data = maps[kind]  # (L, h, T, S)
        L, h, T, S = data.shape
        layer, head = int(min(max(layer or 0, 0), L - 1)), int(min(max(head or 0, 0), h - 1))
        q_labels, k_labels = run["labels"][kind]
        first_q = run["first_generated_query"][kind]
        n_generated = len(run["records"][-1]["token_ids"])
        if query is None:  # the row that chose the last generated token
            query = first_q + n_generated - 1
        query = int(min(max(query, 0), T - 1))
        groups = run["kv_groups"]
        label = ATTENTION_KIND_LABELS[kind]
        grid = viz.attention_heads_grid(data[layer], q_labels, k_labels, title=f"{label}: all heads of layer {layer}",
                                        kv_groups=groups if groups > 1 else 1)
        if view == "mean of heads":
            big, what = viz.aggregate_heads(data[layer], "mean"), "mean over heads"
        elif view == "max of heads":
            big, what = viz.aggregate_heads(data[layer], "max"), "max over heads"
        elif view == "mean per KV group" and groups > 1:
            big, what = viz.group_by_kv_head(data[layer], groups)[head // groups], f"KV group {head // groups}"
        else:
            big, what = data[layer, head], f"head {head}"
        heat = viz.attention_heatmap(big, q_labels, k_labels, title=f"{label}, layer {layer}, {what}")
        row_title = f"Row of query {query} ({html.escape(repr(q_labels[query]))}), layer {layer}, {what}"
        if kind != "encoder" and first_q <= query < first_q + n_generated:
            row_title += f": while choosing generated token {query - first_q}"
        elif kind != "encoder" and query >= first_q + n_generated:
            row_title += ": the last token (it chose nothing; generation had ended)"
        row = viz.attention_row(big[query], k_labels, title=row_title)
        summary = viz.head_summary(viz.attention_entropy(data), viz.mean_attention_distance(data),
                                   title=f"{label}: entropy and mean distance per layer × head")
        note = (f"{L} layers × {h} heads; {T} queries × {S} keys."
                + (f" GQA: {groups} query heads share each KV head (rows of the grid)." if groups > 1 else "")
                + (" Mean distance compares positions in two different sequences for cross-attention."
                   if kind == "cross" else ""))
        return (grid, heat, row, summary, note, gr.update(maximum=max(1, L - 1)), gr.update(maximum=max(1, h - 1)),
                gr.update(maximum=max(1, T - 1), value=query))

    def attention_latest(self, session: dict, kind: str, layer: float, head: float, view: str):
        """After a generation: show the row of the last token."""
        return self.attention(session, kind, layer, head, view, None)

    # --- positional encodings --------------------------------------------------------------------

    def positional_for_session(self, session: dict, length: float, compare_base: float, pair: float):
        """The PE panel for the model this tab has loaded (nothing before the first successful load)."""
        session = session or {}
        if not session.get("model"):
            return (gr.skip(),) * 6
        return self.positional(session["model"], session.get("dtype", "float32"), length, compare_base, pair)

    @friendly
    def positional(self, name: str, dtype: str, length: float, compare_base: float, pair: float):
        lm = self.model_for(name, dtype)
        data = arrays.positional_data(lm, int(length or 64), float(compare_base or 1000.0))
        scheme = data["scheme"]
        hidden = gr.update(visible=False)
        def show(fig):
            return gr.update(value=fig, visible=True)
        if scheme == "sinusoidal":
            t, c = data["table"], data["compare_table"]
            md = (f"**Sinusoidal** (fixed, not learned): PE(pos, 2i) = sin(pos / {data['base']:g}^(2i/d)), "
                  f"PE(pos, 2i+1) = cos(…), d = {t.shape[1]}, added to the embeddings. Early dimensions "
                  f"oscillate fast, late ones slowly; the dot product of two positions depends mainly on their "
                  f"distance. Below: base {data['base']:g} vs {data['compare_base']:g}.")
            return (md, show(viz.pe_heatmap(t)), show(viz.pe_waves(t)), show(viz.pe_similarity(t)),
                    show(viz.pe_base_comparison(t, c, f"base {data['base']:g}", f"base {data['compare_base']:g}")),
                    gr.update(visible=False))
        if scheme == "rope":
            f = data["inv_freq"]
            pair = int(min(max(pair or 0, 0), len(f) - 1))
            distances = np.arange(0, min(data["context"], 1024))
            md = (f"**RoPE**: queries and keys are rotated, pair by pair, by angle position × θᵢ with "
                  f"θᵢ = base^(−2i/d), d_head = {data['head_dim']} ({len(f)} pairs). The score q·k then depends "
                  f"only on the relative distance. Nothing is added to the embeddings.")
            return (md, show(viz.rope_frequencies(f, context_length=data["context"])),
                    show(viz.rope_rotation(f, pair, data["length"])),
                    show(viz.rope_relative_scores(viz.rope_score_curve(f, distances), distances,
                                                  title="q·k for q = k = 1 vs relative distance (long-term decay)")),
                    hidden, gr.update(visible=True, maximum=max(1, len(f) - 1)))
        if scheme == "learned":
            t = data["table"]
            md = (f"**Learned absolute positions**: the model's own table ({t.shape[0]} of "
                  f"{lm.config.max_positions} positions × {t.shape[1]} dims), added to the embeddings.")
            return (md, show(viz.learned_table_heatmap(t)), show(viz.cosine_similarity_matrix(t)), hidden, hidden,
                    gr.update(visible=False))
        if scheme == "relative":
            md = (f"**Relative position bias** (T5): a learned scalar per head and distance bucket is added to "
                  f"the attention logits (`{data['table_name']}`); no position is added to the embeddings.")
            return (md, show(viz.relative_bias_plot(data["bias"], data["distances"])), hidden, hidden, hidden,
                    gr.update(visible=False))
        md = data.get("missing") or "This model uses no positional encoding."
        return (md, hidden, hidden, hidden, hidden, gr.update(visible=False))

    # --- API for scripts (gradio_client) ---------------------------------------------------------

    def generate_text(self, model: str, prompt: str, settings_query: str = "") -> dict:
        """Non-streaming generation for scripts: settings as a link's query string; returns JSON."""
        from urllib.parse import parse_qsl

        from playground.generation import generate_all

        params = dict(parse_qsl(settings_query.lstrip("?"), keep_blank_values=True))
        params.update(model=model, prompt=prompt)
        settings, notes = from_query(params, UISettings())
        try:
            lm, prompt_ids, cfg, clamp_notes = self._prepare(settings)
            result = generate_all(lm, prompt_ids if lm.kind == "decoder" else settings.prompt, cfg)
        except PlaygroundError as exc:
            raise gr.Error(str(exc), print_exception=False) from None
        return {"text": result.text, "token_ids": [int(i) for i in result.token_ids],
                "finish_reason": result.finish_reason, "notes": notes + clamp_notes}

    # --- lifecycle -------------------------------------------------------------------------------

    def stop(self, request: gr.Request | None = None) -> str:
        key = getattr(request, "session_hash", None)
        with self._lock:
            event = self._stops.get(key)
            n = self._live.get(key, 0)
        if event is None:
            return "Nothing is running."
        event.set()
        return f"**Stopped** after {n} tokens."

    def unload(self, request: gr.Request) -> None:
        """The tab closed: end its generation so its memory is returned."""
        key = getattr(request, "session_hash", None)
        with self._lock:
            event = self._stops.pop(key, None)
            self._live.pop(key, None)
        if event is not None:
            event.set()

