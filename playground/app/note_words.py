"""The words of the notes and the one-line refusals the page shows, English and 中文: key -> (English, 中文).

A note is made with a key and values (`playground.app.notes.note`) and put into words at the edge, in the
visitor's language. Keys made below the app (the plan's context fit, a link's edits) carry the library's
English word for word, so a script and the page say the same. Placeholders are the note's values: names of
numbers and what a visitor typed stay as they are in both languages; a knob is named as the page's control
names it (`KNOB_WORDS`: "Top-k", "Beam width"), never by the library's identifier (`top_k`, `num_beams`): the
library's own English (a plan's note, a SettingsError) is for scripts and stays as it is. No Gradio here.
"""

from __future__ import annotations

NOTE_WORDS: dict[str, tuple[str, str]] = {
    # --- the context: how the prompt and the new tokens fit (playground.generation.plan) ---
    "fit_context_new": ("{new} new tokens do not fit the model's remaining context of {room} tokens: using {room}",
                        "新 token 数 {new} 超出模型剩余的上下文({room} 个 token):改用 {room}"),
    "fit_prompt_dropped": ("the prompt has {n} tokens but the model holds {context}: dropping the first {dropped} tokens "
                           "(truncated on the left) to leave room for {new} new tokens",
                           "提示词有 {n} 个 token,但模型最多容纳 {context} 个:丢弃最前面的 {dropped} 个(从左侧截断),"
                           "为 {new} 个新 token 留出空间"),
    "fit_source_dropped": ("the source has {n} tokens but the encoder holds {context}: dropping the first {dropped} "
                           "tokens (truncated on the left)",
                           "源文本有 {n} 个 token,但编码器最多容纳 {context} 个:丢弃最前面的 {dropped} 个(从左侧截断)"),
    "fit_decoder_new": ("{new} new tokens do not fit the decoder's {context} positions: using {room}",
                        "新 token 数 {new} 超出解码器的 {context} 个位置:改用 {room}"),
    "plan_draft_beams": ("the draft is not used with beam search: beams decode without speculation",
                         "束搜索不使用草稿:各条束不做推测解码"),
    "plan_empty_prompt": ("the prompt was empty: starting from the start token", "提示词为空:从起始 token 开始"),
    "plan_forced_outside": ("the config's {name} {value} lies outside the vocabulary: no token is forced",
                            "配置中的 {name} {value} 超出词表:不强制任何 token"),
    # --- a link's edits (playground.interventions.unpack) ---
    "edits_unreadable": ("the interventions in this link are not readable; open the edit again from the page",
                         "链接中的编辑无法读取;请在页面上重新进行编辑"),
    "edits_too_deep": ("the edits in this link are too many or nested too deeply; at most {most} edits are allowed",
                       "链接中的编辑过多或嵌套过深;最多允许 {most} 个编辑"),
    "edits_too_many": ("this link carries {n} edits; at most {most} are allowed", "链接带有 {n} 个编辑;最多允许 {most} 个"),
    # --- the knobs moved into range (playground.app.limits) ---
    "not_a_flag": ("{name} {value} is not true or false: using {default}", "{name} {value} 不是 true 或 false:改用 {default}"),
    "bad_attention_layers": ("the recorded layers {layers} are not layer indices 0..{last}: recording every layer",
                             "要记录的层 {layers} 不是 0..{last} 的层号:记录每一层"),
    "bad_seed": ("seed {seed} is not a non-negative whole number: using a random seed",
                 "种子 {seed} 不是非负整数:改用随机种子"),
    "bad_forced_bos": ("forced_bos_token_id {value} is not a token id of this model: using the checkpoint's own",
                       "forced_bos_token_id {value} 不是这个模型的 token 编号:改用检查点自己的设置"),
    "precision_bad": ("Weight precision {value} is none of float32, bfloat16, float16, int8, int4: using the weights "
                      "as loaded", "权重精度 {value} 不是 float32、bfloat16、float16、int8、int4 之一:使用加载时的权重"),
    "kv_dtype_bad": ("Quantised cache {value} is not int8 or int4: keeping the model's own cache",
                     "量化缓存 {value} 不是 int8 或 int4:使用模型自己的缓存"),
    "draft_tokens_bad": ("Drafted tokens per pass {value} is not a whole number from 1 to 16: using 4",
                         "每次前向起草的 token 数 {value} 不是 1 到 16 之间的整数:改用 4"),
    "draft_dropped": ("the drafter cannot run here ({why}): decoding without a draft",
                      "草稿器无法在这里运行({why}):不使用草稿解码"),
    "kv_range": ("{name} {value} is not a whole number from {low} to {high}: leaving it off",
                 "{name} {value} 不是 {low} 到 {high} 之间的整数:不使用它"),
    "kv_needs_window": ("attention sinks and heavy hitters are kept beside an eviction window: set a window too; "
                        "running the plain cache",
                        "注意力汇聚点和重要 token 是在淘汰窗口之外额外保留的:请同时设置窗口;改用普通缓存"),
    "kv_dtype_window": ("a quantised cache and an eviction window do not combine yet: running the window alone",
                        "量化缓存与淘汰窗口暂不能同时使用:只运行窗口"),
    "kv_decoder_only": ("KV-cache eviction and quantisation apply to decoder-only models: running the plain cache",
                        "KV 缓存淘汰与量化只适用于仅解码器模型:改用普通缓存"),
    "edits_dropped": ("interventions {why}: running without them", "编辑无法用于这个模型({why}):不带编辑运行"),
    "bad_stop_strings": ("stop strings {value} are not a list of non-empty texts: using none",
                         "停止字符串 {value} 不是非空文本的列表:不使用停止字符串"),
    "top_k_vocab": ("Top-k {k} is more than the vocabulary ({vocab} tokens): using {vocab}",
                    "Top-k {k} 超过词表大小({vocab} 个 token):改用 {vocab}"),
    "beam_deterministic": ("beam search is deterministic: temperature, top-k, top-p and min-p are ignored",
                           "束搜索是确定性的:温度、top-k、top-p 和 min-p 不起作用"),
    "bad_early_stopping": ("Early stopping {value} is not true, false or 'never': using false",
                           "提前停止 {value} 不是 true、false 或 'never':改用 false"),
    "empty_prompt_no_bos": ("the prompt is empty and this model has no BOS token to start from: type a prompt",
                            "提示词为空,且该模型没有可作为起点的 BOS token:请输入提示词"),
    "empty_prompt_start": ("the prompt is empty: generating from the start token alone", "提示词为空:只从起始 token 开始生成"),
    "not_whole": ("{name} {value} is not a whole number: using {fixed}", "{name} {value} 不是整数:改用 {fixed}"),
    "not_finite": ("{name} {value} is not a finite number: using {fixed}", "{name} {value} 不是有限的数:改用 {fixed}"),
    "knob_range": ("{name} {value} must be {bounds}: using {fixed}", "{name} {value} 必须{bounds}:改用 {fixed}"),
    "knob_range_off": ("{name} {value} must be {bounds}: using {fixed} (off)",
                       "{name} {value} 必须{bounds}:改用 {fixed}(关闭)"),
    "knob_cap": ("{name} {value} is above the limit of {cap}: using {cap}", "{name} {value} 超过上限 {cap}:改用 {cap}"),
    "bounds_any": ("any number", "是任意数"),
    "bounds_positive": ("positive", "为正数"),
    "bounds_at_least": (">= {low}", " ≥ {low}"),
    "bounds_open": ("in ({low}, {high}]", "在 ({low}, {high}] 内"),
    "bounds_between": ("between {low} and {high}", "在 {low} 到 {high} 之间"),
    "bounds_closed": ("in [{low}, {high}]", "在 [{low}, {high}] 内"),
    # --- a link's values (playground.app.settings.from_query) ---
    "link_unknown": ("ignored unknown link parameter '{name}'", "忽略了未知的链接参数“{name}”"),
    "link_ignored": ("ignored link parameter {name}={value}: {why}", "忽略了链接参数 {name}={value}:{why}"),
    "link_unreadable": ("it could not be read", "无法读取"),
    "link_prompt_cut": ("the prompt from the link was cut to {n} characters", "链接中的提示词已截断为 {n} 个字符"),
    "expect_bool": ("expected true or false", "应为 true 或 false"),
    "expect_rope": ("expected linear, ntk or yarn and a factor from 1, e.g. ntk:4",
                    "应为 linear、ntk 或 yarn 加一个不小于 1 的倍数,例如 ntk:4"),
    "rope_dropped": ("RoPE scaling cannot run on this model ({why}): using its own positions",
                     "RoPE 缩放无法用于这个模型({why}):使用它自己的位置编码"),
    "expect_draft": ("expected ngram, layer:K or model:<name>", "应为 ngram、layer:K 或 model:<name>"),
    "draft_model_missing": ("the draft model {name} is not available here: decoding without a draft",
                            "草稿模型 {name} 在此不可用:不使用草稿解码"),
    "draft_no_captures": ("a drafted run records no attention or residual stream: the panels that read them stay "
                          "empty for this run", "使用草稿的运行不记录注意力和残差流:读取它们的面板在这次运行中为空"),
    "live_head_reset": ("this model has no head {head} for the live attention panel: it shows the mean of the heads",
                        "这个模型没有实时注意力面板所选的头 {head}:改为显示各头的平均"),
    "live_layer_reset": ("this model has no layer {layer} for the live attention panel: it shows the last layer",
                         "这个模型没有实时注意力面板所选的第 {layer} 层:改为显示最后一层"),
    "expect_one_of": ("expected one of {choices}", "应为 {choices} 之一"),
    "expect_lang_code": ("expected a language code such as fr_XX, fra_Latn or fr", "应为语言代码,例如 fr_XX、fra_Latn 或 fr"),
    "expect_number": ("expected a number", "应为数字"),
    "expect_whole": ("expected a whole number", "应为整数"),
    "expect_finite": ("expected a finite number", "应为有限的数"),
    "expect_range": ("outside {low}..{high}", "超出范围 {low}..{high}"),
    "expect_branches": ("expected step:token_id pairs separated by commas", "应为以逗号分隔的 步:token 编号 对"),
    "branches_many": ("at most {n} branches", "最多 {n} 个分支"),
    # --- a link's model, and the checkpoints a server leaves out (playground.ui.models) ---
    "link_model": ("the link's model: {why}; using {model}", "链接中的模型:{why};改用 {model}"),
    "model_not_here": ("is not available here", "在这里不可用"),
    "model_not_offered": ("{name} is not offered here: {why}", "这里不提供 {name}:{why}"),
    # --- names -> checkpoints (playground.app.names) ---
    "no_model_selected": ("no model selected; pick one from the list or upload a .safetensors file",
                          "没有选择模型;请从列表中选择,或上传一个 .safetensors 文件"),
    "not_a_name": ("'{name}' is not a checkpoint name; pick one from the list", "“{name}”不是检查点名称;请从列表中选择"),
    "not_a_hub_name": ("'{name}' is not a Hub download name; type the repo id as owner/name",
                       "“{name}”不是 Hub 下载的名称;请按 owner/name 的形式输入仓库名"),
    "points_outside": ("'{name}' points outside the checkpoint folders; pick one from the list",
                       "“{name}”指向检查点文件夹之外;请从列表中选择"),
    "no_checkpoint": ("no checkpoint named '{name}' here; pick one from the list or upload it",
                      "这里没有名为“{name}”的检查点;请从列表中选择或上传它"),
    "private_upload": ("this upload is private to the visitor who made it", "这个上传只属于上传它的访客"),
    "private_hub": ("this Hub download is private to the visitor who made it; type its repo id to download it yourself",
                    "这个 Hub 下载只属于下载它的访客;请输入它的仓库名自己下载"),
    # --- uploads and Hub downloads kept on the server (playground.app.uploads) ---
    "evicted": ("this upload was removed to make room for newer uploads (each visitor keeps a share of the server's "
                "space); upload it again", "这个上传已被删除,为更新的上传腾出空间(每位访客拥有服务器空间的一份);请重新上传"),
    "quota_share": ("{size} MiB is more than this server keeps for uploads and Hub downloads ({share} MiB per visitor); "
                    "use a smaller model", "{size} MiB 超过本服务器为每位访客保留的上传和 Hub 下载空间({share} MiB);请使用更小的模型"),
    "quota_full": ("the server's space for uploads is full of models other visitors are using; try again in a while or "
                   "use a model under {room} MiB",
                   "服务器的上传空间已被其他访客正在使用的模型占满;请稍后再试,或使用小于 {room} MiB 的模型"),
    # --- the queue's places per visitor (playground.app.visitors) ---
    "queue_client_full": ("{n} calls from your address are already waiting or running: wait for one to finish, then "
                          "call again", "来自你的地址的 {n} 个调用已在等待或运行:请等其中一个完成后再调用"),
    "queue_scripts_full": ("the queue's {n} places for scripts are taken (the rest are kept for the page's visitors): "
                           "try again in a moment", "队列中留给脚本的 {n} 个位置已满(其余留给网页访客):请稍后再试"),
    "upload_expired": ("this upload was deleted after its time without use (or with its tab, when that closed); "
                       "upload it again", "这个上传因长时间未使用(或随其标签页关闭)已被删除;请重新上传"),
    "queue_tab_full": ("this tab already has {n} actions waiting: wait for them to finish",
                       "此标签页已有 {n} 个操作在等待:请等它们完成"),
}

