"""Tool-call formats, streamed tool-call deltas, the tool round trip through real templates and
reasoning_content, end to end with the official openai client; one line per check: "ok <name>" or
"not ok <name>: <why>". Used by t/141-tools.t.

  tools_e2e.py BASE_URL MODEL_DIR TEMPLATE_DIR

BASE_URL serves one location per template family (see t/141-tools.t): /hermes (Qwen2.5's template),
/llama (Llama 3.1's), /mistral (Mistral v0.3's), /dsv3 (DeepSeek-R1's, which teaches DeepSeek V3's
format), all with srt_tool_call_parser auto, /pythonic (Qwen2.5's template, srt_tool_call_parser
pythonic: no pythonic Llama template is in the test data), /own (tiny-qwen2-tools, whose own
tokenizer_config.json carries Qwen2.5's template; auto), /think (Qwen3's, srt_reasoning_parser qwen3)
and /r1 (DeepSeek-R1's, srt_reasoning_parser deepseek-r1). The model is
tiny-qwen2 (random weights): calls are made either under tool_choice "required" (the grammar of the
location's format) or by an SGLang `regex` that forces a known raw text, which the location's parser
must then split (tool_choice "auto"). Prompts are compared with jinja2 configured as transformers'
apply_chat_template (scripts/make_template_fixtures.py) and HF tokenizers."""
import importlib.util
import json
import os
import re
import sys

import jsonschema
import openai
from tokenizers import Tokenizer

from e2e_report import check, guard, report

base, model_dir, tpl_dir = sys.argv[1], sys.argv[2], sys.argv[3]

_spec = importlib.util.spec_from_file_location(
    "mtf", os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "make_template_fixtures.py"))
mtf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mtf)
tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
tok_cfg = json.load(open(os.path.join(model_dir, "tokenizer_config.json")))


def client(loc):
    return openai.OpenAI(base_url=base + loc + "/v1", api_key="unused", max_retries=0, timeout=120)


WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 8},
    "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": False}
SEARCH_PARAMS = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 10}},
                 "required": ["query"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": WEATHER_PARAMS}},
         {"type": "function", "function": {"name": "search", "description": "Search the web",
                                           "parameters": SEARCH_PARAMS}}]
SCHEMAS = {"get_weather": WEATHER_PARAMS, "search": SEARCH_PARAMS}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
FORMATS = [("hermes", "/hermes", "qwen2.5"), ("llama3", "/llama", "llama-3.1"),
           ("mistral", "/mistral", "mistral-v0.3"), ("deepseekv3", "/dsv3", "deepseek-r1"),
           ("pythonic", "/pythonic", "qwen2.5")]

# A raw call in each format, forced by a regex; the city is left to the model.
RAW = {
    "hermes": 'Checking\\.\n\n<tool_call>\n\\{"name": "get_weather", "arguments": '
              '\\{"city": "[a-z]{2,6}", "unit": "celsius"\\}\\}\n</tool_call>',
    "llama3": '\\{"name": "get_weather", "parameters": \\{"city": "[a-z]{2,6}", "unit": "celsius"\\}\\}',
    "mistral": '\\[TOOL_CALLS\\]\\[\\{"name": "get_weather", "arguments": '
               '\\{"city": "[a-z]{2,6}", "unit": "celsius"\\}\\}\\]',
    "deepseekv3": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
                  '\\{"city": "[a-z]{2,6}", "unit": "celsius"\\}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "pythonic": '\\[get_weather\\(city="[a-z]{2,6}", unit="celsius"\\)\\]',
}
# Two calls in each format, the second a search: parallel_tool_calls false must end the answer at the
# first (and the generation: fewer tokens).
SEARCH_DS = '<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n\\{"query": "[a-z]{2,6}"\\}\n```<｜tool▁call▁end｜>'
TWO = {
    "hermes": RAW["hermes"] + '\n<tool_call>\n\\{"name": "search", "arguments": \\{"query": "[a-z]{2,6}"\\}\\}\n</tool_call>',
    "llama3": RAW["llama3"] + '; \\{"name": "search", "parameters": \\{"query": "[a-z]{2,6}"\\}\\}',
    "mistral": RAW["mistral"][:-2] + ', \\{"name": "search", "arguments": \\{"query": "[a-z]{2,6}"\\}\\}\\]',
    "deepseekv3": RAW["deepseekv3"].replace("<｜tool▁calls▁end｜>", "\n" + SEARCH_DS + "<｜tool▁calls▁end｜>"),
    "pythonic": RAW["pythonic"][:-2] + ', search\\(query="[a-z]{2,6}"\\)\\]',
}
ARGS_RE = re.compile(r'\{"city": "[a-z]{2,6}", "unit": "celsius"\}')


