"""Chat templates render exactly as transformers renders them, inside bounds on time, work and size."""

from __future__ import annotations

import pytest

import playground
from playground.chat_template import TemplateLimits, render_chat
from playground.errors import ChatTemplateError
from tests.library.test_hostile import refused
from tests.ui_fixtures import save_tiny_decoder

CONVERSATION = [
    {"role": "system", "content": "  Be brief.  "},
    {"role": "user", "content": "What is 2+2? <b>bold</b> {{ not a tag }}"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3+3?\n"},
]

# Written after the templates of Llama 3.1, Qwen 2.5 and Mistral: raise_exception, loop.first / last /
# index0, namespace, trim, tojson, strftime_now, macros, string methods, % and ~, the generation tag.
LLAMA3 = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + strftime_now("%Y") + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

QWEN = """{%- set ns = namespace(system=false, count=0) %}
{%- for message in messages %}
    {%- if loop.first and message.role == 'system' %}{% set ns.system = true %}{% endif %}
    {%- set ns.count = ns.count + 1 %}
{%- endfor %}
{%- if not ns.system %}{{- '<|im_start|>system\\nYou are Qwen. ' ~ ({'n': ns.count, 'tools': none}|tojson) ~ '<|im_end|>\\n' }}{%- endif %}
{%- for message in messages %}
    {{- '<|im_start|>' + message.role + '\\n' + message.content }}
    {%- if loop.last and message.role == 'user' %}{{ ' (last of %d)' % (messages|length) }}{% endif %}
    {{- '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

MACROS = """{% macro turn(m) -%}
[{{ m.role|upper }}] {{ m.content|replace('\\n', ' ')|indent(2) }}{{ ' #%s' % loop_i if loop_i is defined }}
{%- endmacro %}
{%- for m in messages %}{{ turn(m) }}{{ '|' if not loop.last }}{% endfor %}
{{- ', '.join(['a', 'b']) ~ '{}:{}'.format(eos_token, messages|length) }}
{%- for x in [[1, [2, 3]], 4] recursive %}({% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}{% endif %}){% endfor %}
{% generation %}{{ 'gen ' ~ (messages|map(attribute='role')|join('+')) }}{% endgeneration %}
{{ range(3)|list|tojson(indent=2) }}{{ dict(a=1, b=[2])|tojson }}{% if add_generation_prompt %}<|assistant|>{% endif %}"""

UI_FIXTURE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
              "{% if add_generation_prompt %}<s>assistant: {% endif %}")


@pytest.fixture(scope="module")
def char_lm(tmp_path_factory):
    return playground.load_model(save_tiny_decoder(tmp_path_factory.mktemp("chat")))


@pytest.mark.parametrize("name,template", [("llama3", LLAMA3), ("qwen", QWEN), ("macros", MACROS), ("ui", UI_FIXTURE)])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_templates_render_exactly_as_transformers(char_lm, name, template, add_generation_prompt):
    tok = char_lm.tokenizer
    want = tok.apply_chat_template(CONVERSATION, chat_template=template, add_generation_prompt=add_generation_prompt,
                                   tokenize=False)
    got = render_chat(template, CONVERSATION, add_generation_prompt=add_generation_prompt,
                      variables=dict(tok.special_tokens_map))
    assert got == want and len(got) > 50


def test_raise_exception_is_one_line_with_the_templates_reason(char_lm):
    broken = [CONVERSATION[1], CONVERSATION[1]]
    with pytest.raises(ChatTemplateError) as caught:
        render_chat(LLAMA3, broken, variables=dict(char_lm.tokenizer.special_tokens_map))
    assert str(caught.value) == ("the chat template refused this conversation: "
                                 "Conversation roles must alternate user/assistant/user/assistant/...")


def test_tokenize_chat_matches_apply_chat_template_ids(char_lm):
    tok = char_lm.tokenizer
    tok.chat_template = QWEN
    try:
        want = tok.apply_chat_template([{"role": "user", "content": "Hi there"}], add_generation_prompt=True,
                                       tokenize=True, return_dict=False)
        assert char_lm.tokenize("Hi there", chat=True) == list(want)
    finally:
        tok.chat_template = None


@pytest.mark.slow
def test_smollm2_real_template_gives_transformers_text_and_ids(smollm2_dir):
    lm = playground.load_model(smollm2_dir)  # the fixture imports it on a first run (never a skip decided earlier)
    tok = lm.tokenizer
    for messages in ([{"role": "user", "content": "What is the capital of France?"}], CONVERSATION):
        want = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert lm.render_chat(messages) == want
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    assert lm.tokenize("What is the capital of France?", chat=True) == list(ids)


BOMBS = {
    "nested ranges": ("{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}", ""),
    "a huge range": ("{% for i in range(10**9) %}{% endfor %}", "a range of 1,000,000,000 items"),
    "string times a billion": ("{{ 'x' * 1000000000 }}", "a repeated string"),
    "doubling with ~": ("{% set ns = namespace(x='ab') %}{% for i in range(64) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}",
                        "a string of more than 1,000,000 characters"),
    "doubling with +": ("{% set ns = namespace(x=[1]) %}{% for i in range(64) %}{% set ns.x = ns.x + ns.x %}{% endfor %}",
                        "a list of"),
    "a huge power": ("{{ 7 ** 10000000 }}", "raises integers past 4096 bits"),
    "squaring": ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
                 "multiplies integers"),
    "center": ("{{ 'a'|center(10**9) }}", "a centred string"),
    "ljust": ("{{ 'a'.ljust(10**9) }}", "ljust()"),
    "percent width": ("{{ '%0999999999d' % 1 }}", "a width of a million characters"),
    "format width": ("{{ '{:>{w}}'.format('', w=10**9) }}", "a width over 1,000,000"),
    "join a big separator": ("{{ range(100000)|join('x' * 100000) }}", "a joined string"),
    "printing shared references": ("{% set l = ['x' * 500000] * 100000 %}{{ l }}", "more than 1,000,000 characters"),
    "replace amplification": ("{% set ns = namespace(x='a' * 1000) %}{% for i in range(30) %}{% set ns.x = ns.x|replace('a', 'aa') %}{% endfor %}",
                              "a replaced string"),
    "set block": ("{% set s %}{% for i in range(100000) %}{{ 'y' * 900 }}{% endfor %}{% endset %}", "writes more than"),
    "macro recursion": ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursed too deeply"),
    "exponential macros": ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}", ""),
    "recursive loop": ("{% for x in [1] recursive %}{{ loop([1, 2]) }}{% endfor %}", "recursed too deeply"),
    "sandbox escape": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "the sandbox forbids"),
    "mutating a list": ("{% set l = [] %}{{ l.append(1) }}", "the sandbox forbids"),
    "namespace dunder": ("{% set ns = namespace() %}{% set ns.__class__ = 1 %}", "underscore-prefixed"),
    "syntax": ("{% for %}", "does not parse (line 1"),
    "include": ("{% include 'x' %}", "turn chat off"),
    "lipsum flood": ("{{ lipsum(n=10**6) }}", "lipsum"),
    "sum of lists": ("{{ ([[1] * 100] * 100)|sum(start=[]) }}", "sums lists"),
}


@pytest.mark.parametrize("case", list(BOMBS))
def test_template_bombs_are_refused_quickly_in_one_line(case):
    template, fragment = BOMBS[case]
    message = refused(f"template: {case}", lambda: render_chat(template, CONVERSATION), ChatTemplateError, fragment)
    assert message.startswith("the chat template")


def test_bounds_are_per_render_and_configurable():
    small = TemplateLimits(max_steps=50)
    with pytest.raises(ChatTemplateError, match="more than 50 loop iterations"):
        render_chat("{% for i in range(100) %}{% endfor %}", [], limits=small)
    assert render_chat("{% for i in range(40) %}{% endfor %}ok", [], limits=small) == "ok"  # counters start afresh
    with pytest.raises(ChatTemplateError, match="characters .at most 100"):
        render_chat("x" * 101, [], limits=TemplateLimits(max_template_chars=100))
    with pytest.raises(ChatTemplateError, match="writes more than 10 characters"):
        render_chat("{{ messages[0].content }}", [{"role": "user", "content": "a" * 11}],
                    limits=TemplateLimits(max_output_chars=10))
