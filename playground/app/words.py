"""Every word the page shows, in English and 中文, with the seeds' terminology. No Gradio here.

The words themselves live in the locale files (`playground/locales/en.json`, `zh.json`, table "page"),
which a translator edits without touching code. `t(key, lang, **values)` formats one string;
`LIVE_KEYS` names the part the live screen's own script uses (sent to the browser once, with both
languages). Chinese follows the tutorials the app is built from: 注意力, 多头注意力, 交叉注意力,
位置编码, KV 缓存, 预填充/解码 (Prefill/Decode), 贪心搜索, 束搜索, 采样, 温度.
"""

from __future__ import annotations

from playground import locales

LANGUAGES = (("English", "en"), ("中文", "zh"))

_PAGE = locales.section("page")
# key: (English, 中文), every word of the page (the causal lab's included)
STRINGS: dict[str, tuple[str, str]] = {key: (en, _PAGE["zh"][key]) for key, en in _PAGE["en"].items()}

# The live screen's own strings (its script formats {placeholders}).
LIVE_KEYS = (
    "status_ready", "status_waiting", "status_waiting_for", "status_running", "status_done", "status_stopped",
    "status_error", "status_running_one", "status_starting", "hide_system",
    "status_done_one", "status_stopped_one", "status_seed", "reason_eos", "reason_length",
    "reason_stop_string", "rate", "legend", "legend_low", "legend_high", "legend_hint", "step_of", "following",
    "back_to_live", "chose", "forced_token", "cand_title", "cand_hint", "cand_token", "stage_raw",
    "stage_repetition_penalty", "stage_temperature", "stage_top_k", "stage_top_p", "stage_min_p", "stage_forced_bos",
    "stage_forced_eos", "removed_by", "branch_here", "type_token", "continue", "att_title", "att_hint", "att_layer",
    "att_head", "att_mean", "att_max", "att_group", "att_scale", "att_linear", "att_log", "att_sink", "att_self",
    "att_cross", "att_off", "att_loading", "att_query", "kv_title", "kv_hint", "kv_symbols", "kv_used", "kv_mha",
    "kv_cross", "kv_off", "kv_at_step", "beams_title", "beam_finished", "branches_title", "run_label", "branch_label",
    "prompt_label", "source_label", "queued_at", "no_tokens", "cand_none", "live_byte_token",
)


def t(key: str, lang: str = "en", **values: object) -> str:
    """The string for `key` in `lang` ("en" or "zh"), formatted with `values`."""
    en, zh = STRINGS[key]
    text = zh if lang == "zh" else en
    return text.format(**values) if values else text


def live_strings() -> dict[str, dict[str, str]]:
    """{"en": {...}, "zh": {...}} for the live screen's script."""
    return {lang: {k: STRINGS[k][i] for k in LIVE_KEYS} for i, lang in enumerate(("en", "zh"))}


def language(code: object) -> str:
    return "zh" if isinstance(code, str) and code.lower().startswith("zh") else "en"


def browser_language(accept_language: str | None) -> str:
    """The page's language for a browser's Accept-Language header ("zh-CN,zh;q=0.9,en;q=0.8"): the
    most preferred of the languages we have (中文 for any zh-*, English otherwise and by default).
    Used only when the link names no `lang`."""
    ranked = []
    for order, part in enumerate((accept_language or "").split(",")):
        code, _, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        code = code.strip().lower()
        if code and q > 0 and (code.startswith("zh") or code.startswith("en")):
            ranked.append((-q, order, "zh" if code.startswith("zh") else "en"))
    return min(ranked)[2] if ranked else "en"
