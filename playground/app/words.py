"""Every word the page shows, in English and 中文, with the seeds' terminology. No Gradio here.

`t(key, lang, **values)` formats one string; `LIVE` is the part the live screen's own script uses
(sent to the browser once, with both languages). Chinese follows the tutorials the app is built
from: 注意力, 多头注意力, 交叉注意力, 位置编码, KV Cache, Prefill/Decode, 贪心搜索, 束搜索, 采样, 温度.
"""

from __future__ import annotations

from playground.app.lab_words import LAB_STRINGS

LANGUAGES = (("English", "en"), ("中文", "zh"))

# key: (English, 中文)
STRINGS: dict[str, tuple[str, str]] = {
    # --- header
    "title": ("Transformer Playground", "Transformer 演练场"),
    "tagline": (
        "Watch a Transformer choose every token — the candidates, where it looks, the KV cache — live, computed "
        "by our own implementation, which matches Hugging Face transformers exactly.",
        "看 Transformer 逐个选出 token:候选词、注意力落在哪里、KV Cache 如何增长——全部实时呈现,"
        "由我们自己实现的模型计算,与 Hugging Face transformers 数值一致。",
    ),
    # --- model
    "model": ("Model", "模型"),
    "model_info": ("From weights/, your uploads or the Hub", "来自 weights/、你的上传或 Hub"),
    "loading": ("Loading the model…", "正在加载模型……"),
    "loaded": ("**{verb}** {name} · {kind} · {dtype}", "**{verb}** {name} · {kind} · {dtype}"),
    "loaded_verb": ("Loaded", "已加载"),
    "kind_decoder": ("decoder-only", "仅解码器 (Decoder-only)"),
    "kind_seq2seq": ("encoder-decoder", "编码器-解码器 (Encoder-Decoder)"),
    "load_failed": ("**{what}:** {why}.{keep}", "**{what}:**{why}。{keep}"),
    "still_using": (" Still using **{name}**.", "仍在使用 **{name}**。"),
    "could_not_load": ("Could not load {name}", "无法加载 {name}"),
    "upload_refused": ("Upload refused", "上传被拒绝"),
    "hub_failed": ("Hub download failed", "Hub 下载失败"),
    "nothing_uploaded": ("Nothing uploaded", "没有收到文件"),
    "uploaded": ("Uploaded and loaded", "已上传并加载"),
    "upload_evicted": ("To make room, your earlier {names} was removed.",
                       "为了腾出空间,已删除你之前的 {names}。"),
    "model_default_decoder": ("(default decoder)", "(默认解码器)"),
    "model_default_seq2seq": ("(default seq2seq)", "(默认 seq2seq)"),
    "model_preloaded": ("(preloaded from the Hub)", "(预先从 Hub 下载)"),
    "model_uploaded": ("uploaded: {what}", "已上传:{what}"),
    "model_hub": ("Hub: {repo}", "Hub:{repo}"),
    "downloaded": ("Downloaded and loaded", "已下载并加载"),
    "no_tokenizer_ids": ("This model has no tokenizer that can be used here (the model card says why), so it "
                         "cannot read text: type token ids separated by commas as the prompt (e.g. {example}).",
                         "这个模型没有可在此使用的分词器(原因见模型卡片),无法读取文字:请在提示框中输入以逗号分隔的"
                         "词元 ID(例如 {example})。"),
    "describe_generic": ("{family} · {kind} · {params} parameters", "{family} · {kind} · {params} 个参数"),
    # --- prompt and buttons
    "prompt": ("Prompt", "提示词 (Prompt)"),
    "source": ("Source text (the encoder reads this)", "源文本(由编码器读取)"),
    "chat": ("Chat: wrap the prompt in the model's chat template", "对话模式:用模型的对话模板包装提示词"),
    "chat_info": ("On for instruct models: they answer a user turn", "指令模型默认开启:它们回答的是用户的一轮对话"),
    "target_lang": ("Target language", "目标语言"),
    "target_lang_info": ("The language code forced as the first token (empty: the checkpoint's default)",
                         "作为第一个 token 强制输出的语言代码(留空 = 检查点的默认值)"),
    "generate": ("Generate", "生成"),
    "stop": ("Stop", "停止"),
    "copy_link": ("Copy link", "复制链接"),
    "link": ("Link to this exact run (every setting in the URL)", "本次运行的链接(URL 包含全部设置)"),
    # --- decoding settings
    "decoding": ("Decoding settings", "解码设置"),
    "mode": ("Decoding", "解码方式"),
    "mode_greedy": ("Greedy", "贪心搜索"),
    "mode_sample": ("Sampling", "采样"),
    "mode_beam": ("Beam search", "束搜索 (Beam Search)"),
    "mode_info": (
        "Greedy: always the most likely token · Sampling: draw by probability · Beam search: keep the best few sequences",
        "贪心:每步取概率最大的 token · 采样:按概率随机抽取 · 束搜索:同时保留几条得分最高的序列",
    ),
    "temperature": ("Temperature", "温度 (Temperature)"),
    "temperature_info": ("Divides the logits: below 1 sharpens the distribution, above 1 flattens it",
                         "logits 除以温度:小于 1 分布更尖锐,大于 1 更平坦"),
    "top_k": ("Top-k (0 = off)", "Top-k(0 = 关闭)"),
    "top_k_info": ("Keep only the k most likely tokens", "只保留概率最高的 k 个 token"),
    "top_p": ("Top-p (1 = off)", "Top-p(1 = 关闭)"),
    "top_p_info": ("Keep the smallest set of likely tokens whose probabilities add up to p (nucleus)",
                   "保留累计概率达到 p 的最小 token 集合(核采样)"),
    "repetition_penalty": ("Repetition penalty (1 = off)", "重复惩罚(1 = 关闭)"),
    "repetition_penalty_info": ("Tokens already in the text become less likely: positive logits ÷ r, negative × r",
                                "已出现过的 token 概率降低:正 logit 除以 r,负 logit 乘以 r"),
    "num_beams": ("Beam width", "束宽 (Beam width)"),
    "num_beams_info": ("How many sequences are kept at every step", "每一步保留多少条候选序列"),
    "length_penalty": ("Length penalty α", "长度惩罚 α"),
    "length_penalty_info": ("A finished beam scores Σ log p ÷ length^α: α > 0 favours longer outputs, α < 0 shorter",
                            "完成的序列得分 = Σ log p ÷ 长度^α:α > 0 偏好更长的输出,α < 0 偏好更短的"),
    "early_stopping": ("Early stopping", "提前停止"),
    "early_stopping_info": ("Stop as soon as beam-width sequences have finished", "已完成的序列数达到束宽时立即停止"),
    "max_new_tokens": ("Max new tokens", "最多生成的 token 数"),
    "max_new_tokens_info": ("Generation also ends at end-of-sequence, or when you press Stop",
                            "遇到结束符或按下“停止”时也会结束"),
    "seed": ("Seed (empty = draw one)", "随机种子(留空 = 自动抽取)"),
    "seed_info": ("Empty: each press draws a new seed (shown in the notes). A seed typed here is kept",
                  "留空:每次点击都抽取新种子(显示在提示区);在这里输入的种子会一直使用"),
    # --- live view settings
    "live_view": ("Live view", "实时视图"),
    "top_candidates": ("Candidates shown per step", "每步显示的候选数"),
    "top_candidates_info": ("Rows in the candidates panel", "候选面板中的行数"),
    "record_attention": ("Record attention while generating", "生成时记录注意力"),
    "record_attention_info": ("The live panel's layer is recorded at every step (a few % slower)",
                              "每一步记录实时面板所选的层(略慢几个百分点)"),
    "pace": ("Slow motion: pause after each token (ms)", "慢动作:每个 token 后暂停(毫秒)"),
    "pace_info": ("A run sleeps 30 s at most in total", "一次运行的总暂停时间最多 30 秒"),
    # --- loading your own
    "load_own": ("Load your own checkpoint", "加载你自己的检查点"),
    "dtype": ("dtype", "数据类型 (dtype)"),
    "upload": ("Upload a .safetensors file, or a checkpoint folder's files (config.json, model.safetensors, "
               "tokenizer files)",
               "上传 .safetensors 文件,或检查点文件夹中的文件(config.json、model.safetensors、分词器文件)"),
    "hub_id": ("or a Hugging Face Hub repo id (online only)", "或 Hugging Face Hub 仓库名(仅联网时)"),
    "hub_load": ("Load", "加载"),
    # --- deep views
    "deep_views": ("Deeper views of the selected step", "所选步骤的深入视图"),
    "tab_inspector": ("Candidates & beams", "候选词与束"),
    "tab_attention": ("All heads", "全部注意力头"),
    "tab_cache": ("KV cache", "KV Cache"),
    "tab_positional": ("Positional encoding", "位置编码"),
    "tab_card": ("Model card", "模型卡片"),
    "tab_lessons": ("Lessons", "原理课"),
    "lessons_pick": ("Lessons on this run", "基于本次运行的原理课"),
    "lesson_steps": ("Attention step by step", "注意力逐步计算"),
    "lesson_lens": ("Logit lens", "Logit Lens(逐层预测)"),
    "lesson_kv": ("Why the KV cache helps", "KV Cache 为什么有用"),
    "lesson_memory": ("KV memory calculator", "KV Cache 显存计算器"),
    "lesson_patterns": ("Attention patterns", "注意力模式"),
    "lesson_sdpa": ("SDPA vs explicit softmax", "SDPA 与显式 softmax"),
    "lesson_anatomy": ("Anatomy", "模型结构"),
    "lesson_training": ("Training recipe", "训练配方"),
    "lesson_needs_run": ("Generate something first: this lesson follows the selected step of a run.",
                         "请先生成文本:这节课跟随某次运行中所选的步骤。"),
    "lesson_after_run": ("This lesson is drawn when the run ends.", "运行结束后再绘制这节课。"),
    "lesson_sdpa_press": ("Press “Measure” to time SDPA against the explicit softmax at this model's head sizes "
                          "(a few seconds).",
                          "点击“测量”,以本模型的头尺寸对比 SDPA 与显式 softmax 的耗时(需要几秒钟)。"),
    "lesson_time_cache": ("Time with and without the cache", "测量使用/不使用缓存的耗时"),
    "lesson_measure": ("Measure", "测量"),
    "lesson_preset": ("Preset", "预设"),
    "preset_this_model": ("this model ({family}, {millions:.1f}M parameters)", "本模型({family},{millions:.1f}M 参数)"),
    "preset_llama3_8b_mha": ("LLaMA 3 8B as MHA, 8k tokens", "LLaMA 3 8B 按 MHA 计,8k 个 token"),
    "preset_llama3_70b_gqa8": ("LLaMA 3 70B, GQA-8, 8k tokens", "LLaMA 3 70B,GQA-8,8k 个 token"),
    "lesson_attention": ("Attention", "注意力类型"),
    "lesson_dtype": ("Number format", "数值格式"),
    "lesson_as_preset": ("as the preset", "同预设"),
    "lesson_batch": ("Batch B", "批大小 B"),
    "lesson_tokens": ("Tokens T (0: the preset's)", "token 数 T(0 = 预设值)"),
    "inspector_intro": (
        "The candidates of the selected step through every stage of the sampler (raw softmax → repetition penalty "
        "→ temperature → top-k → top-p); grey bars were removed by a filter. For beam search: every beam at every "
        "step, with its score.",
        "所选步骤的候选词在采样器每个阶段后的概率(原始 softmax → 重复惩罚 → 温度 → Top-k → Top-p);"
        "灰色表示被过滤掉。束搜索:每一步的每一条束及其得分。",
    ),
    "step_caption": ("Step {step}: chose {token} (id {id}) with probability {p}",
                     "第 {step} 步:选中 {token}(id {id}),概率 {p}"),
    "removed_caption": (" · {n} of the top {m} removed by a filter (grey)", " · 前 {m} 个中有 {n} 个被过滤(灰色)"),
    "beam_caption": (" · from beam {beam}", " · 来自第 {beam} 条束"),
    "nothing_yet": ("Generate something first; then click a token to inspect its step.",
                    "请先生成文本,然后点击 token 查看该步。"),
    "funnel_title": ("Step {step}: candidates through the sampling pipeline", "第 {step} 步:候选词经过采样流程"),
    "attention_kind": ("Attention", "注意力"),
    "kind_self": ("decoder self-attention", "解码器自注意力"),
    "kind_cross": ("cross-attention (decoder → source)", "交叉注意力(解码器 → 源文本)"),
    "kind_encoder": ("encoder self-attention", "编码器自注意力"),
    "large_view": ("Large view", "大图"),
    "view_head": ("single head", "单个头"),
    "view_mean": ("mean of heads", "所有头的平均"),
    "view_max": ("max of heads", "所有头的最大值"),
    "view_group": ("mean per KV group", "按 KV 组平均"),
    "colour_scale": ("Colour scale", "色阶"),
    "scale_linear": ("linear", "线性"),
    "scale_log": ("log", "对数"),
    "hide_sink": ("Hide the first token (attention sink)", "隐藏第一个 token(注意力汇聚点)"),
    "layer": ("Layer", "层"),
    "head": ("Head", "头"),
    "query": ("Query token (row)", "查询 token(行)"),
    "attention_intro": (
        "Every head of one layer, softmax(QKᵀ/√d), over the whole text of the run (rows: queries, columns: keys). "
        "The row of the selected step is the one that chose its token.",
        "某一层的全部注意力头 softmax(QKᵀ/√d),覆盖本次运行的全部文本(行:查询 query,列:键 key)。"
        "所选步骤对应的那一行,就是选出该 token 的查询。",
    ),
    "attention_note": ("{layers} layers × {heads} heads; {t} queries × {s} keys.", "{layers} 层 × {heads} 个头;{t} 个查询 × {s} 个键。"),
    "window_note": (" Layer {layer} is a sliding-window layer: each query sees only its last {window} keys (the rest "
                    "are masked, weight 0).",
                    " 第 {layer} 层是滑动窗口层:每个查询只看最近的 {window} 个键(其余被掩码,权重为 0)。"),
    "gqa_note": (" GQA: {g} query heads share each KV head (rows of the grid).", " GQA:每 {g} 个查询头共享一个 KV 头(网格的每一行)。"),
    "attention_off": ("Attention was not recorded for this run: tick “Record attention” and generate again.",
                      "本次运行没有记录注意力:勾选“生成时记录注意力”后重新生成。"),
    "heads_grid_title": ("{label}: all heads of layer {layer}", "{label}:第 {layer} 层的全部头"),
    "heat_title": ("{label}, layer {layer}, {what}", "{label},第 {layer} 层,{what}"),
    "row_title": ("Row of query {q} ({token}), layer {layer}, {what}", "查询 {q}({token})所在行,第 {layer} 层,{what}"),
    "summary_title": ("{label}: entropy and mean distance per layer × head", "{label}:每层每个头的熵与平均距离"),
    "what_head": ("head {head}", "第 {head} 个头"),
    "what_group": ("KV group {group}", "KV 组 {group}"),
    "cache_intro": (
        "Each layer keeps the keys and values of every token it has seen, so a new token attends to them without "
        "recomputing them: bytes = 2 · N_layers · B · h_kv · T · d_head · s.",
        "每一层保存它见过的所有 token 的 K 和 V,新 token 做注意力时无需重新计算:"
        "字节数 = 2 · N_layers · B · h_kv · T · d_head · s。",
    ),
    "rerun": ("Rerun the same request without the KV cache", "不用 KV Cache 重新运行同一请求"),
    "rerun_note": (
        "Both runs measured just now, back to back. Without the cache every step recomputes keys and values for the "
        "whole prefix. Both runs produced {verdict}.",
        "两次运行刚刚先后测量。没有缓存时,每一步都要为整个前缀重新计算 K 和 V。两次运行得到{verdict}。",
    ),
    "rerun_partial": (
        "Timed over the first {steps} of the run's {total} steps: the whole run without the cache would cost "
        "{tflops:.1f} TFLOP, about {seconds:.0f} s of this server's time, so the rest is estimated from that count, "
        "not run (other visitors keep their turn).",
        "只测量了本次运行 {total} 步中的前 {steps} 步:整段不用缓存要 {tflops:.1f} TFLOP,在本服务器上约 {seconds:.0f} 秒,"
        "所以其余部分按这个计算量估算,而不实际运行(其他访客照常轮到)。",
    ),
    "rerun_progress": (
        "Measuring {mode}: step {done} of {total} ({seconds:.1f} s of compute so far). Stop ends it.",
        "正在测量{mode}:第 {done} / {total} 步(已计算 {seconds:.1f} 秒)。按“停止”可结束。",
    ),
    "rerun_warmup": ("Warming up with one token, then timing with and without the cache… Stop ends it.",
                     "先用一个 token 预热,然后分别计时使用和不用缓存的情况…按“停止”可结束。"),
    "rerun_mode_cached": ("with the cache", "使用缓存"),
    "rerun_mode_uncached": ("without the cache", "不用缓存"),
    "sdpa_progress": ("Measuring attention at length {done} of {total}…", "正在测量第 {done} / {total} 个长度的注意力…"),
    "sdpa_too_big": (
        "This model has {heads} heads: the explicit softmax would need more memory than this server lends one "
        "measurement even at 16 positions, so it is not measured here. Run the lesson on a smaller model.",
        "这个模型有 {heads} 个头:即使只有 16 个位置,显式 softmax 需要的内存也超过本服务器给一次测量的额度,"
        "所以这里不测量。请在更小的模型上运行这一课。",
    ),
    "time_cache_progress": ("Timing run {done} of {total} (warm-up, then with and without the cache)…",
                            "正在计时第 {done} / {total} 次运行(先预热,再分别使用和不用缓存)…"),
    "time_cache_too_long": (
        "This prompt ({tokens} tokens) is too long to time without the cache on this server: every step would "
        "recompute all of it. Time a shorter prompt; the FLOP chart above still shows the difference.",
        "这个提示词({tokens} 个 token)太长,无法在本服务器上计时不用缓存的情况:每一步都要重新计算全部内容。"
        "请用更短的提示词计时;上方的 FLOP 图仍显示两者的差别。",
    ),
    "rerun_stopped": ("Stopped before the measurement finished; nothing was drawn.", "测量完成前已停止,未绘制结果。"),
    "same_tokens": ("the same tokens", "相同的 token"),
    "different_tokens": ("different tokens (sampling is only reproducible with a seed)", "不同的 token(只有固定种子时采样才可复现)"),
    "generate_first": ("Generate once first; this reruns that same request without the KV cache.",
                       "请先生成一次;这里会不用 KV Cache 重新运行同一请求。"),
    "pe_length": ("Positions shown", "显示的位置数"),
    "pe_sinusoidal": ("**Sinusoidal** (fixed, not learned): PE(pos, 2i) = sin(pos / {base}^(2i/d)), PE(pos, 2i+1) = "
                      "cos(…), d = {d}, added to the embeddings. Early dimensions oscillate fast, late ones slowly; the "
                      "dot product of two positions depends mainly on their distance. Below: base {base} vs {other}.",
                      "**正弦位置编码**(固定,不需学习):PE(pos, 2i) = sin(pos / {base}^(2i/d)),PE(pos, 2i+1) = cos(…),"
                      "d = {d},加到词嵌入上。前面的维度振荡得快,后面的慢;两个位置的点积主要取决于它们的距离。"
                      "下图对比基数 {base} 与 {other}。"),
    "pe_rope": ("**RoPE**: queries and keys are rotated, pair by pair, by angle position × θᵢ with θᵢ = base^(−2i/d), "
                "d_head = {d} ({pairs} pairs). The score q·k then depends only on the relative distance. Nothing is "
                "added to the embeddings.",
                "**旋转位置编码 (RoPE)**:查询和键按维度对旋转,角度 = 位置 × θᵢ,θᵢ = base^(−2i/d),d_head = {d}"
                "({pairs} 对)。于是 q·k 只取决于相对距离。词嵌入上不加任何东西。"),
    "pe_rope_decay": ("q·k for q = k = 1 vs relative distance (long-term decay)", "q = k = 1 时 q·k 随相对距离的变化(远程衰减)"),
    "pe_learned": ("**Learned absolute positions**: the model's own table ({shown} of {total} positions × {d} dims), "
                   "added to the embeddings.",
                   "**可学习的绝对位置编码**:模型自己的表(显示 {shown} / {total} 个位置 × {d} 维),加到词嵌入上。"),
    "pe_relative": ("**Relative position bias** (T5): a learned scalar per head and distance bucket is added to the "
                    "attention logits (`{table}`); no position is added to the embeddings.",
                    "**相对位置偏置**(T5):每个头、每个距离桶学一个标量,加到注意力 logits 上(`{table}`);"
                    "词嵌入上不加位置。"),
    "pe_partial": ("Only the first {rotary} of {head} dimensions of each head rotate; the other {rest} pass through "
                   "unchanged (partial rotary).",
                   "每个头只有前 {rotary} / {head} 维旋转,其余 {rest} 维原样通过(部分旋转)。"),
    "pe_nope": ("Layers {layers} use no positional encoding at all (NoPE).", "第 {layers} 层完全不使用位置编码 (NoPE)。"),
    "pe_bases": ("Each kind of layer has its own base: {bases}.", "不同类型的层各有自己的基数:{bases}。"),
    "pe_shift_needs_run": ("Generate once to see RoPE's relative property on this model's own q and k.",
                           "生成一次,即可在本模型自己的 q 和 k 上看到 RoPE 的相对位置性质。"),
    "pe_none": ("This model uses no positional encoding.", "该模型不使用位置编码。"),
    "base_label": ("base {base}", "基数 {base}"),
    "pe_base": ("Compare with base", "对比的基数 (base)"),
    "pe_pair": ("RoPE dimension pair", "RoPE 维度对"),
    # --- notes and errors
    "note": ("Note", "注意"),
    "empty_prompt": ("The prompt is empty: type some text to continue (or a date to convert).",
                     "提示词为空:请输入要续写的文本(或要转换的日期)。"),
    "seed_drawn": ("No seed was given: this run drew seed {seed} (Copy link carries it; type a seed to pin it).",
                   "未指定种子:本次运行抽取了种子 {seed}(“复制链接”会带上它;输入种子即可固定)。"),
    "pace_capped": ("Slow motion was shortened to {ms} ms per token so the run sleeps at most 30 s.",
                    "慢动作已缩短为每个 token {ms} 毫秒,使总暂停不超过 30 秒。"),
    "chat_unavailable": ("This checkpoint has no chat template; the prompt was used as plain text.",
                         "该检查点没有对话模板;提示词按普通文本处理。"),
    "prompt_cut": ("The prompt was cut to {n} characters.", "提示词已截断为 {n} 个字符。"),
    "prompt_tokens_cut": ("The prompt has {n} tokens; its first {dropped} were dropped to keep the last {cap}.",
                          "提示词有 {n} 个 token;丢弃了前 {dropped} 个,保留最后 {cap} 个。"),
    "numbers_nonfinite": ("Step {step}: this model computed NaN or infinity; its probabilities mean nothing "
                          "(the checkpoint's weights are broken).",
                          "第 {step} 步:该模型算出了 NaN 或无穷大;它的概率没有意义(检查点的权重已损坏)。"),
    "numbers_overflow": ("Step {step}: activations reach {peak:.1e}, beyond what float32 can square, so every "
                         "norm overflows; the probabilities mean nothing (the checkpoint's weights are scaled wrong).",
                         "第 {step} 步:激活值达到 {peak:.1e},超出 float32 能平方的范围,所有范数都溢出;"
                         "这些概率没有意义(检查点的权重缩放有误)。"),
    "numbers_uniform": ("Step {step}: all {n} tokens are equally likely: the model's output carries no information "
                        "(its activations saturated or overflowed).",
                        "第 {step} 步:全部 {n} 个 token 概率相同:模型的输出不含任何信息(激活值饱和或溢出)。"),
    # ZeroGPU: a run the GPU did not take runs on the Space's CPU (playground.app.zerogpu)
    "zerogpu_quota": ("The GPU was not lent for this run: your ZeroGPU time for today is used up, so it runs on the "
                      "Space's CPU (slower). Sign in to Hugging Face for more GPU time, wait until it renews, or run "
                      "the playground on your own computer.",
                      "本次运行没有借到 GPU:你今天的 ZeroGPU 时长已用完,因此改在 Space 的 CPU 上运行(较慢)。"
                      "登录 Hugging Face 可获得更多 GPU 时长,也可以等额度恢复,或在自己的电脑上运行本演练场。"),
    "zerogpu_busy": ("No GPU was free in time for this run, so it runs on the Space's CPU (slower). Wait a minute "
                     "and try again, sign in to Hugging Face for a higher place in the GPU queue, or run the "
                     "playground on your own computer.",
                     "本次运行没有及时等到空闲的 GPU,因此改在 Space 的 CPU 上运行(较慢)。请稍等一分钟再试,"
                     "登录 Hugging Face 可在 GPU 队列中获得更高优先级,或在自己的电脑上运行本演练场。"),
    "zerogpu_failed": ("The GPU could not start this run, so it runs on the Space's CPU (slower). Try again in a "
                       "moment, or run the playground on your own computer.",
                       "GPU 未能启动本次运行,因此改在 Space 的 CPU 上运行(较慢)。请稍后再试,"
                       "或在自己的电脑上运行本演练场。"),
    # --- model card
    "card_property": ("Property", "属性"),
    "card_value": ("Value", "值"),
    "card_checkpoint": ("Checkpoint", "检查点"),
    "card_family": ("Family", "模型家族"),
    "card_type": ("Type", "类型"),
    "card_parameters": ("Parameters", "参数量"),
    "card_layers": ("Layers", "层数"),
    "card_layers_seq2seq": ("{encoder} encoder + {decoder} decoder", "编码器 {encoder} 层 + 解码器 {decoder} 层"),
    "card_heads": ("Heads / KV heads", "注意力头 / KV 头"),
    "card_gqa": ("GQA ({g} query heads per KV head)", "GQA(每个 KV 头对应 {g} 个查询头)"),
    "card_head_dim": ("Head dim", "头维度"),
    "card_d_model": ("d_model", "d_model"),
    "card_ffn": ("FFN", "前馈网络 (FFN)"),
    "card_norm": ("Norm", "归一化"),
    "card_positional": ("Positional encoding", "位置编码"),
    "card_vocabulary": ("Vocabulary", "词表大小"),
    "card_context": ("Context", "上下文长度"),
    "card_positions": ("{n} positions", "{n} 个位置"),
    "card_tied": ("Tied embeddings", "输入输出嵌入共享"),
    "card_dtype": ("dtype · device", "数据类型 · 设备"),
    "card_disk": ("Weights on disk", "权重文件大小"),
    "card_load_time": ("Load time", "加载耗时"),
    "card_chat": ("Chat template", "对话模板"),
    "card_tokenizer": ("Tokenizer", "分词器"),
    "card_tokenizer_missing": ("unavailable: {why}", "不可用:{why}"),
    "card_special_ids": ("Special ids", "特殊 token id"),
    "card_special_ids_outside": ("{ids}: outside the vocabulary, so never generated (as in transformers)",
                                 "{ids}:超出词表范围,永远不会被生成(与 transformers 相同)"),
    "card_encoder": ("Encoder stack", "编码器"),
    "card_decoder": ("Decoder stack", "解码器"),
    "card_stack": ("{layers} layers · {heads} heads / {kv_heads} KV heads · head dim {head_dim} · FFN {d_ff}",
                   "{layers} 层 · {heads} 个头 / {kv_heads} 个 KV 头 · 头维度 {head_dim} · FFN {d_ff}"),
    "cache_layers_differ": ("**Per layer** (sliding-window layers keep only their window):",
                            "**每一层**(滑动窗口层只保留窗口内的 token):"),
    "cache_layer_row": ("- layer {layer}: {attention}, window {window}, {tokens} tokens held, K and V {shape} each, {bytes}",
                        "- 第 {layer} 层:{attention},窗口 {window},保存 {tokens} 个 token,K、V 形状均为 {shape},{bytes}"),
    "card_yes": ("yes", "有"),
    "card_no": ("no", "无"),
    # --- KV tab
    "cache_summary": ("**Tokens cached:** {tokens} of {max} allocated · **used** {used} vs **allocated** {allocated}",
                      "**已缓存 token:** {tokens} / 已分配 {max} · **已用** {used},**已分配** {allocated}"),
    "cache_mha": (" · **MHA equivalent** {mha}", " · **MHA 等价** {mha}"),
    "cache_per_layer": ("**Per layer:** K and V each of shape (B, h_kv, T, d_head) = {shape} × {layers} layers",
                        "**每一层:** K 和 V 的形状均为 (B, h_kv, T, d_head) = {shape},共 {layers} 层"),
    "cache_cross": ("**Cross-attention cache** (computed once from the encoder output): {layers} layers · {heads} heads · "
                    "{tokens} source tokens · {dims} dims → {bytes}",
                    "**交叉注意力缓存**(由编码器输出一次算出):{layers} 层 · {heads} 个头 · {tokens} 个源 token · "
                    "{dims} 维 → {bytes}"),
    "unexpected": ("Something went wrong ({what}). The app is still running; try again or pick another model.",
                   "出错了({what})。应用仍在运行;请重试或换一个模型。"),
}

