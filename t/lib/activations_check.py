"""Checks of "return_activations" against a forward hook on the same module (t/093): the
example library libsrt_hook_capture.so, loaded from srt_forward_hooks on model.layers.10 and
model.layers.3, dumps every row it sees (%.9g, exact for f32) to DUMP; each returned tensor
must equal those rows byte for byte (f16: the f32 rows rounded by numpy). One line per check,
"ok <name>" or "not ok <name>: <why>".

usage: activations_check.py BASE_URL MODEL DUMP_FILE SMALL_BASE_URL PLAIN_BASE_URL"""
import base64
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai

base, model, dump, small, plain = sys.argv[1:6]
client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=300)
PROMPT = "def add(a, b):\n    return"
HF_TEXT = " a + b\n\n# Example usage:\nadd_"   # HF transformers' greedy text (t/091)
H = 576
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


def tensor(a):
    dt = np.dtype("<f2") if a["dtype"] == "f16" else np.dtype("<f4")
    return np.frombuffer(base64.b64decode(a["data"]), dtype=dt).reshape(a["shape"])


def dump_size():
    with open(dump, "rb") as f:
        return len(f.read())


def dumped(offset, module):
    """{request_id: rows in position order} of what the hook saw since offset; a position
    seen twice (a recomputed prefix) is kept once, as the first time."""
    by = {}
    with open(dump, "rb") as f:
        f.seek(offset)
        for line in f.read().decode().splitlines():
            j = json.loads(line)
            if j["module"] == module:
                by.setdefault(j["request_id"], {}).setdefault(j["position"], j["values"])
    return {rid: np.array([rows[p] for p in sorted(rows)], dtype=np.float64).astype("<f4")
            for rid, rows in by.items() if sorted(rows) == list(range(len(rows)))}


def seq_mean(rows):
    acc = np.zeros(rows.shape[1], dtype=np.float64)
    for r in rows:                       # in position order, as the server sums
        acc += r.astype(np.float64)
    return (acc / len(rows)).astype("<f4")


def complete(acts, url_client=None, **kw):
    c = url_client or client
    args = dict(model=model, prompt=PROMPT, max_tokens=12, temperature=0)
    args.update(kw)
    return c.completions.create(extra_body={"return_activations": acts}, **args)


def acts_of(resp, i=0):
    return resp.model_dump()["choices"][i]["activations"]


ALL10 = {"module": "model.layers.10", "reduce": "all", "dtype": "f32"}
LAST10 = {"module": "model.layers.10", "reduce": "last", "dtype": "f16"}
MEAN10 = {"module": "model.layers.10", "reduce": "mean", "dtype": "f32"}