def stream(c, **kw):
    """The stream joined as OpenAI's documentation shows, and every chunk's tool-call deltas."""
    content, reasoning, finish, calls, deltas = "", "", None, {}, []
    for ch in c.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        reasoning += getattr(d, "reasoning_content", None) or ""
        for tc in d.tool_calls or []:
            deltas.append(tc.model_copy(deep=True))   # the join below mutates the first one
            if tc.index not in calls:
                calls[tc.index] = tc
            calls[tc.index].function.arguments += tc.function.arguments
        if ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    return content, reasoning, finish, [calls[k] for k in sorted(calls)], deltas


def delta_shape(deltas):
    """First delta of each call: id, type, name, arguments ""; the others: index and arguments only."""
    seen, frags = set(), 0
    for d in deltas:
        if d.index not in seen:
            seen.add(d.index)
            if not (d.id and d.type == "function" and d.function.name and d.function.arguments == ""):
                return False, "first delta %r" % d
        else:
            if d.id is not None or d.type is not None or d.function.name is not None or not d.function.arguments:
                return False, "later delta %r" % d
            frags += 1
    return True, frags


def required(fmt, loc, tpl):
    c = client(loc)
    kw = dict(model=fmt, messages=MSGS, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
              max_tokens=300, temperature=0)
    r = c.chat.completions.create(**kw)
    ch = r.choices[0]
    calls = ch.message.tool_calls or []
    good = ch.finish_reason == "tool_calls" and len(calls) == 1 and ch.message.content is None
    for tc in calls:
        good = good and tc.type == "function" and tc.function.name in SCHEMAS
        jsonschema.validate(json.loads(tc.function.arguments), SCHEMAS[tc.function.name])
        if fmt == "mistral":
            good = good and re.fullmatch(r"[A-Za-z0-9]{9}", tc.id) is not None
    check("%s: required call validates" % fmt, good, repr(ch))

    content, _, finish, scalls, deltas = stream(c, **kw)
    ok, frags = delta_shape(deltas)
    # pythonic arguments are converted: a call comes whole, in one arguments delta
    check("%s: streamed deltas shaped as OpenAI's" % fmt, ok and frags >= (1 if fmt == "pythonic" else 2),
          "%s %r" % (frags, deltas))
    check("%s: streamed deltas joined = non-streamed" % fmt,
          finish == "tool_calls" and content == "" and
          [(t.function.name, t.function.arguments) for t in scalls] ==
          [(t.function.name, t.function.arguments) for t in calls],
          "%r %r vs %r" % (finish, scalls, calls))
    return calls


def auto_parsed(fmt, loc, tpl):
    c = client(loc)
    kw = dict(model=fmt, messages=MSGS, tools=TOOLS, max_tokens=120, temperature=0,
              extra_body={"regex": RAW[fmt]})
    r = c.chat.completions.create(**kw)
    ch = r.choices[0]
    calls = ch.message.tool_calls or []
    check("%s: auto parses the raw call" % fmt,
          ch.finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "get_weather"
          and ARGS_RE.fullmatch(calls[0].function.arguments) is not None
          and ch.message.content == ("Checking." if fmt == "hermes" else None), repr(ch))
    content, _, finish, scalls, _ = stream(c, **kw)
    check("%s: auto, streamed = non-streamed" % fmt,
          finish == "tool_calls" and content == (ch.message.content or "") and
          [(t.function.name, t.function.arguments) for t in scalls] ==
          [(t.function.name, t.function.arguments) for t in calls], "%r %r" % (content, scalls))


def one_call(fmt, loc, tpl):
    c = client(loc)
    kw = dict(model=fmt, messages=MSGS, tools=TOOLS, max_tokens=200, temperature=0,
              extra_body={"regex": TWO[fmt]})
    both = c.chat.completions.create(**kw)
    one = c.chat.completions.create(parallel_tool_calls=False, **kw)
    calls2 = [(t.function.name, t.function.arguments) for t in both.choices[0].message.tool_calls or []]
    calls1 = [(t.function.name, t.function.arguments) for t in one.choices[0].message.tool_calls or []]
    check("%s: parallel_tool_calls false: one call, and generation ends there" % fmt,
          both.choices[0].finish_reason == "tool_calls" and len(calls2) == 2 and calls2[1][0] == "search"
          and one.choices[0].finish_reason == "tool_calls" and calls1 == calls2[:1]
          and one.usage.completion_tokens < both.usage.completion_tokens,
          "%r %r / %r %r" % (calls2, both.usage, calls1, one.usage))
    content, _, finish, scalls, _ = stream(c, parallel_tool_calls=False, **kw)
    check("%s: parallel_tool_calls false, streamed = non-streamed" % fmt,
          finish == "tool_calls" and content == (one.choices[0].message.content or "")
          and [(t.function.name, t.function.arguments) for t in scalls] == calls1, "%r %r" % (content, scalls))


