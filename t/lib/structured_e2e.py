"""Structured output end to end with the official openai client; one line per check:
   "ok <name>" or "not ok <name>: <why>". Used by t/140-structured.t."""
import json
import math
import re
import sys

import jsonschema
import openai
import pydantic

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


def guard(name, fn):
    try:
        fn()
    except Exception as e:   # a failure of one check must not hide the others
        check(name, False, "%s: %s" % (type(e).__name__, e))


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

for name, good, why in results:
    print(("ok " if good else "not ok ") + name + ("" if good else ": " + why))
