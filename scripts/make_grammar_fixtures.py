#!/usr/bin/env python3
"""Ground truth for the grammar engine: xgrammar's token masks along random walks.

For every JSON schema, regex and GBNF grammar below, a few random walks pick tokens among those
xgrammar allows, on SmolLM2's tokenizer (49152 tokens, read from the GGUF the e2e tests use). Each
step records the chosen token and a digest of xgrammar's whole mask (count and the sum of
splitmix64 over the allowed ids); t/unit/test_grammar_xgr.c replays the walks with srt_grammar and compares every
mask without xgrammar installed. Completed outputs are also checked with jsonschema / re.fullmatch.

    python3 -m venv /tmp/xgr && /tmp/xgr/bin/pip install xgrammar gguf jsonschema
    /tmp/xgr/bin/python scripts/make_grammar_fixtures.py \\
        .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf t/fixtures/grammar/smollm2.txt

Options shared with the engine's defaults are explicit: whitespace between JSON tokens at most 4
(xgrammar max_whitespace_cnt=4, srt max_ws=4), strict mode (no properties beyond those listed).

Output format, one record per line (text fields are JSON strings):
    case <kind> <json text>          kind: schema | regex | gbnf
    walk
    step <token id> <n allowed> <digest hex>     the mask before choosing <token id>
    end <n allowed> <digest hex> <terminated 0|1>
"""
import importlib.metadata
import json
import os
import random
import re
import sys

import gguf
import jsonschema
import numpy as np
import xgrammar as xgr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bytelevel import byte_decoder  # noqa: E402

WALKS = 3
STEPS = 48
MAX_WS = 4


def load_vocab(path):
    r = gguf.GGUFReader(path)
    f = r.fields
    toks, types = f["tokenizer.ggml.tokens"], f["tokenizer.ggml.token_type"]
    dec = byte_decoder()
    vocab = []
    for i in range(len(toks.data)):
        s = bytes(toks.parts[toks.data[i]]).decode("utf-8")
        t = int(types.parts[types.data[i]][0])
        if t != 1:                  # control / user-defined: special, never in a grammar
            vocab.append(b"")
        else:
            vocab.append(bytes(dec[ch] for ch in s))
    eos = int(f["tokenizer.ggml.eos_token_id"].parts[-1][0])
    return vocab, eos


