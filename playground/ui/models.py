"""Models in the app: which ones a visitor can pick, loading them, and what the page says about them.

Handlers here run when a tab opens, when a model is picked, uploaded or fetched from the Hub. A
failed load is one line in the status under the picker (no error badges elsewhere) and the
previous model stays in use. Choosing a model swaps in its example prompt, its description and
its chat setting (on for checkpoints with a chat template); a link's own values are kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gradio as gr

from playground.app import describe, examples, views
from playground.app.catalog import Catalog
from playground.app.frames import head_choices
from playground.app.notes import error_note, note, render
from playground.app.registry import ModelRegistry
from playground.app.session import Sessions
from playground.app.settings import WIDGETS, UISettings, from_query
from playground.app.uploads import remove_sources
from playground.app.words import browser_language, t
from playground.checkpoints.limits import Limits
from playground.errors import PlaygroundError
from playground.generation import language_codes
from playground.generation.config import GenerationConfig
from playground.generation.speculative import check_draft
from playground.loaded import LoadedModel
from playground.notes import Note
from playground.ui.gradio_internals import request_visitor
from playground.ui.layout import empty_live_value

log = logging.getLogger("playground.ui")
EXAMPLES = {"decoder": "The Python interpreter", "seq2seq": "March 5, 2021"}


def one_line(exc: Exception, lang: str = "en", where: str = "") -> str:
    """The message a person sees for an exception: its first line; unexpected ones are logged in full."""
    if isinstance(exc, gr.Error):
        return str(exc.message).splitlines()[0] if exc.message else "error"
    if isinstance(exc, (PlaygroundError, ValueError)):
        return render(error_note(exc), lang)
    log.error("unexpected error%s", f" in {where}" if where else "", exc_info=exc)
    return t("unexpected", lang, what=type(exc).__name__)


def session_key(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def token_ids_example(lm: LoadedModel) -> str:
    """A prompt of token ids for a model without a tokenizer: its first ids after the start token, if any."""
    start = [] if lm.config.bos_token_id is None else [lm.config.bos_token_id]
    ids = start + [i for i in range(1, 5) if i not in start][:3 - len(start)]
    return ", ".join(str(i) for i in ids if 0 <= i < lm.config.vocab_size)


def loaded_status(lm: LoadedModel, verb: str, name: str, dtype: str, lang: str) -> str:
    """The status line of a loaded model; one without a tokenizer says at once how to prompt it."""
    status = t("loaded", lang, verb=verb, name=describe.inert(name), kind=t(f"kind_{lm.kind}", lang), dtype=dtype)
    if lm.tokenizer is None:
        status += " " + t("no_tokenizer_ids", lang, example=token_ids_example(lm))
    return status


def card_html(lm: LoadedModel, name: str, lang: str) -> str:
    """The model card; the checkpoint's place on the server is never part of it."""
    info = describe.card_info(lm, lang)
    info.pop("path", None)
    return describe.model_card_html(info, name, lang)


# What loading a model updates, by component name (a handler returns only what changes): the layer and head
# sliders, and the choices that follow the model, fit it before any run.
LOAD_SLOTS = ("model", "model_status", "model_about", "prompt", "chat", "target_lang", "card", "live",
              *views.model_choices(None, "en"), *views.model_sliders())


