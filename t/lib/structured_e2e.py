"""Structured output end to end with the official openai client; one line per check:
   "ok <name>" or "not ok <name>: <why>". Used by t/140-structured.t."""
import json
import math
import re
import sys

import jsonschema
import openai
import pydantic

from e2e_report import check, guard, report

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=120)


def parse_pydantic():
    r = client.beta.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Invent a person. Reply in JSON."}],
        response_format=Person, max_tokens=80, temperature=0)
    p = r.choices[0].message.parsed
    check("parse: pydantic model", isinstance(p, Person) and 0 <= p.age <= 120, repr(r.choices[0]))
    jsonschema.validate(json.loads(r.choices[0].message.content), Person.model_json_schema())
    check("parse: content validates", True)


guard("parse: pydantic model", parse_pydantic)

SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 10},
    "unit": {"enum": ["c", "f"]},
    "days": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 7},
             "minItems": 1, "maxItems": 3}}, "required": ["city", "unit", "days"],
    "additionalProperties": False}
RF = {"type": "json_schema", "json_schema": {"name": "forecast", "schema": SCHEMA, "strict": True}}
MSG = [{"role": "user", "content": "Weather forecast request for Paris, as JSON."}]


def schema_stream():
    r = client.chat.completions.create(model=model, messages=MSG, response_format=RF,
                                       max_tokens=80, temperature=0)
    text = r.choices[0].message.content
    check("json_schema: finish stop", r.choices[0].finish_reason == "stop", repr(r.choices[0]))
    jsonschema.validate(json.loads(text), SCHEMA)
    check("json_schema: validates", True)
    parts = []
    for chunk in client.chat.completions.create(model=model, messages=MSG, response_format=RF,
                                                max_tokens=80, temperature=0, stream=True):
        for c in chunk.choices:
            if c.delta.content:
                parts.append(c.delta.content)
    check("json_schema: streamed = non-streamed", "".join(parts) == text,
          repr(("".join(parts), text)))


guard("json_schema", schema_stream)


def json_object():
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give a JSON object with key a = 1."}],
        response_format={"type": "json_object"}, max_tokens=60, temperature=0)
    c = r.choices[0]
    check("json_object: an object", c.finish_reason == "stop" and
          isinstance(json.loads(c.message.content), dict), repr(c))


guard("json_object: an object", json_object)


def regex_n():
    rx = r"(yes|no), [0-9]{2}"
    r = client.completions.create(model=model, prompt="Is the sky blue? Answer:", max_tokens=20,
                                  temperature=1.0, seed=7, n=3, extra_body={"regex": rx})
    texts = [c.text for c in r.choices]
    check("regex: n=3 sampled, all fullmatch", len(texts) == 3 and
          all(re.fullmatch(rx, t) for t in texts) and
          all(c.finish_reason == "stop" for c in r.choices), repr(texts))


guard("regex: n=3 sampled, all fullmatch", regex_n)


def ebnf():
    g = 'root ::= ("red" | "green" | "blue") " " [0-9] [0-9]?'
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Name a color and a number."}],
        max_tokens=12, temperature=0, extra_body={"ebnf": g})
    t = r.choices[0].message.content
    check("ebnf: matches", re.fullmatch(r"(red|green|blue) [0-9][0-9]?", t or ""), repr(t))


guard("ebnf: matches", ebnf)


def logprobs():
    # one byte allowed, then only EOS: the first token's constrained probability is 1
    r = client.completions.create(model=model, prompt="Say something", max_tokens=4,
                                  temperature=0, logprobs=3, extra_body={"ebnf": 'root ::= "\\n"'})
    c = r.choices[0]
    lp = c.logprobs.token_logprobs[0]
    check("logprobs: of the constrained distribution", c.text == "\n" and abs(lp) < 1e-4 and
          all(math.isinf(v) or v <= -1e-4 or k == "\n"
              for k, v in c.logprobs.top_logprobs[0].items()), repr(c.logprobs))