def digest(ids):
    """Sum of splitmix64(id) mod 2^64: order-free, so numpy can do 49k ids per step quickly."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return "%016x" % int(z.sum(dtype=np.uint64))


S = lambda **kw: dict(kw)
OBJ = lambda props, req=None, **kw: dict(type="object", properties=props,
                                         required=list(props) if req is None else req, **kw)

SCHEMAS = [
    {"type": "object"},
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "array", "items": {"type": "integer"}},
    OBJ({"name": {"type": "string"}, "age": {"type": "integer"}}),
    OBJ({"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"}},
        ["name"]),
    OBJ({"a": {"type": "boolean"}, "b": {"type": "null"}, "c": {"type": "number"}}, []),
    OBJ({"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}, ["city"]),
    OBJ({"id": {"type": "string", "format": "uuid"}, "created": {"type": "string",
                                                                  "format": "date-time"}}),
    OBJ({"day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "time"}}),
    OBJ({"email": {"type": "string", "format": "email"}}),
    OBJ({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2,4}$"}}),
    OBJ({"zip": {"type": "string", "pattern": "[0-9]{5}(-[0-9]{4})?"}}),
    OBJ({"short": {"type": "string", "minLength": 2, "maxLength": 5}}),
    OBJ({"word": {"type": "string", "minLength": 3}}),
    OBJ({"tiny": {"type": "string", "maxLength": 2}}),
    OBJ({"n": {"type": "integer", "minimum": 1, "maximum": 120}}),
    OBJ({"n": {"type": "integer", "minimum": 0}}),
    OBJ({"n": {"type": "integer", "minimum": -12, "exclusiveMaximum": 40}}),
    OBJ({"n": {"type": "integer", "maximum": 100}}),
    OBJ({"n": {"type": "integer", "minimum": 10, "maximum": 1000}}),
    OBJ({"n": {"type": "integer", "minimum": -500, "maximum": -20}}),
    OBJ({"tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}}),
    OBJ({"xs": {"type": "array", "items": {"type": "number"}, "minItems": 2}}),
    OBJ({"xs": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}}),
    OBJ({"pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]}}),
    OBJ({"v": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}}),
    OBJ({"v": {"oneOf": [OBJ({"kind": {"const": "a"}, "x": {"type": "integer"}}),
                         OBJ({"kind": {"const": "b"}, "y": {"type": "string"}})]}}),
    OBJ({"v": {"type": ["string", "integer"]}}),
    OBJ({"const": {"const": {"k": [1, 2], "s": "x"}}, "e": {"enum": ["x", 1, None, True, "é"]}}),
    OBJ({"meta": {"type": "object"}, "list": {"type": "array"}}),
    OBJ({"a": {"type": "string"}}, [], additionalProperties={"type": "integer"}),
    OBJ({"a": {"type": "string"}, "ab": {"type": "integer"}}, [], additionalProperties=True),
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"$defs": {"node": OBJ({"v": {"type": "integer"},
                            "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}})},
     "$ref": "#/$defs/node"},
    {"definitions": {"tree": OBJ({"name": {"type": "string"},
                                  "children": {"type": "array",
                                               "items": {"$ref": "#/definitions/tree"}}})},
     "$ref": "#/definitions/tree"},
    OBJ({"address": OBJ({"street": {"type": "string"}, "city": {"type": "string"},
                         "zip": {"type": "string", "pattern": "[0-9]{5}"}}, ["street", "city"]),
         "phones": {"type": "array", "items": OBJ({"type": {"enum": ["home", "work"]},
                                                   "number": {"type": "string"}})}}),
    # in the spirit of real API schemas (tool parameters, extraction tasks)
    OBJ({"location": {"type": "string", "description": "City and country"},
         "unit": {"type": "string", "enum": ["c", "f"]}}, ["location"]),
    OBJ({"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50},
         "filters": {"type": "array", "items": {"type": "string"}}}, ["query"]),
    OBJ({"title": {"type": "string"}, "rating": {"type": "number"}, "genres": {
        "type": "array", "items": {"enum": ["drama", "comedy", "horror"]}}, "released": {
        "type": "string", "format": "date"}}),
    OBJ({"order_id": {"type": "string", "pattern": "^ORD[0-9]{6}$"}, "items": {
        "type": "array", "minItems": 1, "items": OBJ({"sku": {"type": "string"}, "qty": {
            "type": "integer", "minimum": 1}})}, "status": {"enum": ["new", "paid", "shipped"]}}),
    OBJ({"sentiment": {"enum": ["positive", "negative", "neutral"]},
         "confidence": {"type": "number"}}),
    OBJ({"name": {"type": "string", "title": "Name"}, "born": {"type": "integer",
                                                              "minimum": 1800, "maximum": 2025},
         "alive": {"type": "boolean", "default": True}}, ["name"]),
    OBJ({"x": {"type": "number"}, "y": {"type": "number"}, "z": {"type": "number"}}, ["x", "y"]),
    OBJ({"steps": {"type": "array", "items": OBJ({"explanation": {"type": "string"},
                                                  "output": {"type": "string"}})},
         "final_answer": {"type": "string"}}),
    {"$defs": {"user": OBJ({"id": {"type": "integer"}, "handle": {"type": "string",
                                                                   "maxLength": 8}})},
     "type": "object", "properties": {"user": {"$ref": "#/$defs/user"},
                                      "friends": {"type": "array",
                                                  "items": {"$ref": "#/$defs/user"}}},
     "required": ["user", "friends"]},
    {"type": "array", "items": OBJ({"k": {"type": "string"}, "v": {"type": "integer"}}),
     "maxItems": 4},
    {"enum": ["red", "green", "blue", 42, None]},
    {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string",
                                                                  "maxLength": 1}]},
    OBJ({"ü": {"type": "string"}, "naïve": {"type": "boolean"}}, ["ü"]),
]

REGEXES = [
    r"\d{1,3}(\.\d+)?",
    r"[a-z]+@[a-z]+\.(com|org)",
    r"(true|false)",
    r"\"[^\"]*\"",
    r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?",
    r"\d{4}-\d{2}-\d{2}",
    r"(\+|-)?\d+",
    r"[0-9a-f]{8}",
    r"(yes|no|maybe)\.",
    r"\w+\s\w+",
    r"(ab|cd)*e",
    r"[^\n]{0,10}!",
    r"https?://[a-z]+\.[a-z]{2,3}(/[a-z]*)?",
    r"\(\d{3}\) \d{3}-\d{4}",
    r"[😀-😂]+ok",
    r"a.c.{0,3}",
    r"\S+\s\S+",
]

GBNFS = [
    'root ::= "yes" | "no"',
    'root ::= "[" item ("," item)* "]"\nitem ::= [0-9]+',
    'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ | "(" expr ")"',
    'root ::= "SELECT " cols " FROM " [a-z]+\ncols ::= "*" | [a-z]+ (", " [a-z]+)*',
    'root ::= (line "\\n")+\nline ::= [a-z ]{1,10}',
    'root ::= "<" tag ">" [^<]* "</" tag ">"\ntag ::= "b" | "i" | "em"',
    'root ::= obj\nobj ::= "{" (pair ("," pair)*)? "}"\npair ::= "\\"" [a-z]+ "\\":" val\n'
    'val ::= obj | [0-9]+ | "\\"" [a-z]* "\\""',
    'root ::= [^\\u00e9]{2,4} "\\u00e9"',
    'root ::= s\ns ::= "(" s ")" s | ""',
    'root ::= "a"{2,5} "b"?',
]


def mask_ids(bm, n):
    bits = np.unpackbits(bm.numpy().view(np.uint8), bitorder="little")[:n]
    return np.nonzero(bits)[0]


def run_case(out, kind, text, compiled, tok_info, vocab, eos, rng, check):
    matcher_cls = xgr.GrammarMatcher
    n = len(vocab)
    out.write("case %s %s\n" % (kind, json.dumps(text, ensure_ascii=False)))
    for w in range(WALKS):
        m = matcher_cls(compiled)
        bm = xgr.allocate_token_bitmask(1, n)
        produced = b""
        out.write("walk\n")
        terminated = False
        for s in range(STEPS):
            m.fill_next_token_bitmask(bm)
            allowed = mask_ids(bm, n)
            if len(allowed) == 0:
                break
            choices = allowed[allowed != eos]
            if bool((allowed == eos).any()) and (len(choices) == 0 or rng.random() < 0.35):
                t = eos
            else:
                t = int(choices[rng.randrange(len(choices))])
            out.write("step %d %d %s\n" % (t, len(allowed), digest(allowed)))
            assert m.accept_token(t)
            if t == eos:
                terminated = True
                break
            produced += vocab[t]
        allowed = []
        if not terminated:
            m.fill_next_token_bitmask(bm)
            allowed = mask_ids(bm, n)
        out.write("end %d %s %d\n" % (len(allowed), digest(allowed), int(terminated)))
        if terminated:
            check(produced.decode("utf-8"))


def main():
    gguf_path, out_path = sys.argv[1], sys.argv[2]
    vocab, eos = load_vocab(gguf_path)
    tok_info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=len(vocab),
                                 stop_token_ids=[eos])
    comp = xgr.GrammarCompiler(tok_info, cache_enabled=False)
    rng = random.Random(1234)
    with open(out_path, "w", encoding="utf-8") as out:
        out.write("# made by scripts/make_grammar_fixtures.py with xgrammar %s; vocab %d, eos %d,"
                  " max_ws %d\n" % (importlib.metadata.version("xgrammar"), len(vocab), eos, MAX_WS))
        for sch in SCHEMAS:
            text = json.dumps(sch, ensure_ascii=False)
            c = comp.compile_json_schema(text, max_whitespace_cnt=MAX_WS)

            def check(s, sch=sch):
                jsonschema.validate(json.loads(s), sch)
            run_case(out, "schema", text, c, tok_info, vocab, eos, rng, check)
        for rx in REGEXES:
            c = comp.compile_regex(rx)

            def check(s, rx=rx):
                # xgrammar's '.' also matches a newline, and its \s holds NBSP: re.DOTALL, and
                # the fixtures' \S/\s only meet ASCII and NBSP
                assert re.fullmatch(rx, s, re.DOTALL | re.ASCII) or \
                    re.fullmatch(rx.replace(r"\s", r"[\s\xa0]").replace(r"\S", r"[^\s\xa0]"), s,
                                 re.DOTALL | re.ASCII), (rx, s)
            run_case(out, "regex", rx, c, tok_info, vocab, eos, rng, check)
        for g in GBNFS:
            c = comp.compile_grammar(g)
            run_case(out, "gbnf", g, c, tok_info, vocab, eos, rng, lambda s: None)
    print("wrote %s: %d schemas, %d regexes, %d grammars" % (out_path, len(SCHEMAS),
                                                              len(REGEXES), len(GBNFS)))


if __name__ == "__main__":
    main()