try:
    # 1. all, last and mean of one layer against the hook's rows
    off = dump_size()
    r = complete([ALL10, LAST10, MEAN10])
    P, G = r.usage.prompt_tokens, r.usage.completion_tokens
    check("the text is HF's (capturing changes nothing)", r.choices[0].text == HF_TEXT, repr(r.choices[0].text))
    a = acts_of(r)
    check("three tensors, in request order", [x["reduce"] for x in a] == ["all", "last", "mean"]
          and all(x["module"] == "model.layers.10" for x in a), str([(x["module"], x["reduce"]) for x in a]))
    all10, last10, mean10 = (tensor(x) for x in a)
    check("all: shape [prompt + completion - 1, hidden]", list(all10.shape) == [P + G - 1, H],
          "%s, P %d G %d" % (list(all10.shape), P, G))
    check("last and mean: shape [hidden]", list(last10.shape) == [H] and list(mean10.shape) == [H])
    hook = [v for v in dumped(off, "model.layers.10").values() if len(v) == P + G - 1]
    check("the hook saw one request with those positions", len(hook) == 1, "%d" % len(hook))
    rows = hook[0]
    check("all = the hook's rows, byte for byte", all10.tobytes() == rows.tobytes())
    check("last (f16) = the hook's last row rounded to f16, byte for byte",
          last10.tobytes() == rows[-1].astype("<f2").tobytes())
    check("mean = the rows' mean (summed in double, in order), byte for byte",
          mean10.tobytes() == seq_mean(rows).tobytes())

    # 2. the prompt is cached now: "all" still covers it; "last" uses the cache
    for _ in range(2):   # the first caches the prompt for requests without a namespace of their own
        plain_r = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0)
    cached = plain_r.usage.prompt_tokens_details.cached_tokens if plain_r.usage.prompt_tokens_details else 0
    check("a plain request hits the prefix cache", cached and cached > 0, "cached %s" % cached)
    r2 = complete([ALL10])
    check("all again, prompt cached for others: the same rows (the prompt is computed again)",
          tensor(acts_of(r2)[0]).tobytes() == all10.tobytes())
    off = dump_size()
    r3 = complete([{"module": "model.layers.10", "reduce": "last", "dtype": "f32"}])
    c3 = r3.usage.prompt_tokens_details.cached_tokens if r3.usage.prompt_tokens_details else 0
    check("last with a cached prefix: served from the cache", c3 > 0, "cached %s" % c3)
    check("last with a cached prefix: the same row as computed in full",
          tensor(acts_of(r3)[0]).tobytes() == rows[-1].tobytes())

    # 3. streaming: the tensors come in the chunk that finishes the choice
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0, stream=True,
                                            extra_body={"return_activations": [ALL10]}))
    fin = [c.model_dump()["choices"][0] for c in chunks if c.choices and c.choices[0].finish_reason]
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    check("streamed: the text is HF's", text == HF_TEXT, repr(text))
    check("streamed: the finishing chunk carries the same tensor",
          len(fin) == 1 and tensor(fin[0]["activations"][0]).tobytes() == all10.tobytes())
    check("streamed: no other chunk carries activations",
          sum(1 for c in chunks if c.choices and c.model_dump()["choices"][0].get("activations")) == 1)

    # 4. chat, n = 2: every choice has its own
    ch = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi!"}], max_tokens=6,
                                        temperature=0, n=2,
                                        extra_body={"return_activations": [
                                            {"module": "model.norm", "reduce": "last", "dtype": "f32"},
                                            {"module": "model.embed_tokens", "reduce": "all", "dtype": "f16"}]})
    d = ch.model_dump()["choices"]
    Pc, Gc = ch.usage.prompt_tokens, ch.usage.completion_tokens // 2
    check("chat n=2: both choices have two tensors", len(d) == 2 and all(len(c["activations"]) == 2 for c in d))
    check("chat n=2: greedy choices agree", tensor(d[0]["activations"][0]).tobytes()
          == tensor(d[1]["activations"][0]).tobytes())
    emb = tensor(d[0]["activations"][1])
    check("chat: embed_tokens 'all' covers prompt and output but the last token",
          emb.shape[0] == Pc + Gc - 1 and emb.shape[1] == H, "%s P %d G %d" % (emb.shape, Pc, Gc))

    # 5. continuous batching: plain and capturing requests side by side, chunked prefill
    off = dump_size()
    prompts = [PROMPT if i % 2 else "The capital of France is" for i in range(6)]
    def one(i):
        kw = dict(model=model, prompt=prompts[i], max_tokens=12, temperature=0)
        if i % 3 != 2:
            kw["extra_body"] = {"return_activations": [{"module": "model.layers.3", "reduce": "all", "dtype": "f32"}]}
        return client.completions.create(**kw)
    with ThreadPoolExecutor(6) as ex:
        rs = list(ex.map(one, range(6)))
    seen = dumped(off, "model.layers.3")
    ok_rows, texts = 0, {}
    for i, x in enumerate(rs):
        texts.setdefault(prompts[i], set()).add(x.choices[0].text)
        if i % 3 != 2:
            t = tensor(acts_of(x)[0])
            ok_rows += any(v.tobytes() == t.tobytes() for v in seen.values())
    check("batched: each capture equals the rows the hook saw for one request", ok_rows == 4, "%d of 4" % ok_rows)
    check("batched: every request of a prompt has the same text", all(len(v) == 1 for v in texts.values()))
    check("batched: and the add() prompt's is HF's", texts[PROMPT] == {HF_TEXT}, str(texts[PROMPT]))

    # 6. refusals
    def refused(name, status, acts, needle, c=None, **kw):
        try:
            complete(acts, c, **kw)
            check(name, False, "no error")
        except openai.APIStatusError as e:
            check(name, e.status_code == status and needle in str(e), "%d %s" % (e.status_code, e))
    refused("a layer the model does not have: 400 naming it", 400,
            [{"module": "model.layers.30", "reduce": "last"}], "model.layers.30")
    refused("a module that is not capturable: 400", 400, [{"module": "lm_head"}], "return_activations[0].module")
    refused("an unknown reduce: 400", 400, [{"module": "model.layers.1", "reduce": "max"}],
            "return_activations[0].reduce")
    refused("an unknown dtype: 400", 400, [{"module": "model.layers.1", "dtype": "bf16"}],
            "return_activations[0].dtype")
    refused("an unknown field: 400", 400, [{"module": "model.layers.1", "layer": 3}], "'layer'")
    refused("stop strings with activations: 400", 400, [LAST10], "'stop'", stop=["\n"])
    small_c = openai.OpenAI(base_url=small, api_key="unused", max_retries=0, timeout=300)
    plain_c = openai.OpenAI(base_url=plain, api_key="unused", max_retries=0, timeout=300)
    refused("past srt_max_activation_bytes: 413 with the figures", 413, [ALL10], "srt_max_activation_bytes",
            small_c)
    r = complete([LAST10], small_c)
    check("the same location: what fits is returned", tensor(acts_of(r)[0]).shape == (H,))
    refused("a location without srt_max_activation_bytes: 400", 400, [LAST10], "srt_max_activation_bytes", plain_c)
    r = plain_c.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0,
                                   extra_body={"return_activations": []})
    check("an empty list is no request", r.choices[0].text == HF_TEXT
          and "activations" not in r.model_dump()["choices"][0])
except Exception as e:   # report instead of dying: the test counts the lines
    check("checks ran", False, "%s: %s" % (type(e).__name__, e))

for name, good, why in results:
    print(("ok %s" % name) if good else ("not ok %s: %s" % (name, why)))
