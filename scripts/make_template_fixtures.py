#!/usr/bin/env python3
"""Write the golden fixtures for the C chat-template interpreter (t/unit/test_chat_template.c).

Every template in the test-data directory is rendered with jinja2 configured exactly as HF transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
the {% generation %} tag, transformers' tojson / raise_exception / strftime_now / namespace / dict), on a
shared set of conversations. Each case stores the exact context handed to the renderer and either the
rendered text or the exception message. strftime_now uses a fixed instant (FIXED_NOW, UTC) so the C test can
pin its clock to the same one.

  scripts/make_template_fixtures.py [--templates DIR] [--out t/fixtures/templates]

Also writes _semantics.json: small template/context/expected snippets for expression semantics, and
_malformed.json: templates jinja2 itself refuses to compile (the C side must refuse them too).
When transformers is importable, each rendering is cross-checked against transformers' own
render_jinja_template (templates that read the clock excepted).
"""
import argparse
import copy
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = 1721952000  # 2024-07-26 00:00:00 UTC

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class Generation(Extension):
    """transformers' AssistantTracker, minus the index tracking: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


class TemplateNamespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError("underscore-prefixed namespace attribute %r" % name)


class TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(FIXED_NOW, timezone.utc).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


def alias_reasoning(messages):
    """transformers' _alias_reasoning_fields (the C renderer does the same to "messages")."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise TypeError("Chat messages should be dicts, but got %r." % (m,))
        r = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
        if r is not None:
            m = {"thinking": r, **m, "reasoning_content": r}
        out.append(m)
    return out


# ---------------------------------------------------------------------------------------------------------
# Conversations

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web — returns snippets",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "max_results": {"type": "integer", "description": "how many", "default": 5},
                "filters": {"type": "array", "items": {"type": "string"}},
                "strict": {"type": "boolean"},
                "score": {"type": "number", "minimum": 0.5},
            },
            "required": ["query"],
        },
        "return": {"type": "array", "items": {"type": "string"}},
    },
}


def tc(name, args, id_="call_abc123", as_string=False):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def conv(name, messages, agp=True, tools=None, documents=None, **kw):
    return {"name": name, "messages": messages, "add_generation_prompt": agp, "tools": tools,
            "documents": documents, "kwargs": kw}


U = lambda c: {"role": "user", "content": c}
A = lambda c: {"role": "assistant", "content": c}
S = lambda c: {"role": "system", "content": c}
T = lambda c, id_="call_abc123", name=None: dict({"role": "tool", "content": c, "tool_call_id": id_},
                                                 **({"name": name} if name else {}))

