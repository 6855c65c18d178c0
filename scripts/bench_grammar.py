#!/usr/bin/env python3
"""Grammar compile time and per-token mask time: srt's engine vs xgrammar, same run, same cases.

The cases are scripts/make_grammar_fixtures.py's (52 JSON schemas, 17 regexes, 10 GBNF
grammars). xgrammar walks each (random tokens among those allowed), timing its compile and every
fill_next_token_bitmask; build/bin/srt-bench-grammar then replays exactly those tokens with
srt_grammar. Compile time is like for like: xgrammar's compiler precomputes its token-mask cache,
so srt's figure includes srt_grammar_precompute (every state's token cache); the lazy figure (the
automaton alone, caches filled on first use) is shown too.

Vocabularies: "49k" is SmolLM2's (from the e2e tests' GGUF). "152k" is SmolLM2's plus
concatenations of random pairs of its tokens up to Qwen2.5's 151,665 tokens: synthetic (no 152k
tokenizer is on this machine), but both engines get the very same one.

    /tmp/xgr/bin/python scripts/bench_grammar.py .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        [--vocab 49k|152k] [--walks 2] [--steps 64]
"""
import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import xgrammar as xgr

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("fx", os.path.join(HERE, "make_grammar_fixtures.py"))
fx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fx)


def synth_152k(vocab, eos, rng):
    seen = set(vocab)
    pool = [t for t in vocab if t]
    out = list(vocab)
    while len(out) < 151665:
        t = rng.choice(pool) + rng.choice(pool)
        if t not in seen and len(t) <= 32:
            seen.add(t)
            out.append(t)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--vocab", default="49k", choices=["49k", "152k"])
    ap.add_argument("--walks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--bin", default=os.path.join(HERE, "..", "build", "bin", "srt-bench-grammar"))
    a = ap.parse_args()

    rng = random.Random(99)
    vocab, eos = fx.load_vocab(a.gguf)
    if a.vocab == "152k":
        vocab = synth_152k(vocab, eos, rng)
    n = len(vocab)
    info = xgr.TokenizerInfo(vocab, vocab_type=xgr.VocabType.RAW, vocab_size=n, stop_token_ids=[eos])
    cases = [("schema", json.dumps(s, ensure_ascii=False)) for s in fx.SCHEMAS] + \
            [("regex", r) for r in fx.REGEXES] + [("gbnf", g) for g in fx.GBNFS]

    tmp = tempfile.mkdtemp(prefix="bench_grammar.")
    vpath, wpath = os.path.join(tmp, "vocab.txt"), os.path.join(tmp, "walks.txt")
    with open(vpath, "w") as f:
        f.write("eos %d\n" % eos)
        for t in vocab:
            f.write((t.hex() if t else "-") + "\n")

    xres = []
    bm = xgr.allocate_token_bitmask(1, n)
    with open(wpath, "w", encoding="utf-8") as out:
        for kind, text in cases:
            comp = xgr.GrammarCompiler(info, cache_enabled=False)
            t0 = time.perf_counter()
            if kind == "schema":
                cg = comp.compile_json_schema(text, max_whitespace_cnt=fx.MAX_WS)
            elif kind == "regex":
                cg = comp.compile_regex(text)
            else:
                cg = comp.compile_grammar(text)
            t_compile = (time.perf_counter() - t0) * 1e6
            out.write("case %s %s\n" % (kind, json.dumps(text, ensure_ascii=False)))
            masks = []
            for w in range(a.walks):
                m = xgr.GrammarMatcher(cg)
                out.write("walk\n")
                for s in range(a.steps):
                    t0 = time.perf_counter()
                    m.fill_next_token_bitmask(bm)
                    masks.append((time.perf_counter() - t0) * 1e6)
                    allowed = fx.mask_ids(bm, n)
                    choices = allowed[allowed != eos]
                    if len(choices) == 0:
                        break
                    t = int(choices[rng.randrange(len(choices))])
                    out.write("step %d 0 0\n" % t)
                    m.accept_token(t)
            xres.append({"kind": kind, "compile_us": t_compile, "total_us": t_compile + sum(masks),
                         "mask_us": statistics.mean(masks) if masks else 0,
                         "mask_max_us": max(masks) if masks else 0})

    r = subprocess.run([a.bin, vpath, wpath], capture_output=True, text=True, check=True)
    sres = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    assert len(sres) == len(xres), (len(sres), len(xres), r.stderr)

    print("vocab %s (%d tokens), %d cases, %d walks x %d steps; xgrammar %s" %
          (a.vocab, n, len(cases), a.walks, a.steps, importlib.metadata.version("xgrammar")))
    print("%-7s %5s | %12s %12s %12s %7s | %10s %10s %7s | %12s %12s %7s" % (
        "kind", "cases", "xgr compile", "srt compile", "srt lazy", "ratio", "xgr mask", "srt mask",
        "ratio", "xgr total", "srt total", "ratio"))
    for kind in ("schema", "regex", "gbnf", "all"):
        xs = [x for x in xres if kind in ("all", x["kind"])]
        ss = [s for s in sres if kind in ("all", s["kind"])]
        xc = statistics.median(x["compile_us"] for x in xs)
        sc = statistics.median(s["compile_us"] for s in ss)
        sl = statistics.median(s["compile_lazy_us"] for s in ss)
        xm = statistics.mean(x["mask_us"] for x in xs)
        sm = statistics.mean(s["mask_us"] for s in ss)
        xt = statistics.median(x["total_us"] for x in xs)
        st = statistics.median(s["lazy_total_us"] for s in ss)
        print("%-7s %5d | %10.0fus %10.0fus %10.0fus %6.2fx | %8.1fus %8.1fus %6.2fx | "
              "%10.0fus %10.0fus %6.2fx" % (
                  kind, len(xs), xc, sc, sl, xc / sc if sc else 0, xm, sm, xm / sm if sm else 0,
                  xt, st, xt / st if st else 0))
    print("(ratio = xgrammar / srt: above 1 means srt is faster. compile: median per case, srt's "
          "with every state's token cache (like xgrammar's) and lazy; mask: mean per step; total: "
          "median per case of compile + every mask of its walks, srt lazy)")


if __name__ == "__main__":
    import importlib.metadata
    main()