def other_format_is_content():
    # the Llama 3.1 raw call is not a call where the template teaches Hermes'
    r = client("/hermes").chat.completions.create(model="hermes", messages=MSGS, tools=TOOLS, max_tokens=120,
                                                  temperature=0, extra_body={"regex": RAW["llama3"]})
    ch = r.choices[0]
    check("the format follows the location's template", ch.finish_reason == "stop" and not ch.message.tool_calls
          and ch.message.content.startswith('{"name": "get_weather"'), repr(ch))


def render_tokens(tpl, messages, tools):
    src = open(os.path.join(tpl_dir, tpl + ".jinja")).read()
    ctx = {"messages": mtf.alias_reasoning(messages), "tools": tools, "documents": None,
           "add_generation_prompt": True, "bos_token": tok_cfg["bos_token"], "eos_token": tok_cfg["eos_token"]}
    text = mtf.make_env().from_string(src).render(**ctx)
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def roundtrip(fmt, loc, tpl, calls):
    msgs = MSGS + [
        {"role": "assistant", "tool_calls": [
            {"id": t.id, "type": "function",
             "function": {"name": t.function.name, "arguments": t.function.arguments}} for t in calls]}]
    msgs += [{"role": "tool", "tool_call_id": t.id, "name": t.function.name, "content": "18 degrees"}
             for t in calls]
    if fmt == "deepseekv3":
        # DeepSeek's template renders calls without text where content is none (not undefined)
        msgs[1]["content"] = None
    if fmt == "mistral":
        # Mistral's template renders an assistant turn without content only where content is undefined
        msgs = [MSGS[0], {"role": "assistant"}, {"role": "user", "content": "And now?"}] + msgs[1:]
    r = client(loc).chat.completions.create(model=fmt, messages=msgs, tools=TOOLS, tool_choice="none",
                                            max_tokens=1, temperature=0)
    want = render_tokens(tpl, msgs, TOOLS)
    check("%s: tool_calls and tool messages round-trip as transformers renders them" % fmt,
          r.usage.prompt_tokens == want, "server %d, jinja2 %d" % (r.usage.prompt_tokens, want))


for fmt, loc, tpl in FORMATS:
    box = {}
    guard("%s: required call validates" % fmt, lambda: box.update(calls=required(fmt, loc, tpl)))
    guard("%s: auto parses the raw call" % fmt, lambda: auto_parsed(fmt, loc, tpl))
    guard("%s: round trip" % fmt, lambda: roundtrip(fmt, loc, tpl, box["calls"]))
    guard("%s: parallel_tool_calls false: one call, and generation ends there" % fmt,
          lambda: one_call(fmt, loc, tpl))
guard("the format follows the location's template", other_format_is_content)


def pythonic_names():
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"bad-key": {"type": "string"}}}}}]
    try:
        client("/pythonic").chat.completions.create(model="pythonic", messages=MSGS, tools=bad,
                                                    tool_choice="required", max_tokens=5)
        check("pythonic: an argument name Python cannot take is a 400", False, "accepted")
    except openai.BadRequestError as e:
        check("pythonic: an argument name Python cannot take is a 400", "bad-key" in str(e), str(e))


guard("pythonic: an argument name Python cannot take is a 400", pythonic_names)


def own_template():
    # tiny-qwen2-tools' tokenizer_config.json carries Qwen2.5's template: no srt_chat_template needed
    c = client("/own")
    r = c.chat.completions.create(model="own", messages=MSGS, tools=TOOLS, max_tokens=120, temperature=0,
                                  extra_body={"regex": RAW["hermes"]})
    ch = r.choices[0]
    calls = ch.message.tool_calls or []
    check("own template: the model's tokenizer_config template renders the tools and teaches hermes",
          r.usage.prompt_tokens == render_tokens("qwen2.5", MSGS, TOOLS) and ch.finish_reason == "tool_calls"
          and len(calls) == 1 and ARGS_RE.fullmatch(calls[0].function.arguments) is not None
          and ch.message.content == "Checking.", "%r %r" % (r.usage, ch))


guard("own template: the model's tokenizer_config template renders the tools and teaches hermes", own_template)

THINK = '<think>\nfirst [a-z]{2,6} then [a-z]{2,6}\n</think>\n\nAnswer: [a-z]{2,6}'
THINK_CALL = ('<think>\nI call [a-z]{2,6}\n</think>\n\n<tool_call>\n\\{"name": "search", "arguments": '
              '\\{"query": "[a-z]{2,6}"\\}\\}\n</tool_call>')


