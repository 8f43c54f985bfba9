"""Every word the page shows, in English and 中文, with the seeds' terminology. No Gradio here.

The words themselves live in the locale files (`playground/locales/en.json`, `zh.json`, table "page"),
which a translator edits without touching code. `t(key, lang, **values)` formats one string;
`LIVE_KEYS` names the part the live screen's own script uses (sent to the browser once, with both
languages). Chinese follows the tutorials the app is built from: 注意力, 多头注意力, 交叉注意力,
位置编码, KV 缓存, 预填充/解码 (Prefill/Decode), 贪心搜索, 束搜索, 采样, 温度.
"""

from __future__ import annotations

import re

from playground import locales

LANGUAGES = (("English", "en"), ("中文", "zh"))

_PAGE = locales.section("page")
# key: (English, 中文), every word of the page (the causal lab's included)
STRINGS: dict[str, tuple[str, str]] = {key: (en, _PAGE["zh"][key]) for key, en in _PAGE["en"].items()}

# The live screen's own strings (its script formats {placeholders}).
LIVE_KEYS = (
    "status_ready", "status_waiting", "status_waiting_for", "status_running", "status_done", "status_stopped",
    "status_error", "status_running_one", "status_starting",
    "status_done_one", "status_stopped_one", "status_seed", "reason_eos", "reason_length",
    "reason_stop_string", "rate", "legend", "legend_low", "legend_high", "legend_hint", "step_of", "following",
    "back_to_live", "chose", "forced_token", "cand_title", "cand_hint", "cand_token", "stage_raw",
    "stage_repetition_penalty", "stage_temperature", "stage_top_k", "stage_top_p", "stage_min_p", "stage_forced_bos",
    "stage_forced_eos", "removed_by", "branch_here", "type_token", "continue", "att_title", "att_hint", "att_layer",
    "att_head", "att_mean", "att_max", "att_group", "att_scale", "att_linear", "att_log", "att_sink", "att_self",
    "att_cross", "att_off", "att_loading", "att_query", "kv_title", "kv_hint", "kv_symbols", "kv_used", "kv_mha",
    "kv_cross", "kv_off", "kv_at_step", "beams_title", "beam_finished", "branches_title", "run_label", "branch_label",
    "prompt_label", "source_label", "queued_at", "no_tokens", "cand_none",
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


# --- notes and messages made in English below the app (the engine, the limits, the link parser) ---
# Each is one of a few fixed templates; in 中文 the page shows it through this table (pattern, 中文).
NOTES_ZH: tuple[tuple[str, str], ...] = (
    (r"^top_k (\d+) is more than the vocabulary \((\d+) tokens\): using (\d+)$",
     r"top_k \1 超过词表大小(\2 个 token):改用 \3"),
    (r"^max_new_tokens (\d+) is above the limit of (\d+): using (\d+)$", r"max_new_tokens \1 超过上限 \2:改用 \3"),
    (r"^max_new_tokens (-?\d+) is below 1: using 1$", r"max_new_tokens \1 小于 1:改用 1"),
    (r"^num_beams (\d+) is above the limit of (\d+): using (\d+)$", r"num_beams \1 超过上限 \2:改用 \3"),
    (r"^num_beams (-?\d+) is below 1: using 1 \(no beam search\)$", r"num_beams \1 小于 1:改用 1(不做束搜索)"),
    (r"^top_candidates (-?\d+) is outside 0\.\.(\d+): using (\d+)$", r"top_candidates \1 不在 0..\2 之间:改用 \3"),
    (r"^beam search is deterministic: temperature, top-k, top-p and min-p are ignored$",
     "束搜索是确定性的:温度、top-k、top-p 和 min-p 不起作用"),
    (r"^temperature (\S+) is negative: using 0 \(greedy decoding\)$", r"温度 \1 为负:改用 0(贪心解码)"),
    (r"^top_p (\S+) is outside \(0, 1\]: using 1\.0 \(top-p off\)$", r"top_p \1 不在 (0, 1] 内:改用 1.0(关闭 top-p)"),
    (r"^repetition penalty (\S+) must be positive: using 1 \(off\)$", r"重复惩罚 \1 必须为正:改用 1(关闭)"),
    (r"^top_k (-?\d+) is negative: using 0 \(top-k off\)$", r"top_k \1 为负:改用 0(关闭 top-k)"),
    (r"^max_new_tokens (\d+) does not fit the model's remaining context of (\d+) tokens: using (\d+)$",
     r"max_new_tokens \1 超出模型剩余的上下文(\2 个 token):改用 \3"),
    (r"^max_new_tokens (\d+) does not fit the decoder's (\d+) positions: using (\d+)$",
     r"max_new_tokens \1 超出解码器的 \2 个位置:改用 \3"),
    (r"^the prompt has (\d+) tokens but the model holds (\d+): dropping the first (\d+) tokens \(truncated on the "
     r"left\) to leave room for (\d+) new tokens$",
     r"提示词有 \1 个 token,但模型最多容纳 \2 个:丢弃最前面的 \3 个(从左侧截断),为 \4 个新 token 留出空间"),
    (r"^the source has (\d+) tokens but the encoder holds (\d+): dropping the first (\d+) tokens \(truncated on the "
     r"left\)$", r"源文本有 \1 个 token,但编码器最多容纳 \2 个:丢弃最前面的 \3 个(从左侧截断)"),
    (r"^the prompt is empty and this model has no BOS token to start from: type a prompt$",
     "提示词为空,且该模型没有可作为起点的 BOS token:请输入提示词"),
    (r"^the prompt is empty: generating from the start token alone$", "提示词为空:只从起始 token 开始生成"),
    (r"^the prompt was empty: starting from the start token$", "提示词为空:从起始 token 开始"),
    (r"^ignored unknown link parameter '(.*)'$", r"忽略了未知的链接参数“\1”"),
    (r"^ignored link parameter (\w+)=(.*): expected one of (.*)$", r"忽略了链接参数 \1=\2:应为 \3 之一"),
    (r"^ignored link parameter (\w+)=(.*): expected a whole number$", r"忽略了链接参数 \1=\2:应为整数"),
    (r"^ignored link parameter (\w+)=(.*): expected a finite number$", r"忽略了链接参数 \1=\2:应为有限的数"),
    (r"^ignored link parameter (\w+)=(.*): expected a number$", r"忽略了链接参数 \1=\2:应为数字"),
    (r"^ignored link parameter (\w+)=(.*): expected true or false$", r"忽略了链接参数 \1=\2:应为 true 或 false"),
    (r"^ignored link parameter (\w+)=(.*): outside (\S+)$", r"忽略了链接参数 \1=\2:超出范围 \3"),
    (r"^ignored link parameter (\w+)=(.*): the edits in this link are too many or nested too deeply; at most (\d+) "
     r"edits are allowed$", r"忽略了链接参数 \1=\2:链接中的编辑过多或嵌套过深;最多允许 \3 个编辑"),
    (r"^ignored link parameter (\w+)=(.*): this link carries ([\d,]+) edits; at most (\d+) are allowed$",
     r"忽略了链接参数 \1=\2:链接带有 \3 个编辑;最多允许 \4 个"),
    (r"^ignored link parameter (\w+)=(.*): the interventions in this link are not readable; open the edit again from "
     r"the page$", r"忽略了链接参数 \1=\2:链接中的编辑无法读取;请在页面上重新进行编辑"),
    (r"^ignored link parameter (\w+)=(.*): it could not be read$", r"忽略了链接参数 \1=\2:无法读取"),
    (r"^ignored link parameter (\w+)=(.*): (.*)$", r"忽略了链接参数 \1=\2:\3"),
    (r"^this upload was removed to make room for newer uploads \(each visitor keeps a share of the server's space\); "
     r"upload it again$", "这个上传已被删除,为更新的上传腾出空间(每位访客拥有服务器空间的一份);请重新上传"),
    (r"^(.*) MiB is more than this server keeps for uploads and Hub downloads \((.*) MiB per visitor\); use a smaller "
     r"model$", r"\1 MiB 超过本服务器为每位访客保留的上传和 Hub 下载空间(\2 MiB);请使用更小的模型"),
    (r"^the server's space for uploads is full of models other visitors are using; try again in a while or use a "
     r"model under (.*) MiB$", r"服务器的上传空间已被其他访客正在使用的模型占满;请稍后再试,或使用小于 \1 MiB 的模型"),
    (r"^(.*): config field 'max_positions' is (\d+): the model holds too few positions for any prompt and one new "
     r"token \(it needs at least 2\)$", r"\1:配置字段 'max_positions' 为 \2:模型的位置太少,容纳不下任何提示词加一个新 token"
     r"(至少需要 2 个)"),
    (r"^the prompt from the link was cut to (\d+) characters$", r"链接中的提示词已截断为 \1 个字符"),
    (r"^the link's model: (.*); using (.*)$", r"链接中的模型:\1;改用 \2"),
    (r"^(\w+) (.*) is not a finite number: using (.*)$", r"\1 \2 不是有限的数:改用 \3"),
    (r"^(\w+) (.*) is not a whole number: using (.*)$", r"\1 \2 不是整数:改用 \3"),
)


def note(text: str, lang: str = "en") -> str:
    """A note made in English below the app, in `lang` (unchanged in English, or if no template matches)."""
    if lang != "zh":
        return text
    for pattern, zh in NOTES_ZH:
        if re.match(pattern, text):
            return re.sub(pattern, zh, text)
    return text
