#!/usr/bin/env python3
"""Decode throughput with half the batch grammar-constrained vs none, against a running server.

Sends --batch requests at once to /v1/completions (temperature 0, --max-tokens each), twice:
all unconstrained, then half of them with a regex that cannot end before --max-tokens tokens
(so every request decodes the same number of tokens), and reports completion tokens per second
of both runs and their ratio (target: >= 0.95). Each run is repeated --repeat times; the best
of each is compared (the machine may be shared). Standard library only.

    scripts/bench_grammar_decode.py --base-url http://127.0.0.1:8080 [--batch 16] [--max-tokens 64]
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse

REGEX = "[a-z ,.]{4000,}"     # at most ~16 bytes a token: cannot end within 64 tokens


def one(url, model, prompt, max_tokens, constrained, out, i):
    u = urllib.parse.urlparse(url)
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if constrained:
        body["regex"] = REGEX
    else:
        body["ignore_eos"] = True
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", u.path.rstrip("/") + "/v1/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    if r.status != 200:
        raise SystemExit("HTTP %d: %s" % (r.status, data))
    out[i] = data["usage"]["completion_tokens"]


def run(url, model, batch, max_tokens, n_constrained):
    out = [0] * batch
    ts = [threading.Thread(target=one, args=(url, model, "Story %d: once upon a time" % i,
                                             max_tokens, i < n_constrained, out, i))
          for i in range(batch)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    return sum(out) / dt, sum(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("GET", u.path.rstrip("/") + "/v1/models")
    model = a.model or json.loads(c.getresponse().read())["data"][0]["id"]
    run(a.base_url, model, a.batch, 8, a.batch // 2)     # warm up (and the grammar cache)
    free, half = [], []
    for _ in range(a.repeat):
        free.append(run(a.base_url, model, a.batch, a.max_tokens, 0))
        half.append(run(a.base_url, model, a.batch, a.max_tokens, a.batch // 2))
    bf, bh = max(free), max(half)
    print("batch %d, %d tokens each: unconstrained %.1f tok/s, half constrained %.1f tok/s, "
          "ratio %.3f (best of %d; runs: %s / %s)" % (
              a.batch, a.max_tokens, bf[0], bh[0], bh[0] / bf[0], a.repeat,
              " ".join("%.1f" % f[0] for f in free), " ".join("%.1f" % h[0] for h in half)))


if __name__ == "__main__":
    main()