# The notes whose {name} is a knob or a flag of the run (playground.app.limits): the page says its control's name.
KNOB_NOTES = frozenset({"not_a_flag", "not_whole", "not_finite", "knob_range", "knob_range_off", "knob_cap", "kv_range"})

# Each knob and flag as the page's controls name it (their labels without the hint in brackets), English and 中文.
KNOB_WORDS: dict[str, tuple[str, str]] = {
    "max_new_tokens": ("Max new tokens", "最多生成的 token 数"),
    "temperature": ("Temperature", "温度"),
    "top_k": ("Top-k", "Top-k"),
    "top_p": ("Top-p", "Top-p"),
    "min_p": ("Min-p", "Min-p"),
    "repetition_penalty": ("Repetition penalty", "重复惩罚"),
    "num_beams": ("Beam width", "束宽"),
    "length_penalty": ("Length penalty α", "长度惩罚 α"),
    "top_candidates": ("Candidates shown per step", "每步显示的候选数"),
    "seed": ("Seed", "随机种子"),
    "early_stopping": ("Early stopping", "提前停止"),
    "chat": ("Chat", "对话模式"),
    "use_cache": ("KV cache", "KV 缓存"),
    "capture_attention": ("Record attention", "记录注意力"),
    "capture_prompt_attention": ("Record the prompt's attention", "记录提示词的注意力"),
    "capture_residual": ("Record the residual stream", "记录残差流"),
    "truncate_prompt": ("Truncate the prompt", "截断提示词"),
    "kv_window": ("Window N", "窗口 N"),
    "kv_sink": ("Sinks S", "汇聚点 S"),
    "kv_heavy": ("Heavy hitters H", "重要 token H"),
    "kv_dtype": ("Quantised cache", "量化缓存"),
    "rope_scaling": ("RoPE scaling", "RoPE 缩放"),
    "weight_precision": ("Weight precision", "权重精度"),
    "draft": ("Drafter", "草稿器"),
    "draft_tokens": ("Drafted tokens per pass", "每次前向起草的 token 数"),
}


def knob_word(name: str, lang: str) -> str:
    """The page's name of the knob or flag `name` in `lang` (a name it does not know, as it is)."""
    words = KNOB_WORDS.get(name)
    return name if words is None else words[1 if lang == "zh" else 0]