CONVERSATIONS = [
    conv("single_user", [U("Hello!")]),
    conv("single_user_no_gen", [U("Hello!")], agp=False),
    conv("system_user", [S("You are a terse assistant."), U("What is 2+2?")]),
    conv("multi_turn", [S("Be nice."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")]),
    conv("multi_turn_no_gen", [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke."),
                               A("Why did the chicken cross the road?")], agp=False),
    conv("three_turns", [U("a"), A("b"), U("c"), A("d"), U("e"), A("f"), U("g")]),
    conv("unicode", [S("Réponds en français. 日本語もOK"), U("こんにちは 👋🏽 — naïve café, e\u0301, עברית, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
                     A("Bonjour ! 😀"), U("Ça va ? 你好吗？")]),
    conv("empty_user", [U("")]),
    conv("empty_system", [S(""), U("hi")]),
    conv("template_like_text", [U("{{ x }} {% if y %} {# z #} \\n 'quotes' \"double\" \\ backslash\ttab")]),
    conv("whitespace_content", [U("  \n  padded with spaces and newlines \n\n"), A("\n\n  answer  \n"), U(" \t")]),
    conv("roles_not_alternating", [U("first"), U("second")]),
    conv("starts_with_assistant", [A("I speak first."), U("ok")]),
    conv("system_only", [S("System prompt only.")]),
    conv("long_conversation", [S("sys")] + [m for i in range(8) for m in (U("question %d" % i), A("answer %d" % i))]
         + [U("last question")]),
    conv("tools_user", [U("What's the weather in Paris?")], tools=[WEATHER_TOOL, SEARCH_TOOL]),
    conv("tools_system_user", [S("You can call tools."), U("Weather in Zürich?")], tools=[WEATHER_TOOL]),
    conv("tool_call_roundtrip", [U("Weather in Paris?"),
                                 {"role": "assistant", "content": "", "tool_calls": [tc("get_weather", {"city": "Paris"}, "call_000000001")]},
                                 T("{\"temperature\": 21.5, \"sky\": \"clear\"}", "call_000000001", "get_weather"),
                                 A("It is 21.5 °C and clear in Paris.")], agp=False, tools=[WEATHER_TOOL]),
    conv("tool_calls_parallel", [S("Use tools."), U("Weather in Paris and Rome, and search news"),
                                 {"role": "assistant", "content": None, "tool_calls": [
                                     tc("get_weather", {"city": "Paris", "unit": "celsius"}, "call_000000001"),
                                     tc("get_weather", {"city": "Rome"}, "call_000000002"),
                                     tc("search", {"query": "news ☀", "max_results": 3, "strict": True,
                                                   "score": 0.75, "filters": ["a", "b"], "x": None}, "call_000000003")]},
                                 T("sunny", "call_000000001", "get_weather"), T("rainy", "call_000000002", "get_weather"),
                                 T("[\"headline\"]", "call_000000003", "search")], tools=[WEATHER_TOOL, SEARCH_TOOL]),
    conv("tool_call_string_args", [U("Search for cats"),
                                   {"role": "assistant", "content": "Let me search.",
                                    "tool_calls": [tc("search", {"query": "cats", "max_results": 2}, "call_000000009", as_string=True)]},
                                   T("cats are great", "call_000000009", "search")], tools=[SEARCH_TOOL]),
    conv("reasoning_content", [U("2+2?"), {"role": "assistant", "content": "4", "reasoning_content": "Adding two and two."},
                               U("and 3+3?")]),
    conv("think_in_content", [U("2+2?"), A("<think>\nsimple arithmetic\n</think>\n\n4"), U("3+3?"),
                              A("<think>again</think>6")], agp=False),
    conv("no_thinking", [U("Quick answer please")], enable_thinking=False),
    conv("thinking_on", [U("Think hard")], enable_thinking=True, thinking=True),
    conv("empty_messages", []),
    conv("list_content", [{"role": "user", "content": [{"type": "text", "text": "Describe this."}]}]),
    conv("numbers_in_content", [U("π ≈ 3.14159, e = 2.71828, 1e-7, 10^20")]),
    conv("documents", [U("What do the documents say?")],
         documents=[{"title": "Doc A", "text": "Alpha text."}, {"title": "Doc B", "text": "Beta — text."}]),
    conv("custom_date", [S("sys"), U("What day is it?")], date_string="01 Jan 2025"),
    conv("assistant_last_gen", [U("Start"), A("Partial answer")], agp=True),
    # template-specific switches: each template reads the ones it knows and ignores the rest
    conv("builtin_tools", [U("Look this up and compute 2**10")], tools=[WEATHER_TOOL], builtin_tools=["browser", "python"]),
    conv("ipython_role", [U("Weather?"),
                          {"role": "assistant", "content": "", "tool_calls": [tc("get_weather", {"city": "Oslo"}, "abc123xyz")]},
                          {"role": "ipython", "content": "cold"}], tools=[WEATHER_TOOL]),
    conv("tools_in_system", [S("sys prompt"), U("Weather in Lima?")], tools=[WEATHER_TOOL], tools_in_user_message=False),
    conv("reasoning_effort", [S("Answer briefly."), U("hi")], reasoning_effort="high",
         model_identity="You are a test model."),
    conv("thinking_and_tool_call", [U("Weather in Kyiv?"),
                                    {"role": "assistant", "content": "", "thinking": "I should call the tool.",
                                     "tool_calls": [tc("get_weather", {"city": "Kyiv"}, "k1y2v3a4b")]},
                                    T("mild", "k1y2v3a4b", "get_weather"),
                                    {"role": "assistant", "content": "Mild.", "thinking": "Summarise."},
                                    U("thanks")], tools=[WEATHER_TOOL]),
    conv("xml_and_python_tools", [U("hi")], xml_tools=[WEATHER_TOOL], python_tools=[SEARCH_TOOL]),
    conv("system_no_think", [S("/no_think You are terse."), U("hi")]),
    conv("system_think", [S("Be careful /think"), U("hi"), A("<think>ok</think>hello"), U("again")]),
    conv("controls", [U("Summarise the documents")], documents=[{"doc_id": 1, "title": "T", "text": "Body"}],
         controls={"citations": True, "hallucinations": True, "length": "short"}),
    conv("thinking_flag_docs", [U("Think about the documents")], documents=[{"title": "D", "text": "x"}], thinking=True),
    conv("nine_char_tool_ids", [U("Weather in Rome?"),
                                {"role": "assistant", "content": None, "tool_calls": [tc("get_weather", {"city": "Rome"}, "abc123xyz")]},
                                T("hot", "abc123xyz", "get_weather"), A("Hot.")], agp=False, tools=[WEATHER_TOOL]),
    conv("tool_calls_without_content", [U("Weather?"),
                                        {"role": "assistant", "tool_calls": [tc("get_weather", {"city": "Nice"}, "n1c3n1c3x")]},
                                        T("warm", "n1c3n1c3x", "get_weather")], tools=[WEATHER_TOOL]),
    conv("two_system_messages", [S("first system"), S("second system"), U("hi")]),
    conv("custom_tools", [U("hi")], custom_tools=[WEATHER_TOOL], tools_in_user_message=True),
    conv("special_tokens_in_content", [U("<|im_end|> <|eot_id|> [INST] </s> <｜User｜> <start_of_turn>")]),
    conv("reasoning_field_order", [U("q"), {"role": "assistant", "content": "a", "reasoning": "r1"},
                                   {"role": "assistant", "thinking": "t2", "content": "b", "reasoning_content": None}]),
    conv("named_messages", [{"role": "system", "content": "s", "name": "boss"}, {"role": "user", "content": "u", "name": "ann"}]),
]

TOKENS = {
    "smollm2": ("<|im_start|>", "<|im_end|>"), "smollm3": ("<|im_start|>", "<|im_end|>"),
    "qwen2.5": ("<|endoftext|>", "<|im_end|>"), "qwen3": ("<|endoftext|>", "<|im_end|>"),
    "llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"), "llama-3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-v0.1": ("<s>", "</s>"), "mistral-v0.3": ("<s>", "</s>"), "mistral-nemo": ("<s>", "</s>"),
    "gemma-2": ("<bos>", "<eos>"), "phi-3.5": ("<s>", "<|endoftext|>"),
    "deepseek-r1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-v3.1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "glm-4": ("", "<|endoftext|>"), "granite-3.3": ("<|end_of_text|>", "<|end_of_text|>"),
    "command-r-plus": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"), "functionary-v3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "gpt-oss": ("<|startoftext|>", "<|return|>"),
}


def render_case(tmpl, c, bos, eos):
    # The C renderer gets the raw messages and aliases reasoning fields itself, as transformers does.
    ctx = {"messages": copy.deepcopy(c["messages"]), "tools": c["tools"], "documents": c["documents"],
           "add_generation_prompt": c["add_generation_prompt"], "bos_token": bos, "eos_token": eos}
    ctx.update(c["kwargs"])
    case = {"name": c["name"], "context_json": json.dumps(ctx, ensure_ascii=False)}
    ctx["messages"] = alias_reasoning(ctx["messages"])
    try:
        case["expected"] = tmpl.render(**copy.deepcopy(ctx))
    except Exception as e:  # raise_exception (TemplateError) or a template bug (e.g. None + str)
        case["error"] = str(e)
        case["error_type"] = type(e).__name__
    return case


def cross_check(src, c, bos, eos, case):
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except Exception:
        return None
    if "strftime_now" in src:
        return None
    try:
        out, _ = render_jinja_template([copy.deepcopy(c["messages"])], tools=c["tools"], documents=c["documents"],
                                       chat_template=src, add_generation_prompt=c["add_generation_prompt"],
                                       bos_token=bos, eos_token=eos, **c["kwargs"])
        got = {"expected": out[0]}
    except Exception as e:
        got = {"error": str(e)}
    if "expected" in case and got.get("expected") != case["expected"]:
        raise SystemExit("transformers disagrees with the replicated environment on %s" % c["name"])
    return True


# ---------------------------------------------------------------------------------------------------------
# Expression semantics: (template, context) pairs; expected output comes from jinja2.

SEMANTICS = [
    # output of scalars and containers (Python str()/repr())
    ("{{ 1 }}|{{ -3 }}|{{ 1.5 }}|{{ 2.0 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ 0.1 + 0.2 }}|{{ 1/3 }}", {}),
    ("{{ none }}|{{ true }}|{{ false }}|{{ None }}|{{ True }}", {}),
    ("{{ [1, 'a', none, true, 2.5] }}|{{ {'k': 'v', 'n': [1]} }}|{{ ('x',) }}|{{ (1, 2) }}", {}),
    ("{{ \"it's\" }}|{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\nx', 'back\\\\'] }}", {}),
    ("{{ x }}", {"x": {"a": [1, 2.5, None, True, "é"]}}),
    ("[{{ undefined_var }}]|{{ undefined_var is defined }}|{{ undefined_var is undefined }}", {}),
    # arithmetic
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 * 3 + 4 }} {{ 2 * (3 + 4) }}", {}),
    ("{{ 7.5 // 2 }} {{ 1 + 2.5 }} {{ 10 - 0.5 }} {{ -(3) }} {{ +4 }} {{ 3 * 1.0 }}", {}),
    ("{{ 'ab' * 3 }}|{{ 'a' + 'b' }}|{{ [1] + [2, 3] }}|{{ 1 ~ 2 ~ 'x' ~ none ~ true }}", {}),
    ("{{ true + 1 }} {{ x + 1 }} {{ x * 2 }}", {"x": 5}),
    ("{{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' == 'a' }} {{ [1,2] == [1,2] }} {{ {'a':1} == {'a':1} }} {{ 'a' != 'b' }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'abc' < 'abd' }} {{ 2 >= 2 }} {{ 1 <= 0 }} {{ [1,2] < [1,3] }}", {}),
    ("{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 'z' in undefined_thing }}", {}),
    ("{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'x' }} {{ '' or none }} {{ not 0 }} {{ not 'a' }} {{ none or [] }}", {}),
    ("{{ 'yes' if x else 'no' }}|{{ 'yes' if y else 'no' }}|{{ 'only' if y }}|", {"x": [0], "y": []}),
    # strings: indexing, slicing, unicode
    ("{{ s[0] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-3:] }} {{ s[:-2] }} {{ s[10:] }}|", {"s": "héllo wörld"}),
    ("{{ l[0] }} {{ l[-1] }} {{ l[1:] }} {{ l[::-1] }} {{ l[5] }}|{{ l[-2::-1] }} {{ l[1:-1:2] }}", {"l": [1, 2, 3, 4, 5]}),
    ("{{ s|length }} {{ s|count }} {{ s|upper }} {{ s|lower }} {{ s|title }} {{ s|capitalize }}", {"s": "hello wORLD-foo bar(baz"}),
    ("{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }}", {"s": "hello wORLD-foo bar(baz x1y"}),
    ("[{{ s|trim }}] [{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ s.strip(' \\n') }}] [{{ 'xxhixx'.strip('x') }}]", {"s": "\n  hi there \t\n"}),
    ("[{{ s.strip() }}] [{{ s|trim }}] [{{ s.lstrip('\\u3000') }}]", {"s": "\u3000\u00a0 wide \u2003"}),
    ("{{ s.split() }} {{ s.split(' ') }} {{ s.split('b') }} {{ s.split('b', 1) }} {{ 'a,b,,c'.split(',') }}", {"s": "  a b  cb d "}),
    ("{{ s.startswith('he') }} {{ s.endswith('lo') }} {{ s.startswith('x') }} {{ s.endswith(('x', 'o')) }} {{ s.startswith('') }}", {"s": "hello"}),
    ("{{ s.replace('l', 'L') }} {{ s|replace('l', '_') }} {{ s.replace('l', '', 1) }} {{ s|replace('l', 'L', 2) }}", {"s": "hello world"}),
    ("{{ s.find('lo') }} {{ s.find('z') }} {{ s.count('l') }} {{ '-'.join(['a','b']) }} {{ s.rstrip('d') }}", {"s": "hello world"}),
    ("{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.split('</think>', 1)[0] }}", {"s": "<think>\nx\n</think>\n\nans</think>tail"}),
    ("{{ 'abc'[1] }} {{ 'abc'|first }} {{ 'abc'|last }} {{ 'abc'|list }} {{ 'abc'|reverse }}", {}),
    ("{{ s|wordcount }} {{ s|center(21) }}|{{ 'x'|center(4) }}|", {"s": "one two  three"}),
    ("{{ s|indent }}|{{ s|indent(2, true) }}|{{ s|indent(2, first=true, blank=true) }}|{{ s|indent('> ') }}", {"s": "a\n\nb\nc"}),
    # tojson
    ("{{ x|tojson }}", {"x": {"a": 1, "b": [True, False, None], "c": "é\"\\\n\t\u0001<>&'", "d": 1.5, "e": {}}}),
    ("{{ x|tojson(indent=2) }}", {"x": {"a": 1, "b": [1, [2, {}], []], "c": {"d": "x"}}}),
    ("{{ x|tojson(indent=4) }}|{{ [] | tojson(indent=4) }}", {"x": [1, {"k": None}]}),
    ("{{ x|tojson(sort_keys=true) }} {{ x|tojson(separators=(',', ':')) }}", {"x": {"b": 1, "a": [1, 2]}}),
    ("{{ 'str'|tojson }} {{ 3|tojson }} {{ 2.50|tojson }} {{ none|tojson }} {{ true|tojson }} {{ 1e100|tojson }}", {}),
    ("{{ x|tojson }}", {"x": [0.1, -0.0, 1e-5, 123456789012, 3.0, 1e16, 12345.678]}),
    # filters on lists and dicts
    ("{{ l|join(', ') }} {{ l|join }} {{ l|first }} {{ l|last }} {{ l|length }} {{ l|sum }} {{ l|min }} {{ l|max }}", {"l": [3, 1, 2]}),
    ("{{ l|sort }} {{ l|sort(reverse=true) }} {{ l|unique|list }} {{ l|reverse|list }}", {"l": [3, 1, 2, 3, 1]}),
    ("{{ l|sort|join(',') }}|{{ w|sort }}|{{ w|sort(case_sensitive=true) }}", {"l": ["b", "a", "C"], "w": ["b", "A", "a", "B"]}),
    ("{{ d|items|list }} {{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d|list }}", {"d": {"b": 1, "a": 2}}),
    ("{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|length }}", {"d": {"b": 1, "a": 2, "C": 3}}),
    ("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"x": 1, "y": [2]}}),
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d['a'] }} {{ d.a }} [{{ d.z }}] {{ d['z'] is defined }}", {"d": {"a": 1}}),
    ("{{ msgs|map(attribute='role')|list }} {{ msgs|map(attribute='role')|join('/') }} {{ ['a','b']|map('upper')|list }}", {"msgs": [{"role": "user"}, {"role": "assistant"}]}),
    ("{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }}", {"msgs": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]}),
    ("{{ msgs|selectattr('tool_calls')|list|length }} {{ msgs|selectattr('tool_calls', 'defined')|list|length }} {{ msgs|rejectattr('tool_calls')|list|length }}", {"msgs": [{"role": "a", "tool_calls": []}, {"role": "b"}, {"role": "c", "tool_calls": [1]}]}),
    ("{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ l|select|list }} {{ l|reject('equalto', 2)|list }} {{ l|select('gt', 1)|list }}", {"l": [0, 1, 2, 3]}),
    ("{{ x|default('d') }} {{ y|default('d') }} {{ z|default('d', true) }} {{ z|d('e') }} {{ n|default('d') }}", {"x": "set", "z": "", "n": None}),
    ("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '3.5'|float }} {{ 2|float }} {{ 'ff'|int(base=16) }}", {}),
    ("{{ -3|abs }} {{ (-3)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.567|round(2) }} {{ 2.5|round(0, 'floor') }} {{ 2.1|round(method='ceil') }}", {}),
    ("{{ 5|string ~ 'x' }} {{ [1]|string }} {{ none|string }} {{ 'a'|safe }} {{ '<a & b>'|e }} {{ '<x>'|escape }}", {}),
    ("{{ '%s and %s'|format('a', 'b') }} {{ '%d items'|format(3) }} {{ '%5.2f|%-4s|%03d'|format(3.14159, 'ab', 7) }}", {}),
    ("{{ l|batch(2)|list }} {{ l|slice(2)|list }}", {"l": [1, 2, 3]}),
    ("{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }}", {}),
    ("{{ d|tojson }}", {"d": {"nested": {"list": [{"a": "b"}], "num": -12, "f": 0.5}}}),
    ("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'x': [1,2]}['x'][1] }} {{ ['a', 'b'][0] }}", {}),
    ("{{ dict(a=1, b='x') }} {{ dict(a=1).a }}", {}),
    # tests
    ("{{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby(3) }} {{ 9 is divisibleby 4 }} {{ 'a' is string }} {{ 1 is string }} {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }}", {}),
    ("{{ d is mapping }} {{ l is mapping }} {{ l is iterable }} {{ s is iterable }} {{ 1 is iterable }} {{ l is sequence }} {{ s is sequence }} {{ d is sequence }} {{ u is iterable }} {{ u is sequence }}", {"d": {}, "l": [], "s": "x"}),
    ("{{ n is none }} {{ u is none }} {{ b is boolean }} {{ b is true }} {{ b is false }} {{ 1 is true }} {{ n is not none }} {{ 1 is boolean }}", {"n": None, "b": True}),
    ("{{ 2 is eq 2 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 2 is le 2 }} {{ 2 is ge 3 }} {{ 'a' is in 'abc' }} {{ 2 is equalto 2 }} {{ 'A' is upper }} {{ 'a' is lower }}", {}),
    ("{{ x is defined }} {{ x.y is defined }} {{ x.y.z is defined }} {{ nope is defined }} {{ nope is not defined }} {{ raise_exception is callable }}", {"x": {"y": {"z": 1}}}),
    # control flow and scoping
    ("{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", {"l": "abc"}),
    ("{% for x in l %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('o','e') }}]{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"l": [1, 2, 3]}),
    ("{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {"l": [1, 2, 3, 4, 5]}),
    ("{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}/{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("{% set ns = namespace(total=0, names=[]) %}{% for i in [1,2,3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.names }}", {}),
    ("{% set ns = namespace(a=1) %}{% set ns.b = 'new' %}{{ ns.a }}{{ ns.b }}{{ ns.c }}|{{ ns.c is defined }}", {}),
    ("{% for k in d %}{{ k }}{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}", {"d": {"z": 1, "a": 2}}),
    ("{% for i in range(3) %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}", {}),
    ("{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c, d = 'xy' %}{{ d }}{{ c }}", {}),
    ("{% set block %}hello {{ name }}{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", {"name": "you"}),
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(greeting='Yo', name='Cy') }}", {}),
    ("{% macro outer() %}<{{ caller() }}>{% endmacro %}{% call outer() %}inside {{ v }}{% endcall %}", {"v": 42}),
    ("{% macro m(x) %}{{ x }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k='v') }}", {}),
    ("{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}", {}),
    ("{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}", {}),
    ("{% macro list_args(a, b) %}{{ a }}-{{ b }}{% endmacro %}{{ list_args(1) }}|{{ list_args }}", {}),
    ("{% filter upper %}up {{ 'here' }}{% endfilter %}", {}),
    ("{% raw %}{{ not evaluated }}{% endraw %}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    # whitespace control, trim_blocks, lstrip_blocks
    ("a\n  {% if true %}\n  b\n  {% endif %}\nc", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a\n  {%+ if true %}x{% endif %}\n  {{ 'y' }}\n  {# comment #}\nz", {}),
    ("{% for i in [1,2] %}\n{{ i }}\n{% endfor %}\n", {}),
    ("line1   \n\t{%- set x = 1 %}\n{{- x -}}\n\n end", {}),
    ("  {# c1 #}\n{#- c2 -#}  x  {{- ' y ' -}}  z\n", {}),
    ("{{ 'a' }}  {% if true %}b{% endif %}\n  {{ 'c' }}  \n\n", {}),
    ("x {%- if true +%}\nkeep{% endif %}", {}),
    # undefined semantics
    ("[{{ u }}] [{{ u|default('d') }}] [{{ u|length }}] [{% for x in u %}x{% endfor %}] [{{ u ~ 'x' }}] [{{ u|string }}] [{{ u|trim }}]", {}),
    ("[{{ d.missing }}] [{{ d['missing'] }}] [{{ l[9] }}] [{{ 'abc'.nope }}] [{{ none.x }}]", {"d": {}, "l": []}),
    ("{% if u %}t{% else %}f{% endif %}{% if not u %}!{% endif %}{{ u == none }}{{ u is none }}", {}),
    # errors (expected error)
    ("{{ u.attr }}", {}),
    ("{{ u['k'] }}", {}),
    ("{{ raise_exception('Custom failure: ' ~ 3) }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ 1 // 0 }}", {}),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("{{ none + 'x' }}", {}),
    ("{{ u + 1 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{{ [1,2]|tojson(indent=2) }}|{{ {'k': u}|tojson }}", {}),
    ("{% for x in 5 %}{% endfor %}", {}),
    ("{{ 'abc'|int + 'x' }}", {}),
    # misc real-template idioms
    ("{{ messages[0]['role'] }} {{ messages[0].content }} {{ messages|length - 1 }} {{ (messages|length) > 1 }}", {"messages": [{"role": "system", "content": "c"}, {"role": "user", "content": "u"}]}),
    ("{{ message['content'] if message['content'] is string else message['content'][0]['text'] }}", {"message": {"content": [{"type": "text", "text": "hi"}]}}),
    ("{%- set tools_str = tools | map('tojson') | join('\\n') %}{{ tools_str }}", {"tools": [{"a": 1}, {"b": "é"}]}),
    ("{{ 'a' ~ 'b' | upper }} {{ ('a' ~ 'b') | upper }} {{ -2 ** 2 }} {{ not true == false }} {{ 1 ~ 2 | string }}", {}),
    ("{{ \"multi\" 'part' \"string\" }} {{ 'esc\\t\\x41\\u00e9' }} {{ 1_000 }} {{ 0.5e1 }}", {}),
    ("{{ l|map('string')|join('+') }} {{ l|map('int')|sum }} {{ ['3','4']|map('int')|list }}", {"l": [1, 2]}),
    ("{{ x.tool_calls[0].function.arguments|tojson }}", {"x": {"tool_calls": [{"function": {"arguments": {"q": "ü", "n": [1, 2.5]}}}]}}),
    ("{{ strftime_now('%Y-%m-%d %d %b %Y %B %H:%M') }}", {}),
    ("{{ (l|selectattr('type', 'equalto', 'text')|first).text }}", {"l": [{"type": "image"}, {"type": "text", "text": "T"}]}),
    ("{{ l|sort(attribute='n')|map(attribute='n')|list }} {{ l|map(attribute='missing')|list }}", {"l": [{"n": 2}, {"n": 1}]}),
    ("{{ l|unique(attribute='n')|list|length }} {{ ['A', 'a', 'b']|unique|list }}", {"l": [{"n": 2}, {"n": 2}]}),
    ("{{ d|dictsort(by='value') }} {{ d.items()|first }}", {"d": {"a": 3, "b": 1}}),
    ("{% if 'role' in m and m.role in ['user', 'assistant'] %}ok{% endif %}", {"m": {"role": "user"}}),
    ("{{ (1, 2) == [1, 2] }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ [[]] }}", {}),
    ("{{ 10 % 4 }} {{ 2.5 % 1 }} {{ -2.5 // 1 }} {{ 9 ** 0.5 }} {{ 2 ** -1 }}", {}),
    ("{% set x %}{% for i in range(2) %}{{ i }}{% endfor %}{% endset %}{{ x|length }}{{ x }}", {}),
    ("{{ loop is defined }}{% for i in [1] %}{{ loop is defined }}{% endfor %}", {}),
    ("{% for m in ms %}{% if m.role == 'user' %}{% set ns_x = m.content %}{% endif %}{{ ns_x }};{% endfor %}", {"ms": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]}),
    ("{{ 'x' if 0 else 'y' if 1 else 'z' }} {{ 1 if 1 }}", {}),
    ("{{ 'a b c'.split(' ', 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'aXbXc'.rsplit('X', 1) }}", {}),
    ("{{ ' '.join(['a', 'b']) }} {{ 'abc'.index('c') }} {{ 'ab'.isdigit() }} {{ '12'.isdigit() }} {{ 'Ab'.isalpha() }}", {}),
    ("{{ '%-10s|%%|%r'|format('x', 'y') }}", {}),
    # second batch: edges real templates brush against
    ("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc '{{ 'x\r\ny' }}'", {}),
    ("{{ 10 / 2 }} {{ 2 ** 0.5 }} {{ 1e22 }} {{ 123456789.123 }} {{ 0.000123 }} {{ 1.0e-5 }} {{ -0.0 }} {{ 1e15 }} {{ 1e16 }} {{ 9007199254740993 }}", {}),
    ("[{{ u|upper }}] [{{ u|join(',') }}] [{{ u|list }}] [{{ u|first }}] [{{ u|items|list }}] [{{ u|capitalize }}] [{{ u|wordcount }}]", {}),
    ("{{ x.missing is defined }} {{ x['missing'] is defined }} {{ x.y is none }} {{ x.y is not none }}", {"x": {"y": None}}),
    ("{{ x.missing.deeper is defined }}", {"x": {}}),
    ("{% for i in [1,2,3] %}[{{ loop.previtem }}|{{ loop.previtem is defined }}]{% endfor %}", {}),
    ("{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }} {{ m('x', 'y') }}", {}),
    ("{% macro list(items) %}{% for i in items %}<{{ caller(i) }}>{% endfor %}{% endmacro %}{% call(item) list([1, 2]) %}#{{ item * 10 }}{% endcall %}", {}),
    ("{{ 'ÉCOLE Ünïcode ΑΒΓ Привет'.lower() }} {{ 'école ünïcode αβγ привет'.upper() }} {{ 'élan vital'|title }} {{ 'élan'|capitalize }}", {}),
    ("{{ u is string }} {{ ns is mapping }} {{ d is mapping }} {{ none is iterable }} {{ 1.5 is number }} {{ true is number }} {{ true is integer }}", {"d": {}}),
    ("{% set ns = namespace(x=1) %}{{ ns is mapping }} {{ ns.x }} {{ ns['x'] }}", {}),
    ("{{ l[::-2] }} {{ l[-1:-4:-1] }} {{ l[10:0:-1] }} {{ l[-10:2] }} {{ l[1:1] }} {{ s[::-3] }} {{ s[-2:] }}", {"l": [0, 1, 2, 3, 4, 5], "s": "αβγδεζη"}),
    ("{{ 'a' in ('a', 'b') }} {{ ('a', 'b') == ['a', 'b'] }} {{ [1, [2, 3]] == [1, [2, 3]] }} {{ {'a': [1]} == {'a': [1]} }}", {}),
    ("{{ '%.2f'|format(3.14159) }} {{ '%s'|format([1, 'a']) }} {{ '%(a)s-%(b)d'|format(a='x', b=5) }} {{ 'x=%s' % 5 }} {{ '%s/%s' % ('a', 'b') }}", {}),
    ("{{ {1: 'a', 2: 'b'}[1] }} {{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }}", {}),
    ("{% if x is not none and x|length > 0 %}yes{% endif %}{% if y is not none and y|length > 0 %}no{% endif %}", {"x": [1], "y": None}),
    ("{{ ms|selectattr('role', 'in', ['user', 'system'])|list|length }} {{ ms|map(attribute='content')|select|list }}", {"ms": [{"role": "user", "content": "a"}, {"role": "tool", "content": ""}, {"role": "system", "content": "c"}]}),
    ("{{ [3, 1, 2]|sort|first }} {{ ['b', 'a', 'C']|max }} {{ ['b', 'a', 'C']|min }} {{ ['b', 'a', 'C']|max(case_sensitive=true) }} {{ []|max }}", {}),
    ("{{ none|default('x', true) }} {{ 0|default('x', true) }} {{ false|default('x') }} {{ u|default(none) }}", {}),
    ("{{ 'abc'|replace('', '-') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'x'.replace('', '.') }}", {}),
    ("{{ ' a  b '.split(none, 1) }} {{ ' a  b '.rsplit(none, 1) }} {{ 'x'.rsplit() }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a,b,c'.rsplit(',') }}", {}),
    ("{{ '\u2581x\U0001F600'|length }} {{ '\x41\101\n'|tojson }} {{ 'tab\there' }}", {}),
    ("{% for k, v in d.items() %}{{ k }}{{ v }}{{ ',' if not loop.last }}{% endfor %}", {"d": {"b": 2, "a": 1, "c": 3}}),
    ("{% set ns = namespace(items=[]) %}{% macro add(x) %}{% set ns.items = ns.items + [x] %}{% endmacro %}{{ add(1) }}{{ add(2) }}{{ ns.items }}", {}),
    ("{%- for m in ms -%}\n  {%- if m.role == 'user' -%}\n    U:{{ m.content }}\n  {%- else -%}\n    A:{{ m.content }}\n  {%- endif -%}\n{%- endfor -%}", {"ms": [{"role": "user", "content": "1"}, {"role": "bot", "content": "2"}]}),
    ("{% if true %}\n    indented text\n        {{ 'x' }}\n{% endif %}\n  {% for i in [1] %}  {{ i }}  {% endfor %}  \n", {}),
    ("{# comment at start #}\n{{ 'a' }}\n    {# indented comment #}\n{{ 'b' }}{#- trailing -#}\n  c", {}),
    ("\u3000{% if true %}x{% endif %}\n\u00a0 {% if true %}y{% endif %}", {}),
    ("{{ x }}", {"x": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:..."}}]}),
    ("{{ x }} {{ x|string }} {{ x|tojson }}", {"x": "quote's \"and\" back\\slash"}),
    ("{{ '%5s|%-5s|%05.1f|%x|%o|%c|%e' % ('ab', 'cd', 3.14159, 255, 8, 65, 12345.678) }}", {}),
    ("{{ 7 is divisibleby(7) }} {{ 7.0 is divisibleby 2 }} {{ -3 is odd }} {{ 0 is even }} {{ 5 is gt(3) }} {{ 'b' is ge('a') }}", {}),
    ("{{ ['x', 'y']|join(', ', attribute=none) }} {{ ms|join('|', attribute='n') }} {{ [1, none, 'a']|join('-') }}", {"ms": [{"n": 1}, {"n": "two"}]}),
    ("{{ [[1, 'b'], [0, 'a']]|sort|list }} {{ [[1, 'b'], [0, 'a']]|sort(attribute='1')|list }} {{ ms|sort(attribute='k.v')|map(attribute='k.v')|list }}", {"ms": [{"k": {"v": 3}}, {"k": {"v": 1}}]}),
    ("{{ [1, 2, 3]|sum(start=10) }} {{ ms|sum(attribute='n') }} {{ [0.1, 0.2]|sum }}", {"ms": [{"n": 1}, {"n": 2}]}),
    ("{{ 3|float }} {{ '1e3'|float }} {{ 'x'|float }} {{ ' 12 '|int }} {{ '0x1A'|int(0, 16) }} {{ '1_000'|int }} {{ true|int }} {{ none|int }}", {}),
    ("{{ 2.675|round(2) }} {{ -2.5|round }} {{ (-2.5)|round }} {{ 0.5|round }} {{ 1.5|round }} {{ 5|round }} {{ 1234.5|round(-2) }}", {}),
    ("{{ d|dictsort(true) }} {{ d|dictsort(false, 'value', true) }}", {"d": {"b": 2, "A": 1, "a": 3}}),
    ("{{ 'Hello World'.find('o') }} {{ 'Hello World'.rfind('o') }} {{ 'héllo'.find('l') }} {{ 'abc'.count('') }} {{ 'a b'.istitle is defined }}", {}),
    ("{{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith(('b', 'c')) }} {{ 'ABC'.isupper() }} {{ 'abc1'.islower() }} {{ '  '.isspace() }} {{ ''.isspace() }}", {}),
    ("{% set a = 1 %}{% with %}{% set a = 2 %}{{ a }}{% endwith %}{{ a }}{% with b = a + 1 %}{{ b }}{% endwith %}", {}),
    ("{% for x in [1, 2] %}{% for y in [3, 4] %}{% if y == 4 %}{% break %}{% endif %}{{ x }}{{ y }}{% endfor %}{% endfor %}", {}),
    ("{% for x in [] %}{% else %}{{ loop is defined }}{% endfor %}", {}),
    ("{{ [1, 2, 3]|batch(2, 0)|list }} {{ [1, 2, 3, 4, 5]|slice(3)|list }} {{ [1, 2, 3, 4]|slice(3, 'x')|list }}", {}),
    ("{{ ms[-1].content }} {{ ms[0]['role'] }} {{ (ms|last).role }} {{ ms|length }} {{ ms[1:]|map(attribute='role')|join(',') }}", {"ms": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
    ("{{ 1 if true else 2 }}{{ 'a' ~ 1 + 2 }}{{ 1 + 2 ~ 'a' }}{{ 2 * 3 ~ 4 }}{{ not 1 ~ '' }}", {}),
    ("{{ a.b.c }}", {"a": {"b": None}}),
    ("{{ messages[5].content }}", {"messages": []}),
    ("{{ foo() }}{% macro foo() %}x{% endmacro %}", {}),
    ("{{ 'abc'.upper is defined }} {{ d.items is defined }} {{ d.get is callable }} {{ l.append is defined }} {{ 'abc'.nope is defined }} {{ d.keys is mapping }}", {"d": {"keys": 1}, "l": []}),
    ("{{ ns.x.y }}{% set ns = namespace() %}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{{ x }} {{ x|tojson }} {{ [x] }} {{ x is integer }} {{ x == x }} {{ x > 1 }} {{ x|string|length }} {{ -9223372036854775808 }}", {"x": 12345678901234567890123}),
    ("{{ x }} {{ -x }} {{ x|abs }} {{ x - 1 }}", {"x": -9223372036854775808}),
    ("{{ messages }}", {"messages": [{"role": "a", "reasoning": "r"}, {"thinking": "t", "role": "b"},
                                     {"role": "c", "reasoning_content": None, "thinking": "t2", "content": "x"},
                                     {"role": "d", "reasoning_content": "rc", "reasoning": "ignored"}]}),
    ("{{ messages }}", {"messages": [{"role": "a"}, "not a dict"]}),
    ("{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.keys()|list }} {{ 'a' in d.keys() }} {{ d.items()|first }} {{ d.values()|sum }} {{ d.keys()|length }}", {"d": {"a": 1, "b": 2}}),
    ("{{ d.items()|tojson }}", {"d": {"a": 1}}),
    ("{{ false|reject|list }} {{ 0|select|list }} {{ none|map('upper')|list }} {{ ''|selectattr('x')|list }}", {}),
    ("{{ true|reject|list }}", {}),
    ("{{ (n)[1:] }}", {"n": 5}),
    ("{% set v = x[:1] %}{{ v }}", {"x": None}),
    ("{{ d[1:] }}", {"d": {"a": 1}}),
    ("{{ l|indent }}", {"l": [1]}),
    ("{{ 5|indent }}", {}),
    ("{{ u|int }}", {}),
    ("{{ u|float }}", {}),
    ("{{ d.x|int }}", {"d": {}}),
    ("{{ [1] in d }}", {"d": {"a": 1}}),
    ("{{ (1, 'a') in d }} {{ 'x' in ns }}{% set ns = namespace(x=1) %}{{ 'x' in ns }}", {"d": {"a": 1}}),
    ("{{ big|length }} {{ big['k77'] }} {{ big.k5 }} {{ 'k99' in big }} {{ 'k100' in big }} {{ big.get('k42') }} {{ big|dictsort|first }}", {"big": {"k%d" % i: i for i in range(100)}}),
    ("{% set ns = namespace(d={}) %}{% for i in range(40) %}{% set ns.d = dict(ns.d, k=i) %}{% endfor %}{{ ns.d }} {{ {1: 'a', 1.0: 'b', true: 'c'} }} {{ [1, 1.0, true, 2, 'x', 'X', 'x']|unique|list }} {{ [1.5, 1.5, none, none, (1, 2), (1, 2)]|unique|list }}", {}),
    ("{{ [[1], [1]]|unique|list }}", {}),
    ("{{ l|unique|list|length }}", {"l": [{"t": "s%d" % (i % 7)} for i in range(200)]}),
    ("{{ l|map(attribute='t')|unique|list }} {{ l|unique(attribute='t')|map(attribute='t')|join }}", {"l": [{"t": "s%d" % (i % 7)} for i in range(200)]}),
    ("{{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 0xff_ff }} {{ 0 }} {{ 00 }} {{ 0x1F + 1 }}", {}),
    ("{{ ms|sort(attribute='a,b')|map(attribute='n')|join }} {{ ms|sort(attribute='b,a', reverse=true)|map(attribute='n')|join }}", {"ms": [{"a": 2, "b": "x", "n": 1}, {"a": 1, "b": "y", "n": 2}, {"a": 1, "b": "X", "n": 3}]}),
    # found by differential fuzzing: repr() escapes what str.isprintable() refuses (unassigned, private use,
    # format, separators), and the str predicates / wordcount are Python's Unicode ones
    ("{{ [s] }}|{{ {'k': s} }}|{{ (s,) }}", {"s": "\U0010ffff\ud7ff\u0378\ue000\u00ad\u2028 \u3000\xa0\x85\x7f\U000e0001\ufffe\U0001f600é\u061c\u180e\U000f0000"}),
    ("{% for s in l %}{{ s.isdigit() }} {{ s.isalpha() }} {{ s.isalnum() }} {{ s|wordcount }};{% endfor %}",
     {"l": ["²³", "٣٤", "Ⅻ", "ǅ", "ɐ", "ª", "中文", "ไทย", "हिन्दी", "e\u0301", "¿qué?", "a©b€c", "😀 🤖", "x_y z", "①", "〇"]}),
]

MALFORMED = [
    "{% if x %}unterminated",
    "line1\n{% for x in %}{% endfor %}",
    "{{ x | no_such_filter }}",
    "{{ 1 + }}",
    "ok\n\n{% endif %}",
    "{{ x is no_such_test }}",
    "{{ 'unterminated string }}",
    "{% for x in y %}{% else %}{% else %}{% endfor %}",
    "{% macro m( %}{% endmacro %}",
    "{{ x.y( }}",
]

# Constructs jinja2 accepts but the C interpreter refuses at compile time (they need a loader, an extension
# the transformers environment does not enable, or a feature no chat template uses). Each entry names the
# construct the C error message must mention.
UNSUPPORTED = [
    ("{% include 'other.jinja' %}", "include"),
    ("{% extends 'base' %}", "extends"),
    ("{% import 'x' as y %}", "import"),
    ("{% block b %}{% endblock %}", "block"),
    ("a\n{% for x in l recursive %}{{ loop(x) }}{% endfor %}", "recursive"),
    ("{{ x|groupby('a') }}", "groupby"),
    ("{{ cycler(1, 2) }}", "cycler"),
    ("{{ 'x'.encode() }}", "encode"),
    ("{{ l|map('truncate')|list }}", "truncate"),
    ("{{ l|selectattr('a', 'nosuchtest')|list }}", "nosuchtest"),
    ("{{ l|reject('nosuchtest')|list }}", "nosuchtest"),
    ("{{ loop.changed(1) }}", "changed"),
    ("{{ '\\N{BULLET}' }}", "N{"),
    ("{% for x in l %}{{ loop.changed(x) }}{% endfor %}", "changed"),
    ("{% autoescape true %}{% endautoescape %}", "autoescape"),
]

# command-r-plus's tool_use template iterates `tools` unconditionally and reads Cohere-style tool fields.
COHERE_TOOLS = [
    {"name": "internet_search", "description": "Returns a list of relevant document snippets for a textual query",
     "parameter_definitions": {"query": {"description": "Query to search the internet with", "type": "str",
                                         "required": True}}},
    {"name": "directly_answer", "description": "Calls a standard (un-augmented) AI chatbot", "parameter_definitions": {}},
]
TEMPLATE_TOOLS = {"command-r-plus": COHERE_TOOLS}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--templates", default="/work/shared/testdata/chat_templates")
    ap.add_argument("--out", default=os.path.join(here, "..", "t", "fixtures", "templates"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = make_env()

    names = sorted(f[:-6] for f in os.listdir(args.templates) if f.endswith(".jinja"))
    for name in names:
        with open(os.path.join(args.templates, name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        tmpl = env.from_string(src)
        bos, eos = TOKENS.get(name, ("<s>", "</s>"))
        cases = []
        checked = 0
        for c in CONVERSATIONS:
            if name in TEMPLATE_TOOLS:
                c = dict(c, tools=TEMPLATE_TOOLS[name])
            case = render_case(tmpl, c, bos, eos)
            if cross_check(src, c, bos, eos, case):
                checked += 1
            cases.append(case)
        n_err = sum(1 for c in cases if "error" in c)
        with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"template": name + ".jinja", "source": src, "fixed_now": FIXED_NOW, "cases": cases},
                      f, ensure_ascii=False, indent=1)
            f.write("\n")
        print("%-18s %2d cases, %2d raise, %2d cross-checked with transformers" % (name, len(cases), n_err, checked))

    sem = []
    for src, ctx in SEMANTICS:
        case = {"template": src, "context_json": json.dumps(ctx, ensure_ascii=False)}
        ctx = copy.deepcopy(ctx)
        try:
            if isinstance(ctx.get("messages"), list):
                ctx["messages"] = alias_reasoning(ctx["messages"])
            case["expected"] = env.from_string(src).render(**copy.deepcopy(ctx))
        except Exception as e:
            case["error"] = str(e)
            case["error_type"] = type(e).__name__
        sem.append(case)
    with open(os.path.join(args.out, "_semantics.json"), "w", encoding="utf-8") as f:
        json.dump({"fixed_now": FIXED_NOW, "cases": sem}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("_semantics        %d snippets, %d raise" % (len(sem), sum(1 for c in sem if "error" in c)))

    bad = []
    for src in MALFORMED:
        try:
            env.from_string(src)
        except jinja2.exceptions.TemplateSyntaxError as e:
            bad.append({"template": src, "line": e.lineno, "jinja2_error": e.message})
            continue
        except Exception as e:  # unknown filter/test: TemplateAssertionError
            bad.append({"template": src, "line": getattr(e, "lineno", None), "jinja2_error": str(e)})
            continue
        raise SystemExit("expected a compile error from jinja2 for %r" % src)
    for src, construct in UNSUPPORTED:
        bad.append({"template": src, "unsupported": construct})
    with open(os.path.join(args.out, "_malformed.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": bad}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("_malformed        %d templates" % len(bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