STRINGS.update(LAB_STRINGS)  # the causal lab's words live in their own module

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

STRINGS.update({
    "status_ready": ("Ready: type a prompt and press Generate.", "就绪:输入提示词并点击“生成”。"),
    "status_waiting": ("Waiting for a place in the shared batch: number {position} in line.",
                       "正在排队等待加入共享批次:排在第 {position} 位。"),
    "status_waiting_for": ("Waiting for a place in the shared batch: number {position} in line, at most {s} s.",
                           "正在排队等待加入共享批次:排在第 {position} 位,最多 {s} 秒。"),
    "status_running": ("Generating… {n} tokens so far", "正在生成……已生成 {n} 个 token"),
    "status_running_one": ("Generating… 1 token so far", "正在生成……已生成 1 个 token"),
    "status_starting": ("Started: reading the prompt, the first token comes next…",
                        "已开始:正在读取提示词,接下来是第一个 token……"),
    "status_done": ("Done: {n} tokens ({why}).", "完成:{n} 个 token({why})。"),
    "status_done_one": ("Done: 1 token ({why}).", "完成:1 个 token({why})。"),
    "status_stopped": ("Stopped after {n} tokens (you pressed Stop).", "已在 {n} 个 token 后停止(你按下了“停止”)。"),
    "status_stopped_one": ("Stopped after 1 token (you pressed Stop).", "已在 1 个 token 后停止(你按下了“停止”)。"),
    "status_seed": ("Seed {seed}.", "种子 {seed}。"),
    "status_error": ("Error: {message}", "错误:{message}"),
    "reason_eos": ("the model emitted end-of-sequence", "模型输出了结束符"),
    "reason_length": ("max new tokens reached", "达到最多生成的 token 数"),
    "reason_stop_string": ("a stop string appeared", "出现了停止字符串"),
    "rate": ("{tps} tokens/s · prefill {prefill} ms · {decode} ms per token",
             "{tps} token/秒 · Prefill {prefill} 毫秒 · 每个 token {decode} 毫秒"),
    "legend": ("Shading = the probability each token was chosen with", "底色 = 每个 token 被选中时的概率"),
    "legend_low": ("low", "低"),
    "legend_high": ("high", "高"),
    "legend_hint": ("hover: id and p · click a token, or ← / →, to inspect a step",
                    "悬停查看 id 和概率 · 点击 token 或用 ← / → 查看某一步"),
    "step_of": ("Step {step} of {n}", "第 {step} 步 / 共 {n} 步"),
    "following": ("following the newest token", "正在跟随最新的 token"),
    "back_to_live": ("Follow the newest token", "跟随最新 token"),
    "chose": ("chose {token} with p = {p}", "选中 {token},p = {p}"),
    "forced_token": ("chosen by you (branch)", "由你选定(分支)"),
    "cand_title": ("Candidates", "候选词"),
    "cand_hint": ("Probability after each stage: softmax of the logits, then repetition penalty → temperature → top-k → "
                  "top-p. Grey: removed by a filter. ↪ continues from this step with that token instead.",
                  "每个阶段后的概率:logits 的 softmax,然后依次经过重复惩罚 → 温度 → Top-k → Top-p。"
                  "灰色:被过滤掉。↪:从这一步改用该 token 继续生成。"),
    "cand_token": ("token", "token"),
    "stage_raw": ("softmax", "softmax"),
    "stage_repetition_penalty": ("penalty", "重复惩罚"),
    "stage_temperature": ("temperature", "温度"),
    "stage_top_k": ("top-k", "Top-k"),
    "stage_top_p": ("top-p", "Top-p"),
    "stage_min_p": ("min-p", "Min-p"),
    "stage_forced_bos": ("forced BOS", "强制 BOS"),
    "stage_forced_eos": ("forced EOS", "强制 EOS"),
    "removed_by": ("removed by {stage}", "被 {stage} 过滤"),
    "branch_here": ("continue from step {step} with {token}", "从第 {step} 步改用 {token} 继续"),
    "type_token": ("or type text to continue with", "或输入要改用的文本"),
    "continue": ("↪ Continue", "↪ 继续"),
    "att_title": ("Where this token looked", "这个 token 看向哪里"),
    "att_hint": ("softmax(QKᵀ/√d)·V: the weights of the query that chose this token over every earlier token "
                 "(self-attention) or over the source (cross-attention), drawn on the tokens themselves.",
                 "softmax(QKᵀ/√d)·V:选出该 token 的查询对之前每个 token(自注意力)或对源文本(交叉注意力)的权重,"
                 "直接画在 token 上。"),
    "att_layer": ("layer", "层"),
    "att_head": ("head", "头"),
    "att_mean": ("mean of heads", "所有头平均"),
    "att_max": ("max of heads", "所有头最大"),
    "att_group": ("KV group {g}", "KV 组 {g}"),
    "att_scale": ("scale", "色阶"),
    "att_linear": ("linear", "线性"),
    "att_log": ("log", "对数"),
    "att_sink": ("hide 1st token (sink)", "隐藏首 token(汇聚点)"),
    "att_self": ("self", "自注意力"),
    "att_cross": ("cross (source)", "交叉(源文本)"),
    "att_off": ("Attention was not recorded: tick “Record attention” and generate again.",
                "未记录注意力:勾选“生成时记录注意力”后重新生成。"),
    "att_loading": ("computing…", "计算中……"),
    "att_query": ("query: {token}", "查询:{token}"),
    "kv_title": ("KV cache", "KV Cache"),
    "kv_hint": ("Every layer keeps K and V of each token, so a new token attends without recomputing them.",
                "每一层保存每个 token 的 K 和 V,新 token 做注意力时无需重新计算。"),
    "kv_symbols": ("2: K and V · N_layers: layers · B: batch (beams) · h_kv: key/value heads · T: tokens cached · "
                   "d_head: numbers per head · s: bytes per number",
                   "2:K 和 V · N_layers:层数 · B:批大小(束数)· h_kv:K/V 头数 · T:已缓存 token 数 · "
                   "d_head:每个头的维度 · s:每个数的字节数"),
    "kv_used": ("{used} used of {allocated} allocated", "已用 {used} / 已分配 {allocated}"),
    "kv_mha": ("full multi-head attention (MHA) would need {mha}", "若为完整多头注意力(MHA)需 {mha}"),
    "kv_cross": ("cross-attention cache: {bytes} for {tokens} source tokens, computed once",
                 "交叉注意力缓存:{tokens} 个源 token 共 {bytes},只计算一次"),
    "kv_off": ("The KV cache is off for this run: every step recomputes the whole sequence.",
               "本次运行未使用 KV Cache:每一步都重新计算整个序列。"),
    "kv_at_step": ("at step {step}: {tokens} tokens, {bytes}", "第 {step} 步时:{tokens} 个 token,{bytes}"),
    "beams_title": ("Beams now (score = Σ log p in nats; finished beams ÷ length^α)",
                    "当前的束(得分 = Σ log p,单位 nats;已完成的束再除以 长度^α)"),
    "beam_finished": ("finished", "已完成"),
    "branches_title": ("Branches: compare", "分支对比"),
    "run_label": ("run {n}", "第 {n} 次运行"),
    "branch_label": ("run {n} · branch of run {parent} at step {step}", "第 {n} 次运行 · 第 {parent} 次运行第 {step} 步的分支"),
    "prompt_label": ("prompt", "提示词"),
    "source_label": ("source", "源文本"),
    "queued_at": ("Waiting for a free slot: {pos} of {size} in line…", "正在排队:第 {pos} 位,共 {size} 位……"),
    "no_tokens": ("No tokens yet.", "还没有 token。"),
    "cand_none": ("Candidates were not recorded (Candidates shown per step is 0).", "未记录候选词(每步显示的候选数为 0)。"),
})


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