class Models:
    """Loading and describing models for the sessions of one app."""

    def __init__(self, catalog: Catalog, registry: ModelRegistry, sessions: Sessions, limits: Limits | None = None) -> None:
        self.catalog = catalog
        self.registry = registry
        self.sessions = sessions
        self.limits = limits or Limits.default()
        # the visitor (an address, an account) of a tab's session, whose loads are bounded together (Handlers)
        self.visitor_of: Callable[[str], str] = lambda owner: owner
        catalog.uploads.in_use = self.uploads_in_use  # another visitor's upload never evicts one a page has open

    def uploads_in_use(self) -> list:
        """The folders of the uploads and Hub downloads that some tab has loaded now."""
        paths = (self.catalog.stored_path(s.model, s.key) for s in self.sessions.all() if s.model)
        return [p for p in paths if p is not None]

    # --- lookups ---------------------------------------------------------------------------------

    # Every name is resolved for its owner (the tab's session): one visitor's uploads and Hub downloads
    # are invisible to every other visitor, links included.

    def model_for(self, name: str, dtype: str, owner: str | None = None) -> LoadedModel:
        """The loaded model `name` is for `owner`; a load it causes is bounded per visitor (`ModelRegistry.get`)."""
        visitor = self.visitor_of(owner) if owner is not None else None  # loads count per address
        return self.registry.get(self.catalog.resolve(name, owner), dtype, owner=visitor)

    def choices(self, owner: str | None, lang: str = "en") -> list[tuple[str, str]]:
        """The model list as (label, name), its words in `lang`."""
        self.registry.drop_under(self.catalog.uploads.sweep())  # uploads past their time-to-live go first
        return [(e.label, e.name) for e in self.catalog.entries(owner, lang)]

    def drafters(self, owner: str | None, name: str, dtype: str) -> list[str]:
        """The visitor's other models that are loaded now (never loaded here) and share `name`'s vocabulary: the
        second models that can draft for it (speculative decoding)."""
        loaded = set(self.registry.loaded_keys())
        try:
            lm = self.model_for(name, dtype, owner)
        except Exception:  # noqa: BLE001 - no model: no drafter
            return []
        out = []
        for entry in self.catalog.entries(owner, "en"):
            if entry.name == name:
                continue
            try:
                path = self.catalog.resolve(entry.name, owner)
                if self.registry.key(path, dtype) not in loaded:
                    continue
                check_draft(lm, GenerationConfig(draft=self.registry.get(path, dtype)))
            except Exception:  # noqa: BLE001 - another vocabulary, or gone meanwhile: not a drafter
                continue
            out.append(entry.name)
        return out

    def dropdown(self, owner: str | None, value: str | None = None, lang: str = "en") -> dict:
        return gr.update(choices=self.choices(owner, lang),
                         value=value if value is not None else self.catalog.default_name())

    def example(self, name: str, lm: LoadedModel, owner: str | None, lang: str = "en") -> str:
        if lm.tokenizer is None:  # it reads token ids only
            return token_ids_example(lm)
        return examples.in_language(self.catalog.card(name, owner).example_prompt or EXAMPLES[lm.kind], lang)

    def about(self, name: str, lm: LoadedModel, lang: str, owner: str | None) -> str:
        """One line saying what the model is for (escaped: it comes from a file)."""
        card = self.catalog.card(name, owner)
        text = card.describe(lang) or t(
            "describe_generic", lang, family=lm.config.family, kind=t(f"kind_{lm.kind}", lang),
            params=f"{lm.parameter_count:,}")
        return describe.inert(text)

    @staticmethod
    def meta(lm: LoadedModel, name: str) -> dict[str, Any]:
        """The model's shape as the live screen needs it."""
        c = lm.config
        return {"name": name, "kind": lm.kind, "layers": c.n_layers, "heads": c.n_heads, "kv_heads": c.n_kv_heads,
                "head_choices": head_choices(c.n_heads, c.n_kv_heads)}

    def session_model(self, request: gr.Request | None) -> LoadedModel | None:
        """The session's model (None: none loaded, or one that no longer loads): what some choices follow."""
        owner = session_key(request)
        session = self.sessions.get(owner)
        try:
            return self.model_for(session.model, session.dtype, owner) if session.model else None
        except Exception:  # noqa: BLE001 - a model that no longer loads: the choices of none
            return None

    def refresh(self, lang: str, prompt: str, request: gr.Request | None):
        """Status, description, prompt (its label; the example in `lang`, if it holds the example) and card of the
        session's model in `lang`."""
        owner = session_key(request)
        session = self.sessions.get(owner)
        if not session.model:
            return (gr.skip(),) * 4
        try:
            lm = self.model_for(session.model, session.dtype, owner)
        except Exception:  # noqa: BLE001
            return (gr.skip(),) * 4
        status = loaded_status(lm, t("loaded_verb", lang), session.model, session.dtype, lang)
        new = examples.switched(prompt or "", self.example(session.model, lm, owner), lang)
        box = gr.update(label=t("source" if lm.kind == "seq2seq" else "prompt", lang),
                        **({"value": new} if new is not None else {}))
        return (status, self.about(session.model, lm, lang, owner), box, card_html(lm, session.model, lang))

    # --- page load -------------------------------------------------------------------------------

    def settings_from_request(self, request: gr.Request | None) -> tuple[UISettings, list[Note]]:
        params = dict(request.query_params) if request is not None else {}
        # A link that names no language opens in the browser's own (a zh-CN browser gets 中文).
        headers = getattr(request, "headers", None) or {}  # a script's or a test's request may carry none
        lang = browser_language(headers.get("accept-language"))
        base = UISettings(model=self.catalog.default_name() or "", dtype=self.registry.default_dtype, lang=lang)
        settings, notes = from_query(params, base)
        owner = session_key(request)
        if settings.model not in self.catalog.names(owner):
            try:  # say why, in one line that names nothing of anyone else's
                self.catalog.resolve(settings.model, owner)
                why = note("model_not_here")
            except (PlaygroundError, ValueError) as exc:
                why = error_note(exc)
            except Exception as exc:  # noqa: BLE001 - whatever the name is, the link's other values still apply
                why = one_line(exc, settings.lang, "link")
            notes.append(note("link_model", why=why, model=base.model))
            settings.model = base.model
        notes += [note("model_not_offered", name=name, why=why) for name, why in self.catalog.unavailable().items()]
        return settings, notes

    def page_load(self, request: gr.Request, fields: tuple[str, ...] = ()):
        """Every widget of the left column from the URL's query parameters (defaults otherwise), then the
        experiments' widgets that edit the run settings `fields` (a link's experiment is on the page), then the
        notes."""
        settings, notes = self.settings_from_request(request)
        session = self.sessions.get(session_key(request))
        session.lang = settings.lang
        session.opened_from(dict(request.query_params) if request is not None else {}, notes, settings)
        values = [getattr(settings, f) for f in (*WIDGETS, *fields)]
        values[WIDGETS.index("model")] = self.dropdown(session_key(request), settings.model, settings.lang)
        return (*values, describe.notes_markdown(notes, settings.lang))

    # --- loading ---------------------------------------------------------------------------------
    # Each returns updates by component name (`LOAD_SLOTS`), only of what changes; the wiring keys them by
    # component.

    def load_from_link(self, name: str, dtype: str, lang: str, request: gr.Request):
        """The page's first load: the link's prompt and chat setting are kept; a link that does not name
        `chat` gets the model's default (on for a model with a chat template)."""
        session = self.sessions.get(session_key(request))
        return self._load(name, dtype, lang, request, swap_prompt=not session.link_names("prompt"),
                          set_chat=not session.link_names("chat"))

    def load(self, name: str, dtype: str, lang: str, request: gr.Request):
        """A model picked by the visitor: its example prompt and chat default come with it."""
        return self._load(name, dtype, lang, request, swap_prompt=True, set_chat=True)

    def load_dtype(self, name: str, dtype: str, lang: str, request: gr.Request):
        """The same model in another dtype: nothing else changes."""
        return self._load(name, dtype, lang, request, swap_prompt=False, set_chat=False)

    def _load(self, name: str, dtype: str, lang: str, request: gr.Request | None, *, swap_prompt: bool, set_chat: bool):
        owner = session_key(request)
        session = self.sessions.get(owner)
        try:
            lm = self.model_for(name, dtype, owner)
        except Exception as exc:  # noqa: BLE001 - the message goes to the status line
            return self._failed(t("could_not_load", lang, name=describe.inert(str(name or "?"))), exc, session, lang,
                                owner)
        return self._loaded(lm, name, dtype, session, lang, None, owner, swap_prompt=swap_prompt, set_chat=set_chat)

    def upload(self, files: list[str] | str | None, dtype: str, lang: str, request: gr.Request):
        """Store an upload in this visitor's own folder and load it; on failure delete it and say why."""
        owner = session_key(request)
        session = self.sessions.get(owner)
        if not files:
            return self._failed(t("nothing_uploaded", lang), PlaygroundError(
                "choose a .safetensors file (or a checkpoint folder's files)"), session, lang, owner)
        files = [files] if isinstance(files, str) else list(files)
        try:
            # each tab's uploads stay its own; their bytes count for its visitor (an address, an account) as well
            name = self.catalog.save_upload(files, self.limits.max_file_bytes, owner, request_visitor(request))
        except Exception as exc:  # noqa: BLE001
            remove_sources(files)  # refused files go at once, Gradio's copies included
            return self._failed(t("upload_refused", lang), exc, session, lang, owner)
        try:
            lm = self.model_for(name, dtype, owner)
        except Exception as exc:  # noqa: BLE001
            self.registry.drop_under([p for p in [self.catalog.discard_upload(name, owner)] if p is not None])
            remove_sources(files)
            return self._failed(t("upload_refused", lang), exc, session, lang, owner)
        out = self._loaded(lm, name, dtype, session, lang, self.dropdown(owner, name, lang), owner, verb=t("uploaded",
                                                                                                           lang))
        evicted = self.catalog.uploads.evicted_since(owner)
        if evicted:  # say what went, so that nobody wonders where it is
            out["model_status"] += " " + describe.inert(t("upload_evicted", lang, names=", ".join(evicted)))
        return out

    def load_hub(self, repo_id: str, dtype: str, lang: str, request: gr.Request):
        """Download a Hub repo's safetensors checkpoint (online only) and load it like any other."""
        owner = session_key(request)
        session = self.sessions.get(owner)
        try:
            name = self.catalog.download_hub(repo_id, owner, self.limits.max_file_bytes, request_visitor(request))
            lm = self.model_for(name, dtype, owner)
        except Exception as exc:  # noqa: BLE001
            return self._failed(t("hub_failed", lang), exc, session, lang, owner)
        return self._loaded(lm, name, dtype, session, lang, self.dropdown(owner, name, lang), owner,
                            verb=t("downloaded", lang))

    def _loaded(self, lm: LoadedModel, name: str, dtype: str, session, lang: str, dropdown, owner: str | None, *,
                verb: str | None = None, swap_prompt: bool = True, set_chat: bool = True) -> dict[str, Any]:
        changed = session.model != name
        current = session.current
        # Generate pressed while this model loaded: that run is already the new model's, and stays
        started = current is not None and (current.settings.model, current.settings.dtype) == (name, dtype)
        if (changed or session.dtype != dtype) and not started:  # the previous model's run would stream on
            session.stop_all()
        if changed and not started:  # nothing of the previous model's runs stays on screen (they stay in the history)
            session.leave()
        session.model, session.dtype = name, dtype
        kind = lm.kind
        chat_ok = lm.chat_template_available
        status = loaded_status(lm, verb or t("loaded_verb", lang), name, dtype, lang)
        prompt = gr.update(label=t("source" if kind == "seq2seq" else "prompt", lang),
                           **({"value": self.example(name, lm, owner, lang)} if swap_prompt and changed and not started
                              else {}))
        chat = gr.update(visible=chat_ok, **({"value": chat_ok} if set_chat else {}))
        if not chat_ok:
            chat = gr.update(visible=False, value=False)
        codes = list(language_codes(lm.tokenizer))
        target = gr.update(visible=bool(codes), choices=[("", "")] + [(c, c) for c in codes],
                           **({"value": ""} if changed and set_chat else {}))
        out = {"model_status": status, "model_about": self.about(name, lm, lang, owner), "prompt": prompt, "chat": chat,
               "target_lang": target, "card": card_html(lm, name, lang)}
        # the choices that follow the model (All heads' kinds and views), back at their first
        out.update({name: gr.update(choices=c, value=c[0][1]) for name, c in views.model_choices(lm, lang).items()})
        out.update({name: gr.update(maximum=top) for name, top in views.slider_tops(lm.config).items()})
        if dropdown is not None:
            out["model"] = dropdown
        if changed and not started:  # the previous model's run leaves the live screen
            out["live"] = {**empty_live_value(lang), "left_for": name}
        return out

    def _failed(self, what: str, exc: Exception, session, lang: str, owner: str | None) -> dict[str, Any]:
        """Status line with the reason; the dropdown goes back to the model still in use."""
        previous = session.model
        keep = t("still_using", lang, name=describe.inert(previous)) if previous else ""
        why = describe.inert(one_line(exc, lang, "load").rstrip("."))
        status = t("load_failed", lang, what=what, why=why, keep=keep)
        out: dict[str, Any] = {"model_status": status}
        if previous:
            out["model"] = self.dropdown(owner, previous, lang)
        return out