guard("logprobs: of the constrained distribution", logprobs)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "maxLength": 16},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["location", "unit"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 20}}, "required": ["query"]}}}
TMSG = [{"role": "user", "content": "What is the weather in Paris?"}]


def tools_named():
    r = client.chat.completions.create(
        model=model, messages=TMSG, tools=[WEATHER, SEARCH], max_tokens=60, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    c = r.choices[0]
    calls = c.message.tool_calls or []
    ok = c.finish_reason == "tool_calls" and len(calls) == 1 and \
        calls[0].type == "function" and calls[0].id and calls[0].function.name == "get_weather"
    if ok:
        jsonschema.validate(json.loads(calls[0].function.arguments),
                            WEATHER["function"]["parameters"])
    check("tools: named call with valid arguments", ok, repr(c))
    # streamed: the deltas joined equal the non-streamed call
    name, args, fin, ids = "", "", None, []
    for chunk in client.chat.completions.create(
            model=model, messages=TMSG, tools=[WEATHER, SEARCH], max_tokens=60, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True):
        for ch in chunk.choices:
            for d in ch.delta.tool_calls or []:
                if d.id:
                    ids.append(d.id)
                if d.function and d.function.name:
                    name += d.function.name
                if d.function and d.function.arguments:
                    args += d.function.arguments
            if ch.finish_reason:
                fin = ch.finish_reason
    check("tools: streamed deltas joined = non-streamed", ok and name == calls[0].function.name
          and args == calls[0].function.arguments and fin == "tool_calls" and len(ids) == 1,
          repr((name, args, fin, ids)))
    # the loop: the call and its result go back through the template
    # (SmolLM2's template concatenates content: "" rather than None)
    msgs = TMSG + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": calls[0].id, "type": "function", "function": {
            "name": calls[0].function.name, "arguments": calls[0].function.arguments}}]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": "18 degrees, sunny"}]
    r2 = client.chat.completions.create(model=model, messages=msgs, tools=[WEATHER, SEARCH],
                                        tool_choice="none", max_tokens=16, temperature=0)
    check("tools: a tool-calling loop round-trips", r2.choices[0].message.content is not None and
          not r2.choices[0].message.tool_calls, repr(r2.choices[0]))


guard("tools: named call with valid arguments", tools_named)


def tools_required():
    r = client.chat.completions.create(model=model, messages=TMSG, tools=[WEATHER, SEARCH],
                                       tool_choice="required", parallel_tool_calls=False,
                                       max_tokens=120, temperature=0)
    c = r.choices[0]
    calls = c.message.tool_calls or []
    good = c.finish_reason == "tool_calls" and len(calls) == 1 and \
        calls[0].function.name in ("get_weather", "search")
    if good:
        spec = WEATHER if calls[0].function.name == "get_weather" else SEARCH
        jsonschema.validate(json.loads(calls[0].function.arguments), spec["function"]["parameters"])
    check("tools: required picks one of the tools", good, repr(c))


guard("tools: required picks one of the tools", tools_required)


def errors():
    for name, kw, want in [
            ("bad schema -> 400 naming the keyword",
             dict(response_format={"type": "json_schema", "json_schema": {
                 "name": "x", "schema": {"type": "object", "not": {"type": "null"}}}}), "'not'"),
            ("bad regex -> 400 with the offset", dict(extra_body={"regex": "(ab"}), "offset 3"),
            ("bad ebnf -> 400 naming the rule", dict(extra_body={"ebnf": "root ::= item"}),
             "'item'"),
            ("two specs -> 400", dict(response_format={"type": "json_object"},
                                      extra_body={"regex": "a"}), "only one")]:
        try:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                           max_tokens=4, **kw)
            check(name, False, "no exception")
        except openai.BadRequestError as e:
            check(name, want in str(e), str(e))


guard("errors", errors)

report()
