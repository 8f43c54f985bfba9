"""The causal lab's words, English and 中文 (merged into `playground.app.words.STRINGS`). No Gradio here."""

from __future__ import annotations

LAB_STRINGS: dict[str, tuple[str, str]] = {
    "tab_lab": ("Causal lab", "因果实验室"),
    "lab_intro": (
        "Change one part of the model and run the prompt again, watching the new run fork from the original "
        "token by token. **Ablate** a head (its output set to zero) or a layer's MLP, or **steer**: add a "
        "direction to the residual stream after a block. Then see what the edit changed at each step, and why the "
        "chosen token won.",
        "改动模型的一个部件,再把提示词跑一遍,逐个 token 看新运行如何从原来的运行分叉出去。"
        "**消融**一个注意力头(把它的输出置零)或某一层的 MLP,或者**引导**:在某个块之后的残差流上加一个方向。"
        "然后看这次改动在每一步改变了什么,以及被选中的 token 为什么胜出。",
    ),
    "lab_layer": ("Layer", "层"),
    "lab_head": ("Head", "头"),
    "lab_ablate_head": ("Ablate this head and fork", "消融这个头并分叉"),
    "lab_ablate_mlp": ("Ablate this layer's MLP and fork", "消融这一层的 MLP 并分叉"),
    "lab_sweep": ("Ablate every head of this layer, one at a time", "逐个消融这一层的每个头"),
    "lab_sweep_stop": ("Stop the sweep", "停止扫描"),
    "lab_versus": ("Why this token and not the runner-up", "为什么是它,而不是第二名"),
    "lab_steer_title": ("### Steer from a contrast pair", "### 用一对对比提示词来引导"),
    "lab_positive": ("Towards (a prompt)", "朝向(一个提示词)"),
    "lab_negative": ("Away from (a prompt)", "远离(一个提示词)"),
    "lab_scale": ("Scale", "倍数"),
    "lab_steer": ("Steer and fork", "引导并分叉"),
    "lab_needs_run": ("Generate once: the lab edits that run.", "先生成一次:实验室改动的就是那次运行。"),
    "lab_run": ("Read the run", "读取哪次运行"),
    "lab_side_shown": ("Run {n}, the one on screen", "第 {n} 次运行(屏幕上这次)"),
    "lab_side_original": ("Run {n}, its original", "第 {n} 次运行(它的原始运行)"),
    "lab_patch_title": ("### Patch from another prompt", "### 用另一个提示词做激活修补"),
    "lab_patch_intro": (
        "Activation patching: type a second prompt of the same length in tokens that differs in one place "
        "(“… of Italy is” against “… of France is”). The residual stream after the chosen block, at the chosen "
        "position, is taken from it and put into this run: if the answer follows, that place carries it.",
        "激活修补:输入第二个提示词,token 数与这次相同,只在一处不同(例如把“法国”换成“意大利”)。"
        "它在所选块之后、所选位置上的残差流会被放进这次运行:如果答案随之改变,信息就在那个位置上。",
    ),
    "lab_patch_prompt": ("The other prompt (same number of tokens)", "另一个提示词(token 数相同)"),
    "lab_patch_position": ("Position (−1: where the two prompts differ)", "位置(−1:两个提示词不同的地方)"),
    "lab_patch_layer": ("After block", "在第几个块之后"),
    "lab_patch": ("Patch and fork", "修补并分叉"),
    "lab_patch_empty": ("Type the other prompt to patch from.", "请输入用来修补的另一个提示词。"),
    "lab_patch_seq2seq": ("Patching from another prompt works on decoder-only models.",
                          "用另一个提示词修补只适用于仅解码器模型。"),
    "lab_patch_length": (
        "The two prompts must be the same number of tokens so that their positions line up: this run's has {run}, "
        "the other {other}. Change one word for another of the same length in tokens.",
        "两个提示词的 token 数必须相同,位置才能一一对应:这次运行的有 {run} 个,另一个有 {other} 个。"
        "请把一个词换成 token 数相同的另一个词。",
    ),
    "lab_patch_layer_bad": ("Pick a block from 0 to {last}.", "请选择 0 到 {last} 之间的块。"),
    "lab_patch_position_bad": ("Pick a position from 0 to {last} (−1: the last).", "请选择 0 到 {last} 之间的位置(−1:最后一个)。"),
    "lab_patch_done": (
        "Patching the residual after block {layer} at position {position}: this run's “{token}” gets what "
        "“{other}” left there in the other prompt.",
        "修补第 {layer} 个块之后、位置 {position} 上的残差:这次运行的“{token}”换成另一个提示词中“{other}”留下的残差。",
    ),
    "lab_reads": ("In run {n} (no edit), step {step}:", "第 {n} 次运行(无改动),第 {step} 步:"),
    "lab_reads_edited": ("In run {n} ({edit}), step {step}:", "第 {n} 次运行({edit}),第 {step} 步:"),
    "lab_after_run": ("The lab reads the run once it has finished.", "运行结束后,实验室才会读取它。"),
    "lab_plain": (
        "This run has no edit. Pick a layer and a head (the all-heads grid of the Attention tab shows what each "
        "one looks at) and ablate it, or steer: the edited run forks beside this one, and this panel then shows "
        "what the edit changed.",
        "这次运行没有改动。选一层和一个头(“注意力”页的全部头网格显示每个头在看哪里)把它消融,或者引导:"
        "改动后的运行会在这次运行旁边分叉出来,这个面板随后显示改动改变了什么。",
    ),
    "lab_edited": ("**This run's edit:** {edit}. Compared with run {n}, the same prompt without it.",
                   "**这次运行的改动**:{edit}。对比对象是第 {n} 次运行:同一个提示词,没有改动。"),
    "lab_no_original": ("**This run's edit:** {edit}. The run without it is no longer kept: press Generate for it, "
                        "then fork again.",
                        "**这次运行的改动**:{edit}。没有改动的那次运行已不再保留:先点“生成”,再分叉一次。"),
    "lab_step": (
        "At step {step}, the original chose “{token}” with probability {p0:.3f}; under the edit it has probability "
        "{p:.3f} (rank {rank}), and the two next-token distributions differ by KL {kl:.4f} nats.",
        "在第 {step} 步,原始运行以概率 {p0:.3f} 选了“{token}”;改动后它的概率是 {p:.3f}(排第 {rank}),"
        "两个下一 token 分布之间的 KL 为 {kl:.4f} nats。",
    ),
    "lab_step_beyond": ("Step {step} is past the original's last token; the figure shows every step they share.",
                        "第 {step} 步已超出原始运行的最后一个 token;图中显示两者共有的每一步。"),
    "lab_same_text": ("The two texts are the same: the edit moved the probabilities, not the choices.",
                      "两段文本完全相同:改动移动了概率,却没有改变选择。"),
    "lab_parted": ("The texts part at step {step}.", "两段文本从第 {step} 步开始分开。"),
    "ablate_head": ("ablate head {layer}.{head}", "消融第 {layer} 层第 {head} 个头"),
    "ablate_mlp": ("ablate the MLP of layer {layer}", "消融第 {layer} 层的 MLP"),
    "ablate_mean": ("mean-ablate {what}", "均值消融 {what}"),
    "steer_edit": ("steer after block {layer}: {scale:g} × a vector of norm {norm:.3g}",
                   "在第 {layer} 个块之后引导:{scale:g} × 一个范数为 {norm:.3g} 的向量"),
    "patch_edit": ("patch the residual after block {layer} at position {position}",
                   "替换第 {layer} 个块之后、位置 {position} 上的残差"),
    "lab_vector": (
        "The contrast vector at layer {layer} has norm **{norm:.1f}**; the residual stream there is typically "
        "**{typical:.1f}** long, so scale {scale:g} adds a push of {push:.0%} of its length at every position.",
        "第 {layer} 层的对比向量范数为 **{norm:.1f}**;那里的残差流通常长 **{typical:.1f}**,"
        "所以倍数 {scale:g} 在每个位置加上相当于其长度 {push:.0%} 的推力。",
    ),
    "lab_steer_long": ("Each text of the contrast pair may hold at most {n} tokens on this model: shorten it "
                       "(a short phrase makes a clearer direction anyway).",
                       "在这个模型上,对比对的每段文字最多 {n} 个 token:请缩短(短语给出的方向反而更清楚)。"),
    "lab_steer_empty": ("Type both prompts of the contrast pair.", "请填写对比对的两个提示词。"),
    "lab_too_many": ("A run carries at most {n} edits; start from a plain run.", "一次运行最多带 {n} 个改动;请从一次普通运行开始。"),
    "lab_sweep_budget": (
        "This sweep needs about {need:.2g} floating-point operations, over this server's {cap:.2g} per request: "
        "select an earlier step or use a shorter prompt.",
        "这次扫描约需 {need:.2g} 次浮点运算,超过本服务器每个请求 {cap:.2g} 次的上限:请选更早的一步或用更短的提示词。",
    ),
    "lab_sweep_done": (
        "Ablating each head of layer {layer} alone at step {step}: without head {layer}.{head}, “{token}” loses "
        "{drop:.3f} nats of log-probability, the most of this layer.",
        "在第 {step} 步逐个单独消融第 {layer} 层的每个头:去掉第 {layer} 层第 {head} 个头时,“{token}”的对数概率"
        "下降 {drop:.3f} nats,是这一层里最多的。",
    ),
    "lab_sweep_stopped": ("Stopped after {done} of {total} heads.", "在 {total} 个头中完成 {done} 个后停止。"),
    "lab_sweep_progress": ("head {done} of {total}", "第 {done} / {total} 个头"),
    "lesson_lab": ("Causal lab: ablate and steer", "因果实验室:消融与引导"),
    "lesson_lab_text": (
        "**The causal lab: ablate and steer.** Attention maps show where a model looks; an edit shows what a part "
        "is *for*. Open the **Causal lab** tab under the live screen to try each step on your own run.\n\n"
        "1. **Why this token.** The residual stream that picks a token is a sum of parts (the embeddings, each "
        "head, each MLP), and with each norm frozen at its scale for that step the parts add up exactly to the "
        "token's logit. Measured on SmolLM2-135M-Instruct: asked “What is the capital of France?” it answers "
        "“The capital of France is Paris.”; the biggest direct pushes for “ Paris” (logit 13.67) are MLP 27 "
        "(+2.99), head 23.4 (+2.81) and MLP 28 (+2.73), and the next head is 29.1 (+2.28).\n"
        "2. **Ablate one head.** Zero head 23.4's output at every step and the run forks beside the original. "
        "The text stays the same, but “ Paris” falls from probability 0.951 to 0.634: 0.41 nats, the KL of that "
        "step is 0.35 nats. Ablating every head of layer 23 one at a time ranks head 23.4 first by far (0.41 "
        "nats; no other head of the layer costs more than 0.01).\n"
        "3. **Ablate a whole layer's heads.** With all nine heads of layer 23 zeroed, the model answers "
        "“The capital of France is Tokyo, also known as the City”: one head alone moved a probability, the "
        "nine together changed the answer.\n"
        "4. **Steer.** The mean residual after block 10 of “I love you” minus that of “I hate you” is a vector "
        "of norm 24.6, where the residual is typically 143 long. Added at scale 4 (a push of about 69% of the "
        "stream's length) to every position of “Tell me about your day”, the answer changes from “It's a "
        "pleasure to share my day with you. I'm a bit of a bit of a” to “I'm delighted to know that!”. At scale "
        "8 the text falls apart (“Science, Science, …”): a steering vector is a nudge, and too large a nudge "
        "leaves the model's usual range.\n\n"
        "Below: why the selected token of your current run won.",
        "**因果实验室:消融与引导。** 注意力图显示模型看向哪里;改动一个部件,才能看出它是*做什么用的*。"
        "在实时画面下方打开 **因果实验室** 标签页,可以在你自己的运行上逐步尝试。\n\n"
        "1. **为什么是这个 token。** 选出 token 的残差流是若干部分之和(嵌入、每个头、每个 MLP);把每个归一化层"
        "按这一步的缩放冻结后,这些部分恰好加起来等于该 token 的 logit。在 SmolLM2-135M-Instruct 上实测:"
        "问它 “What is the capital of France?”,它回答 “The capital of France is Paris.”;对 “ Paris”"
        "(logit 13.67)直接推动最大的是第 27 层 MLP(+2.99)、第 23 层第 4 个头(+2.81)和第 28 层 MLP(+2.73),"
        "其次的头是第 29 层第 1 个头(+2.28)。\n"
        "2. **消融一个头。** 在每一步把第 23 层第 4 个头的输出置零,运行就在原运行旁边分叉出来。文本没有变,"
        "但 “ Paris” 的概率从 0.951 降到 0.634:少了 0.41 nats,这一步的 KL 为 0.35 nats。逐个消融第 23 层的每个头,"
        "第 4 个头远远排在第一(0.41 nats;这一层其他头都不超过 0.01)。\n"
        "3. **消融整层的头。** 把第 23 层的九个头全部置零,模型回答 “The capital of France is Tokyo, also known "
        "as the City”:单独一个头只移动了概率,九个头一起才改变了答案。\n"
        "4. **引导。** 第 10 个块之后,“I love you” 的平均残差减去 “I hate you” 的平均残差,得到一个范数为 24.6 "
        "的向量,而那里的残差通常长 143。以倍数 4(约为残差长度 69% 的推力)加到 “Tell me about your day” 的"
        "每个位置上,回答从 “It's a pleasure to share my day with you. I'm a bit of a bit of a” 变成 "
        "“I'm delighted to know that!”。倍数为 8 时文本就散架了(“Science, Science, …”):引导向量是轻推,"
        "推得太猛,模型就离开了它平常的范围。\n\n"
        "下图:你当前运行中选中的 token 为什么胜出。",
    ),
}