def reasoning_qwen3():
    c = client("/think")
    kw = dict(model="think", messages=MSGS, max_tokens=60, temperature=0, extra_body={"regex": THINK})
    m = c.chat.completions.create(**kw).choices[0].message
    rc = getattr(m, "reasoning_content", None)
    check("qwen3: reasoning_content split off", rc is not None and re.fullmatch(
        r"\nfirst [a-z]{2,6} then [a-z]{2,6}\n", rc) and re.fullmatch(r"Answer: [a-z]{2,6}", m.content), repr(m))
    content, reasoning, finish, _, _ = stream(c, **kw)
    check("qwen3: streamed reasoning_content and content = non-streamed",
          reasoning == rc and content == m.content and finish == "stop", "%r %r" % (reasoning, content))

    kw = dict(model="think", messages=MSGS, tools=TOOLS, max_tokens=80, temperature=0,
              extra_body={"regex": THINK_CALL})
    ch = c.chat.completions.create(**kw).choices[0]
    calls = ch.message.tool_calls or []
    check("qwen3: a call after the reasoning", ch.finish_reason == "tool_calls" and len(calls) == 1
          and calls[0].function.name == "search" and ch.message.content is None
          and re.fullmatch(r"\nI call [a-z]{2,6}\n", getattr(ch.message, "reasoning_content", "") or ""), repr(ch))
    content, reasoning, finish, scalls, _ = stream(c, **kw)
    check("qwen3: the call after reasoning, streamed = non-streamed",
          finish == "tool_calls" and reasoning == ch.message.reasoning_content and content == "" and
          [(t.function.name, t.function.arguments) for t in scalls] ==
          [(t.function.name, t.function.arguments) for t in calls], "%r %r" % (reasoning, scalls))

    # SGLang's separate_reasoning false keeps the block in content; stream_reasoning false
    # sends the reasoning in one delta once it has ended
    kw = dict(model="think", messages=MSGS, max_tokens=60, temperature=0, extra_body={"regex": THINK})
    m2 = c.chat.completions.create(**dict(kw, extra_body={"regex": THINK, "separate_reasoning": False}))
    m2 = m2.choices[0].message
    check("separate_reasoning false: the block stays content", m2.content.startswith("<think>\nfirst ")
          and getattr(m2, "reasoning_content", None) is None, repr(m2))
    parts = [getattr(ch.choices[0].delta, "reasoning_content", None)
             for ch in c.chat.completions.create(stream=True, **dict(kw, extra_body={
                 "regex": THINK, "stream_reasoning": False})) if ch.choices]
    parts = [p for p in parts if p]
    check("stream_reasoning false: the reasoning in one delta", parts == [rc], repr(parts))
    try:
        c.chat.completions.create(**dict(kw, extra_body={"separate_reasoning": "yes"}))
        check("separate_reasoning must be a boolean", False, "accepted")
    except openai.BadRequestError as e:
        check("separate_reasoning must be a boolean", "separate_reasoning" in str(e), str(e))

    # without a reasoning parser the think block is content, as it was generated
    m = client("/hermes").chat.completions.create(**dict(kw, model="hermes", tools=None,
                                                         extra_body={"regex": THINK})).choices[0].message
    check("no reasoning parser: <think> stays content", m.content.startswith("<think>\nfirst ")
          and getattr(m, "reasoning_content", None) is None, repr(m))


def reasoning_r1():
    # DeepSeek-R1's template opens <think> in the prompt: the output starts inside it
    c = client("/r1")
    kw = dict(model="r1", messages=MSGS, max_tokens=60, temperature=0,
              extra_body={"regex": "[a-z]{2,6} [a-z]{2,6}\n</think>\n\n[a-z]{2,6}"})
    m = c.chat.completions.create(**kw).choices[0].message
    check("deepseek-r1: output starting inside <think>", re.fullmatch(
        r"[a-z]{2,6} [a-z]{2,6}\n", getattr(m, "reasoning_content", "") or "")
        and re.fullmatch(r"[a-z]{2,6}", m.content), repr(m))
    content, reasoning, finish, _, _ = stream(c, **kw)
    check("deepseek-r1: streamed = non-streamed", reasoning == m.reasoning_content and content == m.content,
          "%r %r" % (reasoning, content))
    m = c.chat.completions.create(**dict(kw, extra_body={"regex": "[a-z]{2,6}"})).choices[0].message
    check("deepseek-r1: never closed: all reasoning", m.content == "" and
          re.fullmatch(r"[a-z]{2,6}", getattr(m, "reasoning_content", "") or ""), repr(m))


guard("qwen3: reasoning_content split off", reasoning_qwen3)
guard("deepseek-r1: output starting inside <think>", reasoning_r1)

report()
sys.exit(0)
